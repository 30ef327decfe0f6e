/**
 * Least-loaded by the power of two choices: draw two runners at random and offer the call first
 * to the less loaded of the pair, then to everyone else from least to most loaded.
 *
 * Two random candidates rather than the global minimum because loads are partly stale (reports
 * lag by up to a heartbeat) and several gateways read the same reports: all of them sending to
 * the one runner that looked idlest is how a fleet herds. Two choices already keep the maximum
 * load within log log n of the mean (Mitzenmacher, 2001) while spreading picks.
 */
import { firstThenByLoad, type LoadedRunner } from '../load.ts';
import { loadAwareDescriptor, loadAwarePlacer, type LoadAwareOptions } from '../load-options.ts';
import { drawIndex } from '../kernel/index.ts';
import type { Placer, Runner } from '../types.ts';

/** Options for {@link createLeastLoadedPlacer}. */
export type LeastLoadedOptions = LoadAwareOptions;

/**
 * Creates a placer named `least-loaded`. Loads come from each runner's `load()` through
 * `loadOf`; a runner without one reads as idle. Nothing is skipped: a busy winner is followed by
 * every other runner, so the walk still reaches a free one on the same pass.
 * @throws PlacerConfigError naming a bad option.
 */
export function createLeastLoadedPlacer(options: LeastLoadedOptions = {}): Placer {
  return loadAwarePlacer('least-loaded', options, leastLoadedOrder);
}

/**
 * The least-loaded order over runners already read by `loadsOf` (sorted by id): the better of two
 * random draws, then the rest by load ascending, equal loads by id. Exported for placers that fall
 * back to it, such as `prefix-affinity`.
 *
 * A tie within the pair goes to the first one drawn, not the lower id: at light traffic every
 * runner reads 0, and an id tie-break would then never put the highest id first. The first draw
 * is as random as the pair, so ties stay fair and still deterministic under a seeded `random`.
 */
export function leastLoadedOrder<R extends Runner<unknown>>(
  loaded: readonly LoadedRunner<R>[],
  random: () => number,
): Iterable<R> {
  const n = loaded.length;
  if (n === 0) return [];
  if (n === 1) return [loaded[0]!.runner];
  const i = drawIndex(random, n);
  // The second draw skips the first, so the pair is always two distinct runners.
  let j = drawIndex(random, n - 1);
  if (j >= i) j++;
  const first = loaded[i]!;
  const second = loaded[j]!;
  const winner = second.load < first.load ? second : first;
  return firstThenByLoad(winner, loaded);
}

/** The registry's entry. */
export const descriptor = loadAwareDescriptor('least-loaded', createLeastLoadedPlacer);
