/**
 * Least-loaded: offer the call first to the least loaded of a few runners (the whole pool when it
 * has no more than `choices`, else the call key's home and a random sample of the others), then
 * to everyone else from least to most loaded.
 *
 * A small pool is scanned whole because a sample of two of eight runners (the power of two
 * choices) often misses the idle one that nginx's least_conn finds, and scanning sixteen loads
 * costs well under a microsecond. A large pool is sampled because a full scan is linear in the
 * pool: the best of `choices` random runners keeps the maximum load within log log n / log
 * choices of the mean (Mitzenmacher, 2001) at a cost that does not grow with the pool, and
 * randomness keeps several gateways reading the same stale reports from all sending to the one
 * that looked idlest. A full scan of a large pool is what `choices` set to the pool's size gives:
 * O(n) per decision, bounded by the option's maximum (1,024).
 *
 * Near-ties (loads within `tieBand` of the least) go to the call key's home (jump consistent
 * hashing), else to the key's rendezvous choice among the tied, not to a random one: a session's
 * next turn then lands on the engine caching its history whenever that engine is among the least
 * loaded, which nginx least_conn cannot do, at a cost in balance bounded by `tieBand`. While
 * every runner is busy the home is the call's preference in the gateway's wait queue.
 */
import { PlacerConfigError } from '../errors.ts';
import { checksFor, rule } from '../kernel/index.ts';
import { loadAwareDescriptor, loadAwarePlacer, resolveLoadAware } from '../load-options.ts';
import type { PlacerDescriptor } from '../descriptor.ts';
import type { LoadAwareConfig, LoadAwareOptions } from '../load-options.ts';
import { byLoad, thenByLoad } from '../load.ts';
import type { LoadedRunner } from '../load.ts';
import type { PoolView } from '../pool-view.ts';
import type { Placer, Runner, RunnerCall } from '../types.ts';
import { keyHomeOf, leastLoadedChoice, sample } from './choose.ts';

/** Options for {@link createLeastLoadedPlacer}. */
export interface LeastLoadedOptions extends LoadAwareOptions {
  /**
   * Runners compared per decision: a pool with no more is scanned whole (the least loaded of all),
   * a larger one sampled at random. Sized so a sample's best is within a slot or two of the
   * pool's least loaded on a busy fleet while a decision stays under a microsecond or two.
   * @default see leastLoadedDefaults
   */
  choices?: number;
  /**
   * Loads within this of the least count as tied, and a tie goes to the call key's home (else its
   * rendezvous choice among the tied) so a session returns to the engine caching its history. In
   * `loadOf` units, a share of a runner's slots: 0.1 is one slot of 10, under two of 16. In the
   * simulator (docs/benchmarks.md) it brings least-loaded's cache hits from 70 % to 76 % and its
   * time to first token below nginx least_conn's; 0 keeps exact ties only.
   * @default see leastLoadedDefaults
   */
  tieBand?: number;
}

/** {@link LeastLoadedOptions} with defaults filled in. */
export interface LeastLoadedConfig extends LoadAwareConfig {
  readonly choices: number;
  readonly tieBand: number;
}

/** The defaults, frozen so no caller can change them for everyone else. */
export const leastLoadedDefaults = Object.freeze({ choices: 16, tieBand: 0.1 });

const check = checksFor(PlacerConfigError);

/**
 * Fills in defaults and validates.
 * @throws PlacerConfigError naming the option and the bad value.
 */
export function resolveLeastLoaded(options: LeastLoadedOptions): LeastLoadedConfig {
  const { choices, tieBand, ...shared } = options;
  const own = check.resolve(leastLoadedDefaults, leastLoadedRules, { choices, tieBand });
  return Object.freeze({ ...resolveLoadAware(shared), ...own });
}

const leastLoadedRules = {
  choices: rule.integer({ min: 1, max: 1_024 }),
  tieBand: rule.number({ min: 0, max: 1 }),
};

/**
 * Creates a placer named `least-loaded`. Loads come from each runner's `load()` through
 * `loadOf`; a runner without one reads as idle. Nothing is skipped: a busy first runner is
 * followed by every other runner, so the walk still reaches a free one on the same pass.
 * @throws PlacerConfigError naming a bad option.
 */
export function createLeastLoadedPlacer(options: LeastLoadedOptions = {}): Placer {
  return {
    ...loadAwarePlacer('least-loaded', resolveLeastLoaded(options), leastLoadedPass),
    // While every runner is busy they are all equally loaded, and a tie goes to the key's home.
    preferred: keyHomeOf,
  };
}

/**
 * A least-loaded pass over `view`: its choice, then the rest by load, read only if the walk asks
 * past the choice. For the placers that fall back on least-loaded (prefix-affinity, kv-aware).
 */
export function leastLoadedPass<R extends Runner<unknown>>(
  call: RunnerCall,
  view: PoolView<R>,
  config: LeastLoadedConfig,
): Iterable<R> {
  const first = leastLoadedChoice(view, call.key, config.now(), config);
  return first === undefined ? [] : thenByLoad([first.runner], view, config.now, config.staleAfterMs);
}

/**
 * The least-loaded order over loads already read, sorted by id (`loadsOf`): the least loaded of
 * them (of a sample of {@link leastLoadedDefaults}`.choices` when there are more), ties to the
 * first, then the rest by load. For custom placers that read every load themselves; the built-in
 * placers read only the loads they compare.
 */
export function* leastLoadedOrder<R extends Runner<unknown>>(
  loaded: readonly LoadedRunner<R>[],
  random: () => number,
): Generator<R, void, undefined> {
  const n = loaded.length;
  if (n === 0) return;
  const { choices } = leastLoadedDefaults;
  const candidates = n <= choices ? undefined : sample(n, choices, random);
  let first = candidates === undefined ? loaded[0]! : loaded[candidates[0]!]!;
  for (const entry of candidates === undefined ? loaded : candidates.map((i) => loaded[i]!)) {
    if (entry.load < first.load) first = entry;
  }
  yield first.runner;
  for (const entry of loaded.filter((e) => e !== first).sort(byLoad)) yield entry.runner;
}

/** The registry's entry: the shared load-aware option and least-loaded's own two. */
export const descriptor: PlacerDescriptor = loadAwareDescriptor(
  'least-loaded',
  createLeastLoadedPlacer,
  leastLoadedDefaults,
);
