/**
 * One utilisation number per runner, from the gateway's own in-flight count and the runner's
 * report, so every load-aware placer weighs runners the same way.
 */
import type { RunnerLoad, Runner } from './types.ts';

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
 * Every runner with its load, sorted by id. Read once, eagerly, because a pass's order may be
 * iterated across awaits while loads move; sorted so a seeded random picks the same runners
 * whatever order the pool lists them in.
 */
export function loadsOf<R extends Runner<unknown>>(
  runners: readonly R[],
  now: number,
  staleAfterMs: number,
): LoadedRunner<R>[] {
  return (idOrderOf(runners).sorted as readonly R[]).map((runner) => ({
    runner,
    load: loadOf(readLoad(runner), now, staleAfterMs),
  }));
}

/** {@link loadsOf}'s entries, with what a placer that finds runners by id or weighs the spread needs. */
export interface IndexedLoads<R> {
  /** The same entries, in the same order, as {@link loadsOf}. */
  readonly loaded: LoadedRunner<R>[];
  /** Each id's position in `loaded`; an id listed twice maps to its first entry, as `find` would. */
  readonly positions: ReadonlyMap<string, number>;
  /** The least load in `loaded`; Infinity when it is empty. */
  readonly min: number;
  /** The greatest load in `loaded`; -Infinity when it is empty. */
  readonly max: number;
}

/**
 * {@link loadsOf} plus, without another pass over the pool, an id -> position map and the least
 * and greatest load. The map is built once per pool array (cached with its id order), so a placer
 * that asks "is this runner listed, and where" costs a lookup per call, not a set of every id.
 */
export function indexedLoadsOf<R extends Runner<unknown>>(
  runners: readonly R[],
  now: number,
  staleAfterMs: number,
): IndexedLoads<R> {
  const order = idOrderOf(runners);
  const sorted = order.sorted as readonly R[];
  const loaded: LoadedRunner<R>[] = [];
  let min = Infinity;
  let max = -Infinity;
  for (const runner of sorted) {
    const load = loadOf(readLoad(runner), now, staleAfterMs);
    loaded.push({ runner, load });
    min = Math.min(min, load);
    max = Math.max(max, load);
  }
  order.positions ??= positionsOf(order.sorted);
  return { loaded, positions: order.positions, min, max };
}

/** A runner list's id order, kept per list by {@link idOrderOf}. */
interface IdOrder {
  /** The list's contents when it was sorted, to notice a list changed in place. */
  readonly contents: readonly Runner<unknown>[];
  readonly sorted: readonly Runner<unknown>[];
  /** Each id's position in `sorted`; built on first use, since most placers never ask. */
  positions?: ReadonlyMap<string, number>;
}

/** The id order of each runner list seen. */
const idOrders = new WeakMap<readonly Runner<unknown>[], IdOrder>();

/**
 * `runners`' id order, sorted once per list: pools hand out the same array until their
 * membership changes, and a sort of 10,000 ids per call was most of a decision's cost. The
 * contents are compared (one pass, no string compares) in case a list was changed in place.
 */
function idOrderOf(runners: readonly Runner<unknown>[]): IdOrder {
  const hit = idOrders.get(runners);
  if (hit && hit.contents.length === runners.length && hit.contents.every((r, i) => r === runners[i])) return hit;
  const order: IdOrder = { contents: [...runners], sorted: [...runners].sort((a, b) => compareIds(a.id, b.id)) };
  idOrders.set(runners, order);
  return order;
}

/** Each id's first position in `sorted`. */
function positionsOf(sorted: readonly Runner<unknown>[]): ReadonlyMap<string, number> {
  const positions = new Map<string, number>();
  sorted.forEach((runner, i) => {
    if (!positions.has(runner.id)) positions.set(runner.id, i);
  });
  return positions;
}

/**
 * `first`, then everyone else in `loaded` from least to most loaded. The rest are sorted only
 * if the walk asks past the first: with a free pool it never does.
 */
export function* firstThenByLoad<R extends Runner<unknown>>(
  first: LoadedRunner<R>,
  loaded: readonly LoadedRunner<R>[],
): Generator<R, void, undefined> {
  yield first.runner;
  for (const entry of loaded.filter((e) => e !== first).sort(byLoad)) yield entry.runner;
}

/** Least loaded first; equal loads by id, so the order is the same on every gateway. */
export function byLoad(a: LoadedRunner<Runner<unknown>>, b: LoadedRunner<Runner<unknown>>): number {
  return a.load - b.load || compareIds(a.runner.id, b.runner.id);
}

/** Code-unit order, not localeCompare: the order must not depend on the process's locale. */
export function compareIds(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
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
 * SGLang's guard, between a runner's `load` and the least loaded runner's: out of balance when
 * both gaps are exceeded. Both are needed: the absolute one keeps a small gap on a quiet pool
 * (0.2 against 0) from breaking affinity, the relative one a wide gap between runners that are
 * all busy. A pool of one is never out of balance.
 */
export function outOfBalance(load: number, { loaded, min }: IndexedLoads<unknown>, gaps: BalanceThresholds): boolean {
  if (loaded.length < 2) return false;
  return load - min > gaps.balanceAbsThreshold && load > gaps.balanceRelThreshold * min;
}
