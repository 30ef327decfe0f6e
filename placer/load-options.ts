/**
 * The options every load-aware placer shares: where its randomness and time come from, and how
 * old a runner's report may be. Validated once, when the placer is created.
 */
import { PlacerConfigError } from './errors.ts';
import { LOAD_STALE_AFTER_MS } from './load.ts';
import { poolViewOf } from './pool-view.ts';
import type { PoolView } from './pool-view.ts';
import { checksFor, rule, systemClock } from './kernel/index.ts';
import type { PlacerContext, PlacerDescriptor } from './descriptor.ts';
import type { Placer, Runner, RunnerCall } from './types.ts';

/** Options common to `least-loaded`, `load-weighted` and `prefix-affinity`. */
export interface LoadAwareOptions {
  /**
   * Source of randomness in [0, 1); tests pass a seeded one so picks are exact.
   * @default see loadAwareDefaults (Math.random)
   */
  random?: () => number;
  /**
   * Current time in ms, on the same clock as a report's `at`: the gateway's clock, which its
   * placer descriptors pass in.
   * @default see loadAwareDefaults (the kernel's systemClock, the gateway's default clock)
   */
  now?: () => number;
  /**
   * Runner reports older than this, in ms, are ignored and only the gateway's own count is used.
   * @default see loadAwareDefaults
   */
  staleAfterMs?: number;
}

/** {@link LoadAwareOptions} with defaults filled in. */
export interface LoadAwareConfig {
  readonly random: () => number;
  readonly now: () => number;
  readonly staleAfterMs: number;
}

/** The defaults, frozen so no caller can change them for everyone else. */
export const loadAwareDefaults = Object.freeze({
  random: Math.random,
  now: () => systemClock.now(),
  staleAfterMs: LOAD_STALE_AFTER_MS,
});

/** The load-aware options a config may set (random and now are code-only). */
export const LOAD_AWARE_OPTION_KEYS: readonly string[] = Object.freeze(['staleAfterMs']);

const check = checksFor(PlacerConfigError);

/**
 * Fills in defaults and validates.
 * @throws PlacerConfigError naming the option and the bad value.
 */
export function resolveLoadAware(options: LoadAwareOptions): LoadAwareConfig {
  const { random, now, staleAfterMs } = options;
  return check.resolve(loadAwareDefaults, loadAwareRules, { random, now, staleAfterMs });
}

const loadAwareRules = { random: rule.fn(), now: rule.fn(), staleAfterMs: rule.integer({ min: 0, unit: 'ms' }) };

/**
 * The registry's entry of a load-aware placer: the shared option (`staleAfterMs`) and the
 * placer's own (`own`: its defaults, whose keys are the options a config may set), and time from
 * the gateway's clock unless the options bring their own `now`.
 */
export function loadAwareDescriptor<O extends LoadAwareOptions>(
  name: string,
  create: (options: O) => Placer,
  own: Readonly<Record<string, unknown>> = {},
): PlacerDescriptor {
  return Object.freeze({
    name,
    defaults: Object.freeze({ staleAfterMs: loadAwareDefaults.staleAfterMs, ...own }),
    optionKeys: Object.freeze([...LOAD_AWARE_OPTION_KEYS, ...Object.keys(own)]),
    create: (options: Record<string, unknown> | undefined, { clock }: PlacerContext) =>
      create({ now: () => clock.now(), ...(options as O) }),
  });
}

/**
 * How a load-aware placer orders one pass: the call, the pool's view (its id order, kept per
 * list) and the resolved options. It returns lazily what it can, so the walk that commits on the
 * first runner costs the placer only what choosing that runner read.
 */
export type ViewOrder<C extends LoadAwareConfig> = <R extends Runner<unknown>>(
  call: RunnerCall,
  view: PoolView<R>,
  config: C,
) => Iterable<R>;

/**
 * A load-aware placer named `name` with the resolved `config`, ordering each pass with `order`
 * over the pool's view.
 */
export function loadAwarePlacer<C extends LoadAwareConfig>(name: string, config: C, order: ViewOrder<C>): Placer {
  return {
    name,
    order<R extends Runner<unknown>>(call: RunnerCall, runners: readonly R[]): Iterable<R> {
      return order(call, poolViewOf(runners), config);
    },
  };
}
