/**
 * Load-weighted random, LiveKit's worker dispatch: each next runner is drawn at random among those
 * not yet offered this pass, with weight max(0, 1 - load), its spare capacity. Calls spread in
 * proportion to free room, so a half-busy runner gets half an idle one's share, and randomness
 * keeps several gateways reading the same stale reports from all picking the same runner.
 */
import { byLoad, type LoadedRunner } from '../load.ts';
import { loadAwareDescriptor, loadAwarePlacer, type LoadAwareOptions } from '../load-options.ts';
import { drawWeighted } from '../kernel/index.ts';
import type { Placer, Runner } from '../types.ts';

/** Options for {@link createLoadWeightedPlacer}. */
export type LoadWeightedOptions = LoadAwareOptions;

/**
 * Creates a placer named `load-weighted`. Runners with no spare capacity (load 1 or more) have
 * weight 0 and are never drawn; LiveKit leaves them out, but here they follow everyone else,
 * least loaded first, because a load is only an estimate and a runner that looks full may still
 * have a slot: the walk learns that from a fast busy answer, which costs little.
 * @throws PlacerConfigError naming a bad option.
 */
export function createLoadWeightedPlacer(options: LoadWeightedOptions = {}): Placer {
  return loadAwarePlacer('load-weighted', options, loadWeightedOrder);
}

/**
 * The load-weighted order over runners whose loads were read at the start of the pass: the draws
 * happen as the walk asks for the next runner, so a pass that commits on the first offer uses
 * one random number.
 */
function loadWeightedOrder<R extends Runner<unknown>>(
  loaded: readonly LoadedRunner<R>[],
  random: () => number,
): Iterable<R> {
  const spare = loaded.filter((entry) => entry.load < 1);
  const full = loaded.filter((entry) => !(entry.load < 1)).sort(byLoad);
  return weightedThenFull(
    spare.map((entry) => entry.runner),
    spare.map((entry) => 1 - entry.load),
    full.map((entry) => entry.runner),
    random,
  );
}

/** Draws `candidates` without replacement by `weights`, then yields `rest` as given. */
function* weightedThenFull<R>(
  candidates: R[],
  weights: number[],
  rest: readonly R[],
  random: () => number,
): Generator<R, void, undefined> {
  while (candidates.length > 0) {
    const i = drawWeighted(random, weights);
    // Unreachable while every weight is above 0 (load < 1); kept so no runner is ever lost.
    if (i < 0) break;
    yield candidates[i]!;
    candidates.splice(i, 1);
    weights.splice(i, 1);
  }
  yield* candidates;
  yield* rest;
}

/** The registry's entry. */
export const descriptor = loadAwareDescriptor('load-weighted', createLoadWeightedPlacer);
