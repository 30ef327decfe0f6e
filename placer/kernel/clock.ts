/**
 * The real clock. The walk takes a {@link Clock} so tests drive time by hand; this is the one
 * production code uses when none is given.
 */
import { performance } from 'node:perf_hooks';
import { MAX_TIMER_MS } from './validate.ts';

/**
 * Time as sluice sees it: one clock per process, handed to everything that reads time, so tests
 * drive it by hand and never sleep.
 */
export interface Clock {
  /** Milliseconds since the epoch, with sub-millisecond resolution. */
  now(): number;
  /** Resolves after `ms`, or rejects with the signal's reason when it aborts first. */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

/**
 * Wall-clock time, because call deadlines are absolute epoch milliseconds shared with the
 * gateway and runners, but with sub-millisecond resolution (the monotonic clock offset by its
 * origin): a call's net latency is a difference of two readings minus a runner-reported time
 * in fractional ms, and Date.now() would round a fast call to 0. `sleep` clears its timer on
 * abort so cancelled calls leave nothing behind.
 */
// Read once: the origin never moves, and the getter costs a fifth of a reading.
const TIME_ORIGIN = performance.timeOrigin;
export const systemClock: Clock = Object.freeze({
  now(): number {
    return TIME_ORIGIN + performance.now();
  },
  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return sleep(ms, signal);
  },
});

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  if (signal?.aborted) return Promise.reject(signal.reason);
  // NaN or negative would make setTimeout fire at once anyway; say so explicitly.
  let left = Number.isFinite(ms) && ms > 0 ? ms : 0;
  return new Promise<void>((resolve, reject) => {
    let timer: ReturnType<typeof setTimeout>;
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const arm = (): void => {
      const step = Math.min(left, MAX_TIMER_MS);
      left -= step;
      timer = setTimeout(() => {
        if (left > 0) return arm();
        signal?.removeEventListener('abort', onAbort);
        resolve();
      }, step);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
    arm();
  });
}
