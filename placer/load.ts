/**
 * One utilisation number per runner, from the gateway's own in-flight count and the runner's
 * report, so every load-aware placer weighs runners the same way.
 */
import { compareIds, poolViewOf } from './pool-view.ts';
import type { PoolView } from './pool-view.ts';
import type { RunnerLoad, Runner } from './types.ts';

export { compareIds } from './pool-view.ts';

/**
 * Reports older than this are ignored, in ms: llm-d's endpoint picker treats engine metrics as
 * stale after 2 s, and runners heartbeat every second, so two missed beats and the report goes.
 */
export const LOAD_STALE_AFTER_MS = 2_000;

/**
 * How much a full KV cache adds to a runner's load: less than one slot's worth on any runner with
 * up to 100 slots, so it only orders runners whose slot use is (nearly) the same. See {@link loadOf}.
 */
export const KV_CACHE_WEIGHT = 0.01;

/**
 * A runner's utilisation: 0 idle, 1 every slot in use, above 1 queueing. Never NaN or negative,
 * so placers may sort on it; absent or garbled fields read as unknown, not as 0 or Infinity.
 *
 * - Own: `inFlight / slots`. Immediate, so a burst this gateway just sent shows at once.
 * - Reported, while fresh (`now - at <= staleAfterMs`): `(running + waiting) / slots`. It sees
 *   calls from other gateways and the engine's queue, but lags by up to a heartbeat.
 * - The two are merged by max, not summed: the report already counts this gateway's calls, so a
 *   sum would count them twice; max takes whichever source sees more pressure (llm-d's advice to
 *   count your own in-flight requests because scraped metrics lag under bursts).
 * - KV-cache use is added times {@link KV_CACHE_WEIGHT}, a tie-breaker rather than llm-d's equal
 *   blend (queue x2, KV x2): here a runner with no free slot answers busy and the walk moves on,
 *   so slot use is the hard limit and must dominate; a blend would let a runner with every slot
 *   taken but little KV in use read half-loaded and draw traffic it can only refuse. Among runners
 *   equally busy, the one with more free KV cache will preempt later, so it goes first.
 *
 * Without `slots` the counts are used as they are (as if each runner had one slot): they still
 * order runners correctly against each other, and a placer cannot know capacity it was not told.
 */
export function loadOf(load: RunnerLoad | undefined, now: number, staleAfterMs: number = LOAD_STALE_AFTER_MS): number {
  if (load === undefined || load === null) return 0;
  const slots = load.slots !== undefined && Number.isFinite(load.slots) && load.slots > 0 ? load.slots : 1;
  const own = (count(load.inFlight) ?? 0) / slots;
  const report = load.reported;
  if (report === undefined || report === null || !(now - report.at <= staleAfterMs)) return own;
  const running = count(report.running);
  const waiting = count(report.waiting);
  const queue = running === undefined && waiting === undefined ? 0 : ((running ?? 0) + (waiting ?? 0)) / slots;
  const kv = share(report.kvCacheUsage) ?? 0;
  return Math.max(own, queue) + kv * KV_CACHE_WEIGHT;
}

/**
 * `runner.load()`, or undefined when the runner has none or its load() throws: a broken load
 * reading must cost the call its load-awareness, never the call itself.
 */
export function readLoad(runner: Runner<unknown>): RunnerLoad | undefined {
  try {
    return typeof runner.load === 'function' ? runner.load() : undefined;
  } catch {
    return undefined;
  }
}

/** A runner with its utilisation, read once per pass. */
export interface LoadedRunner<R> {
  readonly runner: R;
  /** {@link loadOf} at the time of the pass. */
  readonly load: number;
}

/**
 * Every runner with its load, sorted by id: O(n), for custom placers that weigh the whole pool.
 * The built-in placers read only the runners they consider ({@link thenByLoad} reads the rest
 * when the walk asks past them); sorted so a seeded random picks the same runners whatever order
 * the pool lists them in.
 */
export function loadsOf<R extends Runner<unknown>>(
  runners: readonly R[],
  now: number,
  staleAfterMs: number,
): LoadedRunner<R>[] {
  return poolViewOf(runners).sorted.map((runner) => ({
    runner,
    load: loadOf(readLoad(runner), now, staleAfterMs),
  }));
}

