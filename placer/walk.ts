/**
 * The placement walk. Fn copied this loop into every placer; here placers only order runners
 * and this one walk does the offering, waiting and giving up, so commit semantics cannot drift
 * between strategies.
 */
import { formatMs, systemClock } from './kernel/index.ts';
import { PlacerAbortedError, PlacerPoolError, PlacerTimeoutError } from './errors.ts';
import type { AbortWatch, Clock } from './kernel/index.ts';
import type { Placer, Runner, RunnerCall, RunnerPool, TryExecResult } from './types.ts';

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
  /**
   * What the walk checks for the call's abort: `call.signal` unless given. A caller whose
   * `call.signal` is made on demand (the gateway's, placer/kernel/abort.ts) passes the abort
   * behind it, so a walk that never sleeps never makes one.
   */
  abort?: AbortWatch;
  /**
   * Waits, in place of the pause between passes, until capacity may have appeared for `call`
   * (a gateway's wait queue): resolves to walk the pool once more, at the latest at the call's
   * placer deadline; rejects when the call aborts (the walk then reports it aborted) or with an
   * error that ends the call as it is (a full queue). Absent: the walk sleeps `retryAllDelay`.
   */
  waitForCapacity?(call: RunnerCall): Promise<void>;
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
 * One request the walk makes of whoever drives it: the pool's runners, an offer to one runner, or
 * the pause between passes. {@link walkSteps} yields these; {@link placeCall} answers them with
 * awaits on a real pool and clock, the virtual-clock simulator (k6/driver/vsim) synchronously on
 * its event queue, so both run the same walk.
 */
export type WalkStep<T> =
  | { readonly kind: 'list' }
  | { readonly kind: 'offer'; readonly runner: Runner<T> }
  | { readonly kind: 'sleep'; readonly ms: number };

/**
 * The driver's answer to a {@link WalkStep}: the runners listed for `list` (an array, as
 * `RunnerPool.runners` promises), the runner's result for `offer`, nothing once a `sleep` is over.
 * A step that failed is answered with `throw()` instead: the walk then sees the error where it
 * asked, as an awaited promise's rejection would surface.
 */
export type WalkAnswer<T> = readonly Runner<T>[] | TryExecResult<T> | undefined;

/** What {@link walkSteps} needs: {@link WalkOptions} with the clock's reading alone, since the driver sleeps. */
export interface WalkStepOptions {
  /** See {@link WalkOptions.retryAllDelay}. */
  retryAllDelay: number;
  /** The walk's clock, in ms; compared with `call.placerDeadline`. */
  now(): number;
  /** See {@link WalkOptions.onRetry}. */
  onRetry?: WalkOptions['onRetry'];
  /** See {@link WalkOptions.abort}. */
  abort?: AbortWatch;
}

/**
 * Offers `call` to the pool's runners in the order `placer` chooses, pass after pass, until one
 * commits, the placer deadline passes or the call's signal aborts. When one commits, the placer's
 * `placed()` hook, if any, hears of it before this resolves.
 *
 * Each pass asks the pool afresh, so runners that joined or left are seen. Between passes it
 * waits through `waitForCapacity` when given one (the gateway's wait queue), else sleeps
 * `retryAllDelay` (never past the deadline, and at least a `sleep(0)` so an empty pool cannot
 * spin the event loop). Abort is checked before the deadline, so a cancelled call is always
 * reported as cancelled even when its deadline has also passed.
 *
 * The walk's rules live in {@link walkSteps}; this drives them with the pool, the runners and the
 * clock, one await per step.
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
  const { retryAllDelay, clock = systemClock, onRetry, waitForCapacity, abort } = options;
  const walk = walkSteps<T>(call, placer, { retryAllDelay, now: () => clock.now(), onRetry, abort });
  let step = walk.next();
  while (!step.done) {
    const request = step.value;
    let answer: WalkAnswer<T>;
    try {
      if (request.kind === 'list') answer = await listRunners(call, pool);
      else if (request.kind === 'offer') answer = await request.runner.tryExec(call);
      else if (waitForCapacity) await waitForCapacity(call);
      else await clock.sleep(request.ms, call.signal);
    } catch (error) {
      // Thrown where the walk asked, so it ends as it would have awaiting the step itself.
      step = walk.throw(error);
      continue;
    }
    step = walk.next(answer);
  }
  return step.value;
}

/**
 * The walk itself, as steps for a driver to carry out (see {@link WalkStep}); its rules are
 * {@link placeCall}'s: the abort and deadline checked before every pass and every offer, abort
 * first; runners offered in the placer's order, each turn-down reported to `onRetry` (whatever it
 * throws ignored); `placed()` told of the commit (whatever it throws or rejects with ignored); and
 * between passes a pause of `retryAllDelay`, cut short at the deadline. It returns the placement,
 * or throws {@link placeCall}'s errors, including what a driver threw into it unchanged (bar a
 * failed sleep once the call aborted, which becomes PlacerAbortedError).
 *
 * Synchronous, so a driver that answers at once (the simulator's runners) pays no promise per
 * step; a driver that leaves the walk suspended must not resume it twice for one step.
 */
