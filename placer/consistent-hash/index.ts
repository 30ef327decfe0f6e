/**
 * Consistent hash: the call's affinity key picks a start runner, then the rest are offered in
 * turn. Calls sharing a key (a session, a user) land on the same runner while it has room, which
 * keeps its KV cache warm; when it is busy they spill to the same next runner, as in Fn.
 *
 * With bounded load (Mirrokni, Thorup and Zadimoghaddam, "Consistent Hashing with Bounded Loads",
 * 2018) a runner already carrying more than its share is passed over for the next on the ring
 * before it says busy, so one hot key cannot pile onto one runner while the others idle.
 */
import { PlacerConfigError } from '../errors.ts';
import { fnv1a64, jumpConsistentHash } from '../hash.ts';
import { compareIds, readLoad } from '../load.ts';
import { rotate } from '../rotate.ts';
import type { PlacerDescriptor } from '../descriptor.ts';
import type { Placer, Runner, RunnerCall } from '../types.ts';
import { checksFor } from '../kernel/index.ts';

/** Options for {@link createConsistentHashPlacer}. */
export interface ConsistentHashOptions {
  /**
   * How far above the mean in-flight count a runner may go before the ring passes it over: a
   * runner is moved behind the others when its in-flight count is above
   * `loadFactor x (total in-flight + 1) / runners` (the + 1 is the call being placed). 1.25 is
   * the usual choice: hot keys spill once a runner has 25% more than its share, while most keys
   * still stay home. Only runners exposing `load()` are counted; with none, the plain ring order.
   * Trade-off kept from the paper: while fewer calls are in flight than there are runners the
   * bound is below 1, so a home runner with any call in flight is passed over; affinity is
   * strongest under the load where spilling matters, weakest when the pool is nearly idle.
   * @default see consistentHashDefaults
   */
  loadFactor?: number;
}

/** The defaults, frozen so no caller can change them for everyone else. */
export const consistentHashDefaults = Object.freeze({ loadFactor: 1.25 });

const check = checksFor(PlacerConfigError);

interface SortedEntry {
  /** The pool's array as it was when sorted, element by element, to notice in-place changes. */
  readonly snapshot: readonly Runner<unknown>[];
  readonly sorted: readonly Runner<unknown>[];
}

/**
 * Creates a consistent-hash placer named `consistent-hash`: FNV-1a 64 of `call.key`, then jump
 * consistent hash over the runners sorted by id, then a walk on from there, wrapping.
 *
 * Runners are sorted by id because a pool may list them in any order, and a bucket number only
 * means the same runner if the order is the same everywhere. Adding a runner whose id sorts last
 * moves about 1/n of keys, all to it; a runner that is down or busy is walked past, so only its
 * keys go elsewhere. Removing a runner from the pool renumbers those sorted after it, which moves
 * more keys than that: a limit of jump hash, which assumes buckets come and go at the end.
 *
 * Runners over the load bound (see {@link ConsistentHashOptions.loadFactor}) are moved after the
 * others, in ring order, never dropped: the bound reads only this gateway's in-flight counts, and
 * a runner over it may still be the only one with a free slot.
 * @throws PlacerConfigError when `loadFactor` is not a finite number of at least 1.
 */
export function createConsistentHashPlacer(options: ConsistentHashOptions = {}): Placer {
  const { loadFactor: factor = consistentHashDefaults.loadFactor } = options;
  const loadFactor = check.number('loadFactor', factor, { min: 1 });
  // Pools usually return the same array until membership changes, so sort once per array.
  const cache = new WeakMap<readonly Runner<unknown>[], SortedEntry>();

  const sortedById = <R extends Runner<unknown>>(runners: readonly R[]): readonly R[] => {
    const hit = cache.get(runners);
    // O(n) identity check instead of trusting the array never changed: a pool that mutates and
    // returns its own array would otherwise get a stale order.
    if (hit && sameItems(hit.snapshot, runners)) return hit.sorted as readonly R[];
    const sorted = [...runners].sort(byId);
    cache.set(runners, { snapshot: [...runners], sorted });
    return sorted;
  };

  return {
    name: 'consistent-hash',
    order<R extends Runner<unknown>>(call: RunnerCall, runners: readonly R[]): Iterable<R> {
      if (runners.length === 0) return [];
      const sorted = sortedById(runners);
      const start = jumpConsistentHash(fnv1a64(call.key), sorted.length);
      const inFlight = inFlightOf(sorted);
      return inFlight === undefined ? rotate(sorted, start) : bounded(sorted, start, inFlight, loadFactor);
    },
    preferred(call: RunnerCall, runners: readonly Runner<unknown>[]): string | undefined {
      // The key's home on the ring, whatever the bound says of its load now.
      if (runners.length === 0) return undefined;
      const sorted = sortedById(runners);
      return sorted[jumpConsistentHash(fnv1a64(call.key), sorted.length)]!.id;
    },
  };
}

/**
 * Each runner's in-flight count (0 when unknown), or undefined when no runner has `load()`, so a
 * pool without load reporting keeps the plain ring and its lazy order.
 */
function inFlightOf(runners: readonly Runner<unknown>[]): number[] | undefined {
  if (!runners.some((runner) => typeof runner.load === 'function')) return undefined;
  return runners.map((runner) => {
    const n = readLoad(runner)?.inFlight;
    return typeof n === 'number' && Number.isFinite(n) && n > 0 ? n : 0;
  });
}

/** The ring from `start`, runners within the bound first, then those over it, each in ring order. */
function bounded<R>(ring: readonly R[], start: number, inFlight: readonly number[], loadFactor: number): R[] {
  const n = ring.length;
  const total = inFlight.reduce((sum, count) => sum + count, 0);
  const bound = (loadFactor * (total + 1)) / n;
  const within: R[] = [];
  const over: R[] = [];
  for (let step = 0; step < n; step++) {
    const i = (start + step) % n;
    (inFlight[i]! > bound ? over : within).push(ring[i]!);
  }
  return within.concat(over);
}

function byId(a: Runner<unknown>, b: Runner<unknown>): number {
  return compareIds(a.id, b.id);
}

function sameItems(a: readonly unknown[], b: readonly unknown[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** The registry's entry. */
export const descriptor: PlacerDescriptor = Object.freeze({
  name: 'consistent-hash',
  defaults: consistentHashDefaults,
  optionKeys: Object.freeze(Object.keys(consistentHashDefaults)),
  create: (options: Record<string, unknown> | undefined) =>
    createConsistentHashPlacer(options as ConsistentHashOptions),
});
