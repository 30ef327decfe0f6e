/**
 * KV-aware placement: send a call where it costs the least work, counting what the engines'
 * caches really hold of its prompt (the call's `cache`, filled from the engines' own KV-cache
 * events) rather than where similar prompts were sent. The truth comes from the engines, so it
 * sees evictions, restarted engines and other gateways' calls, and places the same with one
 * gateway or many.
 */
import { loadAwareDescriptor } from '../load-options.ts';
import { byLoad, loadOf, othersByLoad, outOfBalance, readLoad, thenByLoad } from '../load.ts';
import type { LoadedRunner } from '../load.ts';
import { leastLoadedDefaults, leastLoadedPass } from '../least-loaded/index.ts';
import { leastLoadedChoice } from '../least-loaded/choose.ts';
import { poolViewOf } from '../pool-view.ts';
import type { PoolView } from '../pool-view.ts';
import type { PlacerDescriptor } from '../descriptor.ts';
import type { Placer, PromptCache, Runner, RunnerCall } from '../types.ts';
import { kvAwareDefaults, resolveKvAware } from './options.ts';
import type { KvAwareConfig, KvAwareOptions } from './options.ts';

export type { KvAwareConfig, KvAwareOptions } from './options.ts';
export { kvAwareDefaults } from './options.ts';

/**
 * Creates a placer named `kv-aware`. On each pass:
 *
 * 1. A call without cache truth (`call.cache` absent: no feed for its model, no tokenizer, a short
 *    prompt), or whose prompt no listed runner holds more of than the fleet-wide floor:
 *    least-loaded order (with every runner holding as much, only load tells them apart).
 * 2. Otherwise each runner holding more is costed at the work the call would be there,
 *    `(prompt tokens - cached tokens + overheadTokens) x (1 + loadWeight x load)`, and so is the
 *    runner least-loaded would offer first (its choice among `choices` runners), which holds the
 *    floor. A runner whose cache is unknown counts as holding nothing, so it is weighed by load alone.
 * 3. The load guard: when the cheapest holder's load is out of balance with that least-loaded
 *    runner's (both of prefix-affinity's gaps, SGLang's rule), least-loaded order.
 * 4. Otherwise the holders from cheapest up, as far as they are cheaper than the runner from
 *    step 2, then that runner, then everyone else from least to most loaded.
 *
 * A decision reads the loads of the holders and of least-loaded's few candidates; the others'
 * are read only if the walk asks past those.
 * The placer keeps no state beyond its options: what it knows is the call's cache truth and the
 * runners' loads, so two gateways with the same truth and loads place alike.
 * @throws PlacerConfigError naming a bad option.
 */
export function createKvAwarePlacer(options: KvAwareOptions = {}): Placer {
  const config = resolveKvAware(options);
  // The least-loaded choice it falls back on and costs against, with least-loaded's defaults.
  const choice = { ...config, ...leastLoadedDefaults };
  return {
    name: 'kv-aware',
    order<R extends Runner<unknown>>(call: RunnerCall, runners: readonly R[]): Iterable<R> {
      const view = poolViewOf(runners);
      const cache = call.cache;
      if (cache === undefined || cache.holders.size === 0) return leastLoadedPass(call, view, choice);
      const now = config.now();
      const holders = costedHolders(cache, view, now, config);
      const best = cheapestOf(holders);
      const fresh = leastLoadedChoice(view, call.key, now, choice)!;
      if (best === undefined || outOfBalance(best.entry.load, fresh.load, config))
        return thenByLoad([fresh.runner], view, config.now, config.staleAfterMs);
      const floor = cache.known(fresh.runner.id) ? (cache.floor ?? 0) : 0;
      const freshCost = costOf(cache.promptTokens, floor, fresh.load, config);
      return cheapestFirst(best, holders, freshCost, fresh.runner, view, config);
    },
    preferred(call: RunnerCall, runners: readonly Runner<unknown>[]): string | undefined {
      const cache = call.cache;
      if (cache === undefined || cache.holders.size === 0) return undefined;
      return cheapestOf(costedHolders(cache, poolViewOf(runners), config.now(), config))?.entry.runner.id;
    },
  };
}

/** A listed runner holding some of the prompt, with the cost of the call there. */
interface CostedHolder<R extends Runner<unknown>> {
  readonly entry: LoadedRunner<R>;
  readonly cost: number;
}

/** The work of the call on a runner holding `cached` of its tokens, at `load`. */
function costOf(promptTokens: number, cached: number, load: number, config: KvAwareConfig): number {
  const prefill = Math.max(0, promptTokens - cached) + config.overheadTokens;
  return prefill * (1 + config.loadWeight * load);
}

/** The holders the pool lists, each with its cost, in no particular order: loads read for them alone. */
function costedHolders<R extends Runner<unknown>>(
  cache: PromptCache,
  view: PoolView<R>,
  now: number,
  config: KvAwareConfig,
): CostedHolder<R>[] {
  const holders: CostedHolder<R>[] = [];
  for (const [id, cached] of cache.holders) {
    const position = view.positions.get(id);
    if (position === undefined || !(cached > 0)) continue;
    const runner = view.sorted[position]!;
    const load = loadOf(readLoad(runner), now, config.staleAfterMs);
    holders.push({ entry: { runner, load }, cost: costOf(cache.promptTokens, cached, load, config) });
  }
  return holders;
}

/** Cheaper first; equal costs by load, then id, so every gateway orders alike. */
function byCost<R extends Runner<unknown>>(a: CostedHolder<R>, b: CostedHolder<R>): number {
  return a.cost - b.cost || byLoad(a.entry, b.entry);
}

/** The cheapest holder, found in one pass: the walk rarely asks past it, so the rest are not sorted yet. */
function cheapestOf<R extends Runner<unknown>>(holders: readonly CostedHolder<R>[]): CostedHolder<R> | undefined {
  let best: CostedHolder<R> | undefined;
  for (const holder of holders) if (best === undefined || byCost(holder, best) < 0) best = holder;
  return best;
}

/**
 * The holders cheaper than `freshCost`, cheapest first (`best` is the cheapest), then `fresh` and
 * every other runner by load. When no holder beats a fresh runner, that is least-loaded's order
 * with the holders in it by their load. Only `best` is known before the walk asks for a second
 * runner, and the others' loads are read only when it asks past the holders.
 */
function* cheapestFirst<R extends Runner<unknown>>(
  best: CostedHolder<R>,
  holders: readonly CostedHolder<R>[],
  freshCost: number,
  fresh: R,
  view: PoolView<R>,
  config: KvAwareConfig,
): Generator<R, void, undefined> {
  const offered: R[] = [];
  if (best.cost < freshCost) {
    offered.push(best.entry.runner);
    yield best.entry.runner;
    for (const holder of holders.filter((h) => h !== best && h.cost < freshCost).sort(byCost)) {
      offered.push(holder.entry.runner);
      yield holder.entry.runner;
    }
  }
  // The fresh runner comes next unless it was a holder offered already.
  if (!offered.includes(fresh)) {
    offered.push(fresh);
    yield fresh;
  }
  yield* othersByLoad(offered, view, config.now(), config.staleAfterMs);
}

/** The registry's entry: time comes from the gateway's clock, unless the options bring their own `now`. */
export const descriptor: PlacerDescriptor = loadAwareDescriptor('kv-aware', createKvAwarePlacer, kvAwareDefaults);
