/**
 * The placement walk. Fn copied this loop into every placer; here placers only order runners
 * and this one walk does the offering, waiting and giving up, so commit semantics cannot drift
 * between strategies.
 */
import { systemClock } from './kernel/index.ts';
import { PlacerAbortedError, PlacerPoolError, PlacerTimeoutError } from './errors.ts';
import type { Clock } from './kernel/index.ts';
import type { Placer, Runner, RunnerCall, RunnerPool } from './types.ts';

/** How the walk paces itself and whom it tells about runners that did not take the call. */
export interface WalkOptions {
  /** Pause after a full pass in which no runner committed, in ms (see `PlacerConfig`). */
  retryAllDelay: number;
  /** Time source; tests pass a fake one so nothing really sleeps. Defaults to {@link systemClock}. */
  clock?: Clock;
  /**
   * Called for every offer a runner turned down without committing: `busy` (no free slot) or
   * `error` (the call never reached it, with the reason). Meant for metrics and logs; whatever it
   * throws is ignored, because observing the walk must never change where a call goes.
   */
  onRetry?(runner: Runner<unknown>, reason: 'busy' | 'error', error?: Error): void;
}

/** Where the call went and what it took to get there. */
export interface Placement<T> {
  /** What the committed runner returned. */
  value: T;
  /** The runner that committed; the call must not be sent anywhere else from now on. */
  runner: Runner<T>;
  /** Offers made, including the one that committed (Fn's "attempts per call" metric). */
  attempts: number;
  /** Times the pool was asked for runners. */
  passes: number;
}

/**
 * Offers `call` to the pool's runners in the order `placer` chooses, pass after pass, until one
 * commits, the placer deadline passes or the call's signal aborts. When one commits, the placer's
 * `placed()` hook, if any, hears of it before this resolves.
 *
 * Each pass asks the pool afresh, so runners that joined or left are seen. Between passes it
 * sleeps `retryAllDelay` (never past the deadline, and at least a `sleep(0)` so an empty pool
 * cannot spin the event loop). Abort is checked before the deadline, so a cancelled call is always
 * reported as cancelled even when its deadline has also passed.
 *
 * @throws PlacerAbortedError when `call.signal` aborts before a runner commits (cause: its reason).
 * @throws PlacerTimeoutError when the deadline passes before a runner commits.
 * @throws PlacerPoolError when the pool cannot list runners; that is not retried.
 * @throws whatever a runner's `tryExec` rejected with, unchanged and never retried: the call may
 *   already have reached that runner, and running an inference call twice is a bug. Likewise
 *   whatever `placer.order` throws, since a broken placer will not work better on the next pass.
 */
export async function placeCall<T>(
  call: RunnerCall,
  pool: RunnerPool<T>,
  placer: Placer,
  options: WalkOptions,
): Promise<Placement<T>> {
  const { retryAllDelay, clock = systemClock, onRetry } = options;
  const startedAt = clock.now();
  let attempts = 0;
  let passes = 0;

  const stopIfDone = (): void => {
    if (call.signal.aborted) throw aborted(call, attempts);
    if (clock.now() >= call.placerDeadline) throw timedOut(call, clock.now() - startedAt, attempts);
  };
  const report = (runner: Runner<unknown>, reason: 'busy' | 'error', error?: Error): void => {
    try {
      onRetry?.(runner, reason, error);
    } catch {
      // See WalkOptions.onRetry: a broken metrics hook must not fail a placeable call.
    }
  };

  for (;;) {
    stopIfDone();
    passes++;
    const runners = await listRunners(call, pool);
    for (const runner of placer.order(call, runners)) {
      stopIfDone();
      attempts++;
      const result = await runner.tryExec(call);
      if (result.kind === 'placed') {
        tellPlaced(placer, call, runner);
        return { value: result.value, runner, attempts, passes };
      }
      if (result.kind === 'busy') report(runner, 'busy');
      else report(runner, 'error', result.error);
    }
    stopIfDone();
    const remaining = call.placerDeadline - clock.now();
    try {
      await clock.sleep(Math.min(retryAllDelay, remaining), call.signal);
    } catch (error) {
      if (call.signal.aborted) throw aborted(call, attempts);
      throw error;
    }
  }
}

/** See Placer.placed: the call is committed, so nothing the placer does here may fail it. */
function tellPlaced(placer: Placer, call: RunnerCall, runner: Runner<unknown>): void {
  try {
    const result: unknown = placer.placed?.(call, runner);
    // A custom placer may be async; its rejection must not surface as an unhandled one either.
    if (result instanceof Promise) result.catch(() => {});
  } catch {
    // Ignored, as above.
  }
}

async function listRunners<T>(call: RunnerCall, pool: RunnerPool<T>): Promise<readonly Runner<T>[]> {
  let runners: unknown;
  try {
    runners = await pool.runners(call);
  } catch (error) {
    throw new PlacerPoolError(`runner pool failed to list runners for function "${call.fn}"`, { cause: error });
  }
  // A pool written in plain JS could hand back anything; fail here rather than inside a placer.
  if (!Array.isArray(runners)) {
    throw new PlacerPoolError(`runner pool returned ${typeof runners} instead of an array for function "${call.fn}"`);
  }
  return runners as readonly Runner<T>[];
}

function aborted(call: RunnerCall, attempts: number): PlacerAbortedError {
  return new PlacerAbortedError(
    `call for function "${call.fn}" was aborted before a runner accepted it (${plural(attempts, 'attempt')})`,
    attempts,
    { cause: call.signal.reason },
  );
}

function timedOut(call: RunnerCall, waited: number, attempts: number): PlacerTimeoutError {
  return new PlacerTimeoutError(
    `no runner accepted the call for function "${call.fn}" after waiting ${waited} ms (${plural(attempts, 'attempt')})`,
    attempts,
  );
}

function plural(n: number, noun: string): string {
  return `${n} ${noun}${n === 1 ? '' : 's'}`;
}