/**
 * `first` in its order, then every other runner of `view` from least to most loaded. The rest's
 * loads are read and sorted only when the walk asks past `first`: a pass that commits on one of
 * them reads nothing more, and one that goes on reads loads as they are by then.
 */
export function* thenByLoad<R extends Runner<unknown>>(
  first: readonly R[],
  view: PoolView<R>,
  now: () => number,
  staleAfterMs: number,
): Generator<R, void, undefined> {
  yield* first;
  yield* othersByLoad(first, view, now(), staleAfterMs);
}

/**
 * Every runner of `view` but those in `offered`, from least to most loaded (equal loads by id).
 * Every load is read once, O(n); they are then taken from a binary heap, O(n) to build and
 * O(log n) a runner, rather than sorted: a walk this far on a nearly full pool usually commits on
 * one of the first few, so sorting them all would be mostly wasted.
 */
export function* othersByLoad<R extends Runner<unknown>>(
  offered: readonly R[],
  view: PoolView<R>,
  now: number,
  staleAfterMs: number,
): Generator<R, void, undefined> {
  // A few are looked through; many (kv-aware's holders) are put in a set once.
  const skip = offered.length > 8 ? new Set(offered) : undefined;
  const heap: LoadedRunner<R>[] = [];
  for (const runner of view.sorted) {
    if (!(skip ? skip.has(runner) : offered.includes(runner)))
      heap.push({ runner, load: loadOf(readLoad(runner), now, staleAfterMs) });
  }
  for (let i = (heap.length >> 1) - 1; i >= 0; i--) siftDown(heap, i, heap.length);
  for (let size = heap.length; size > 0; size--) {
    const top = heap[0]!;
    heap[0] = heap[size - 1]!;
    siftDown(heap, 0, size - 1);
    yield top.runner;
  }
}

/** Moves `heap[i]` down until neither child (within `size`) orders before it by {@link byLoad}. */
function siftDown<R extends Runner<unknown>>(heap: LoadedRunner<R>[], i: number, size: number): void {
  const entry = heap[i]!;
  for (;;) {
    let child = 2 * i + 1;
    if (child >= size) break;
    if (child + 1 < size && byLoad(heap[child + 1]!, heap[child]!) < 0) child++;
    if (byLoad(heap[child]!, entry) >= 0) break;
    heap[i] = heap[child]!;
    i = child;
  }
  heap[i] = entry;
}

/** Least loaded first; equal loads by id, so the order is the same on every gateway. */
export function byLoad(a: LoadedRunner<Runner<unknown>>, b: LoadedRunner<Runner<unknown>>): number {
  return a.load - b.load || compareIds(a.runner.id, b.runner.id);
}

/** A count as reported, or undefined when it is not a finite non-negative number. */
function count(value: number | undefined): number | undefined {
  return typeof value === 'number' && Number.isFinite(value) && value >= 0 ? value : undefined;
}

/** A share clamped to [0, 1], or undefined when it is not a finite number. */
function share(value: number | undefined): number | undefined {
  return typeof value === 'number' && Number.isFinite(value) ? Math.min(1, Math.max(0, value)) : undefined;
}

/** The load guard's two gaps (SGLang's rule), as the cache-aware placers take them in their options. */
export interface BalanceThresholds {
  /** Load gap, in `loadOf` units, above which a runner is out of balance. */
  readonly balanceAbsThreshold: number;
  /** Ratio of the runner's load to the least loaded one's above which it is out of balance. */
  readonly balanceRelThreshold: number;
}

/**
 * SGLang's guard, between a runner's `load` and `least`, the load of the runner least-loaded order
 * would offer first: out of balance when both gaps are exceeded. Both are needed: the absolute
 * one keeps a small gap on a quiet pool (0.2 against 0) from breaking affinity, the relative one a
 * wide gap between runners that are all busy. Against the least loaded runner least-loaded would
 * pick rather than the whole pool's minimum, so the guard reads a bounded number of loads.
 */
export function outOfBalance(load: number, least: number, gaps: BalanceThresholds): boolean {
  return load - least > gaps.balanceAbsThreshold && load > gaps.balanceRelThreshold * least;
}
