/**
 * Load-weighted random, LiveKit's worker dispatch: each next runner is drawn at random among those
 * not yet offered this pass, with weight max(0, 1 - load), its spare capacity. Calls spread in
 * proportion to free room, so a half-busy runner gets half an idle one's share, and randomness
 * keeps several gateways reading the same stale reports from all picking the same runner.
 *
 * The first runner is drawn by rejection: a proposed runner is kept with probability given by its
 * spare room, else another is proposed. The first proposal is the call key's home, so a session's
 * calls go back to the engine caching its history; the rest are uniform. A decision reads the
 * loads of up to 16 runners (for the mean spare room) and one per proposal (1 / mean spare on
 * average: five at 80 % busy), whatever the pool's size. Only when the walk asks past the first
 * are the others' loads read and ordered. While every runner is busy, the home is the call's
 * preference in the gateway's wait queue.
 */
import { drawIndex } from '../kernel/index.ts';
import { byLoad, loadOf, readLoad } from '../load.ts';
import type { LoadedRunner } from '../load.ts';
import { loadAwareDescriptor, loadAwarePlacer, resolveLoadAware } from '../load-options.ts';
import type { LoadAwareConfig, LoadAwareOptions } from '../load-options.ts';
import { hash32 } from '../pool-view.ts';
import type { PoolView } from '../pool-view.ts';
import { homeOf, keyHomeOf, sample } from '../least-loaded/choose.ts';
import type { Placer, Runner, RunnerCall } from '../types.ts';

/** Options for {@link createLoadWeightedPlacer}. */
export type LoadWeightedOptions = LoadAwareOptions;

/**
 * Tries of the rejection draw before it gives way to a weighted order over every runner: on a
 * pool 90 % busy on average, 64 tries all miss about once in 800 decisions.
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
  return {
    ...loadAwarePlacer('load-weighted', resolveLoadAware(options), loadWeightedPass),
    preferred: keyHomeOf,
  };
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

/** Runners whose spare room is averaged for the home's chance: the whole pool up to this many, else a sample this size. */
export const MEAN_SAMPLE = 16;

/**
 * A runner drawn by its spare room, or undefined when {@link LOAD_WEIGHTED_TRIES} tries all
 * missed. The first proposal is the key's home, kept with probability spare / mean spare (at most
 * 1); the others are uniform, kept with probability spare. Over keys spread evenly over homes, a
 * runner with less room than the mean is drawn in proportion to its room (scaled up a little by
 * what the capped homes pass on), and a home with at least the mean's room keeps its keys: a
 * session returns to its cache whenever its home has average room.
 */
function drawByRejection<R extends Runner<unknown>>(
  view: PoolView<R>,
  key: string,
  config: LoadAwareConfig,
): R | undefined {
  const { sorted } = view;
  const n = sorted.length;
  if (n === 0) return undefined;
  const now = config.now();
  const spareOf = (runner: R): number => Math.max(0, 1 - loadOf(readLoad(runner), now, config.staleAfterMs));
  const home = sorted[homeOf(hash32(key), n)]!;
  const mean = meanSpare(sorted, spareOf, config.random);
  if (mean > 0 && uniform(config.random) < spareOf(home) / mean) return home;
  for (let t = 1; t < LOAD_WEIGHTED_TRIES; t++) {
    const runner = sorted[drawIndex(config.random, n)]!;
    if (uniform(config.random) < spareOf(runner)) return runner;
  }
  return undefined;
}

/** The mean spare room of `sorted`: exact up to {@link MEAN_SAMPLE} runners, else over a sample of that many. */
function meanSpare<R>(sorted: readonly R[], spareOf: (runner: R) => number, random: () => number): number {
  const n = sorted.length;
  let sum = 0;
  if (n <= MEAN_SAMPLE) {
    for (const runner of sorted) sum += spareOf(runner);
    return sum / n;
  }
  for (const position of sample(n, MEAN_SAMPLE, random)) sum += spareOf(sorted[position]!);
  return sum / MEAN_SAMPLE;
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
