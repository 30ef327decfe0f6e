/**
 * Timing a cheap in-process operation (a placement decision) without the timer dominating it:
 * calls run in batches and the clock is read once per batch, after a warm-up that lets the JIT
 * settle, until either the call budget or the time budget runs out, whichever comes first.
 */
import { performance } from 'node:perf_hooks';
import { BenchOptionError } from './errors.ts';

/** How long a cost measurement may run. */
export interface CostBounds {
  /** Calls made and thrown away before timing starts. @default 200 */
  warmup?: number;
  /** Most timed calls. @default 2000 */
  maxCalls?: number;
  /** Longest timed stretch, ms; the batch that crosses it is the last. @default 2000 */
  maxMs?: number;
  /** Calls between two clock reads. @default 20 */
  batch?: number;
  /** Time source, ms; injected so tests need no real time. @default performance.now */
  now?: () => number;
}

/** What one measurement found. */
export interface CostSample {
  /** Timed calls made. */
  calls: number;
  elapsedMs: number;
  /** Microseconds per call; NaN when nothing was timed. */
  usPerCall: number;
}

/**
 * Calls `fn(0)`, `fn(1)`, … and reports its mean cost. A call returning a promise is awaited, so
 * an async operation is timed to its settlement; a sync one is not slowed by a needless await.
 * @throws {BenchOptionError} for a bound that is not a positive integer (warmup may be 0).
 */
export async function measureCost(fn: (i: number) => unknown, bounds: CostBounds = {}): Promise<CostSample> {
  const { warmup = 200, maxCalls = 2_000, maxMs = 2_000, batch = 20, now = () => performance.now() } = bounds;
  for (const [name, value, min] of [
    ['warmup', warmup, 0],
    ['maxCalls', maxCalls, 1],
    ['maxMs', maxMs, 1],
    ['batch', batch, 1],
  ] as const) {
    if (!Number.isSafeInteger(value) || value < min)
      throw new BenchOptionError(name, `${name} must be an integer of at least ${min}, got ${String(value)}`);
  }
  let i = 0;
  // Inlined rather than a helper, so a sync call costs no await of its own.
  for (let w = 0; w < warmup; w++) {
    const result = fn(i++);
    if (result instanceof Promise) await result;
  }
  let calls = 0;
  const start = now();
  let elapsed = 0;
  while (calls < maxCalls && elapsed < maxMs) {
    const n = Math.min(batch, maxCalls - calls);
    for (let b = 0; b < n; b++) {
      const result = fn(i++);
      if (result instanceof Promise) await result;
    }
    calls += n;
    elapsed = now() - start;
  }
  return { calls, elapsedMs: elapsed, usPerCall: calls > 0 && elapsed > 0 ? (elapsed * 1000) / calls : Number.NaN };
}

/** How many times dearer the largest pool is than the smallest: `cost(last) / cost(first)`; NaN when either is unknown. */
export function growth(costs: readonly number[]): number {
  const first = costs[0];
  const last = costs[costs.length - 1];
  return first !== undefined && last !== undefined && Number.isFinite(first) && Number.isFinite(last) && first > 0
    ? last / first
    : Number.NaN;
}
