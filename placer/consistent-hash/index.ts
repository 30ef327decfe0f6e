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
import { readLoad } from '../load.ts';
import { poolViewOf } from '../pool-view.ts';
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
   * still stay home. A runner without `load()` counts as none in flight; when the key's home has
   * none (a pool without load reporting), the plain ring order. On a pool of more than
   * {@link BOUND_SAMPLE} runners the mean is estimated from that many of them.
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

/**
 * Runners whose in-flight counts are summed for the load bound's mean; a larger pool's mean is
 * taken over this many spaced evenly round the ring, starting at the key's home, which is within
 * about 5 % of the whole pool's mean on a busy fleet (well inside the bound's 25 %) and costs the
 * same whatever the pool's size.
 */
export const BOUND_SAMPLE = 16;

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
 * a runner over it may still be the only one with a free slot. The walk on from the home is lazy:
 * a decision reads the home's count (and the bound's sample), and more only as the walk asks.
 * @throws PlacerConfigError when `loadFactor` is not a finite number of at least 1.
 */
export function createConsistentHashPlacer(options: ConsistentHashOptions = {}): Placer {
  const { loadFactor: factor = consistentHashDefaults.loadFactor } = options;
  const loadFactor = check.number('loadFactor', factor, { min: 1 });

  return {
    name: 'consistent-hash',
    order<R extends Runner<unknown>>(call: RunnerCall, runners: readonly R[]): Iterable<R> {
      if (runners.length === 0) return [];
      const { sorted } = poolViewOf(runners);
      const start = jumpConsistentHash(fnv1a64(call.key), sorted.length);
      // A pool without load reporting keeps the plain ring.
      if (typeof sorted[start]!.load !== 'function') return rotate(sorted, start);
      return bounded(sorted, start, boundOf(sorted, start, loadFactor));
    },
    preferred(call: RunnerCall, runners: readonly Runner<unknown>[]): string | undefined {
      // The key's home on the ring, whatever the bound says of its load now.
      if (runners.length === 0) return undefined;
      const { sorted } = poolViewOf(runners);
      return sorted[jumpConsistentHash(fnv1a64(call.key), sorted.length)]!.id;
    },
  };
}

/** A runner's own in-flight count, 0 when unknown. */
function inFlightOf(runner: Runner<unknown>): number {
  const n = readLoad(runner)?.inFlight;
  return typeof n === 'number' && Number.isFinite(n) && n > 0 ? n : 0;
}

/**
 * The in-flight count above which a runner is passed over: `loadFactor x (total + 1) / n`, the
 * total taken over the whole ring when it has at most {@link BOUND_SAMPLE} runners, else estimated
 * from that many spaced evenly from `start` (so the same call reads the same runners).
 */
function boundOf(ring: readonly Runner<unknown>[], start: number, loadFactor: number): number {
  const n = ring.length;
  if (n <= BOUND_SAMPLE) {
    let total = 0;
    for (const runner of ring) total += inFlightOf(runner);
    return (loadFactor * (total + 1)) / n;
  }
  let sampled = 0;
  for (let s = 0; s < BOUND_SAMPLE; s++) sampled += inFlightOf(ring[(start + Math.floor((s * n) / BOUND_SAMPLE)) % n]!);
  return (loadFactor * ((sampled * n) / BOUND_SAMPLE + 1)) / n;
}

/** The ring from `start`, runners within the bound first, then those over it, each in ring order. */
function* bounded<R extends Runner<unknown>>(
  ring: readonly R[],
  start: number,
  bound: number,
): Generator<R, void, undefined> {
  const n = ring.length;
  const over: R[] = [];
  for (let step = 0; step < n; step++) {
    const runner = ring[(start + step) % n]!;
    if (inFlightOf(runner) > bound) over.push(runner);
    else yield runner;
  }
  yield* over;
}

/** The registry's entry. */
export const descriptor: PlacerDescriptor = Object.freeze({
  name: 'consistent-hash',
  defaults: consistentHashDefaults,
  optionKeys: Object.freeze(Object.keys(consistentHashDefaults)),
  create: (options: Record<string, unknown> | undefined) =>
    createConsistentHashPlacer(options as ConsistentHashOptions),
});
