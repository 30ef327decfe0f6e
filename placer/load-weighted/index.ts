/**
 * Load-weighted random, LiveKit's worker dispatch: each next runner is drawn at random among those
 * not yet offered this pass, with weight max(0, 1 - load), its spare capacity. Calls spread in
 * proportion to free room, so a half-busy runner gets half an idle one's share, and randomness
 * keeps several gateways reading the same stale reports from all picking the same runner.
 *
 * The first runner is drawn by rejection: a runner picked uniformly is kept with probability equal
 * to its weight, else another is picked. That draws exactly in proportion to spare capacity while
 * reading one load per try (1 / mean spare tries on average: five at 80 % busy), whatever the
 * pool's size. Only when the walk asks past the first are the others' loads read and ordered.
 */
import { drawIndex } from '../kernel/index.ts';
import { byLoad, loadOf, readLoad } from '../load.ts';
import type { LoadedRunner } from '../load.ts';
import { loadAwareDescriptor, loadAwarePlacer, resolveLoadAware } from '../load-options.ts';
import type { LoadAwareConfig, LoadAwareOptions } from '../load-options.ts';
import { hash32 } from '../pool-view.ts';
import type { PoolView } from '../pool-view.ts';
import { homeOf } from '../least-loaded/choose.ts';
import type { Placer, Runner, RunnerCall } from '../types.ts';

/** Options for {@link createLoadWeightedPlacer}. */
export type LoadWeightedOptions = LoadAwareOptions;

/**
 * Tries of the rejection draw before it gives way to an exact draw over every runner: on a pool
 * 90 % busy on average, 64 tries all miss about once in 850 decisions.
 */
export const LOAD_WEIGHTED_TRIES = 64;

/**
 * Creates a placer named `load-weighted`. Runners with no spare capacity (load 1 or more) have
 * weight 0 and are never drawn; LiveKit leaves them out, but here they follow everyone else,
 * least loaded first, because a load is only an estimate and a runner that looks full may still
 * have a slot: the walk learns that from a fast busy answer, which costs little.
 * @throws PlacerConfigError naming a bad option.
 */
export function createLoadWeightedPlacer(options: LoadWeightedOptions = {}): Placer {
  return loadAwarePlacer('load-weighted', resolveLoadAware(options), loadWeightedPass);
}

/** A load-weighted pass: the rejection draw's runner, then the rest in weighted order, drawn only if asked for. */
function* loadWeightedPass<R extends Runner<unknown>>(
  call: RunnerCall,
  view: PoolView<R>,
  config: LoadAwareConfig,
): Generator<R, void, undefined> {
  const first = drawByRejection(view, call.key, config);
  if (first !== undefined) yield first;
  yield* weightedOrder(view, first, config);
}

/** A runner drawn with probability proportional to its spare capacity, or undefined when {@link LOAD_WEIGHTED_TRIES} tries all missed. */
function drawByRejection<R extends Runner<unknown>>(
  view: PoolView<R>,
  key: string,
  config: LoadAwareConfig,
): R | undefined {
  const { sorted } = view;
  if (sorted.length === 0) return undefined;
  const now = config.now();
  for (let t = 0; t < LOAD_WEIGHTED_TRIES; t++) {
    // The first try is the key's home, so a session returns to its cache as often as the home's
    // spare room allows; every runner is still drawn in proportion to its spare room over all keys.
    const runner = sorted[t === 0 ? homeOf(hash32(key), sorted.length) : drawIndex(config.random, sorted.length)]!;
    const spare = 1 - loadOf(readLoad(runner), now, config.staleAfterMs);
    if (spare > 0 && uniform(config.random) < spare) return runner;
  }
  return undefined;
}

/**
 * Every runner of `view` but `skip`: those with spare capacity in the order of successive weighted
 * draws without replacement (Efraimidis and Spirakis: each gets the key u^(1/weight) for a uniform
 * u, largest first, the same distribution as drawing one at a time), then the full ones by load.
 */
function* weightedOrder<R extends Runner<unknown>>(
  view: PoolView<R>,
  skip: R | undefined,
  config: LoadAwareConfig,
): Generator<R, void, undefined> {
  const now = config.now();
  const spare: { runner: R; key: number }[] = [];
  const full: LoadedRunner<R>[] = [];
  for (const runner of view.sorted) {
    if (runner === skip) continue;
    const load = loadOf(readLoad(runner), now, config.staleAfterMs);
    // log(u) / weight orders as u^(1 / weight) does, without underflow for small weights.
    if (load < 1) spare.push({ runner, key: Math.log(1 - uniform(config.random)) / (1 - load) });
    else full.push({ runner, load });
  }
  spare.sort((a, b) => b.key - a.key);
  for (const entry of spare) yield entry.runner;
  full.sort(byLoad);
  for (const entry of full) yield entry.runner;
}

/** `random()` forced into [0, 1), as the kernel's draws force it: a stray value must not fail a placeable call. */
function uniform(random: () => number): number {
  const r = random();
  return r >= 0 ? Math.min(r, 1 - Number.EPSILON) : 0;
}

/** The registry's entry. */
export const descriptor = loadAwareDescriptor('load-weighted', createLoadWeightedPlacer);