export function* walkSteps<T>(
  call: RunnerCall,
  placer: Placer,
  options: WalkStepOptions,
): Generator<WalkStep<T>, Placement<T>, WalkAnswer<T>> {
  const { retryAllDelay, now, onRetry } = options;
  const abort = options.abort ?? call.signal;
  const startedAt = now();
  let attempts = 0;
  let passes = 0;
  // The checks and the reports are module functions rather than closures: the simulator keeps a
  // walk per waiting call, tens of thousands at once, and each closure would be kept with it.
  for (;;) {
    stopIfDone(call, abort, now, startedAt, attempts);
    passes++;
    // The answers' types follow the step asked (see WalkAnswer); a generator has one type for all.
    const runners = (yield LIST) as readonly Runner<T>[];
    for (const runner of placer.order(call, runners)) {
      stopIfDone(call, abort, now, startedAt, attempts);
      attempts++;
      const result = (yield { kind: 'offer', runner }) as TryExecResult<T>;
      if (result.kind === 'placed') {
        tellPlaced(placer, call, runner);
        return { value: result.value, runner, attempts, passes };
      }
      if (result.kind === 'busy') report(onRetry, runner, 'busy');
      else report(onRetry, runner, 'error', result.error);
    }
    stopIfDone(call, abort, now, startedAt, attempts);
    const remaining = call.placerDeadline - now();
    try {
      yield { kind: 'sleep', ms: Math.min(retryAllDelay, remaining) };
    } catch (error) {
      if (abort.aborted) throw aborted(call, abort, attempts);
      throw error;
    }
  }
}

/** Throws when the walk must end: the call aborted (checked first), or its deadline has come. */
function stopIfDone(call: RunnerCall, abort: AbortWatch, now: () => number, startedAt: number, attempts: number): void {
  if (abort.aborted) throw aborted(call, abort, attempts);
  const at = now();
  if (at >= call.placerDeadline) throw timedOut(call, at - startedAt, attempts);
}

/** Tells `onRetry` of a turned-down offer; see WalkOptions.onRetry for why its throw is ignored. */
function report(
  onRetry: WalkOptions['onRetry'],
  runner: Runner<unknown>,
  reason: 'busy' | 'error',
  error?: Error,
): void {
  try {
    onRetry?.(runner, reason, error);
  } catch {
    // A broken metrics hook must not fail a placeable call.
  }
}

const LIST: WalkStep<never> = Object.freeze({ kind: 'list' });

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

function aborted(call: RunnerCall, abort: AbortWatch, attempts: number): PlacerAbortedError {
  return new PlacerAbortedError(
    `call for function "${call.fn}" was aborted before a runner accepted it (${plural(attempts, 'attempt')})`,
    attempts,
    { cause: abort.reason },
  );
}

function timedOut(call: RunnerCall, waited: number, attempts: number): PlacerTimeoutError {
  return new PlacerTimeoutError(
    `no runner accepted the call for function "${call.fn}" after waiting ${formatMs(waited)} (${plural(attempts, 'attempt')})`,
    attempts,
  );
}

function plural(n: number, noun: string): string {
  return `${n} ${noun}${n === 1 ? '' : 's'}`;
}
