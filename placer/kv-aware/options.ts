/**
 * Settings of the `kv-aware` placer with their defaults, validated when it is created so a bad
 * value fails the gateway's start, not a call.
 */
import { PlacerConfigError } from '../errors.ts';
import { checksFor, rule } from '../kernel/index.ts';
import { resolveLoadAware } from '../load-options.ts';
import type { LoadAwareConfig, LoadAwareOptions } from '../load-options.ts';

/** Options for `createKvAwarePlacer`. */
export interface KvAwareOptions extends LoadAwareOptions {
  /**
   * How much a runner's load stretches the work a call would cost there: the cost is the prompt
   * tokens to prefill times (1 + loadWeight x load), load as `loadOf` reads it (1 is every slot
   * in use). 1 matches an engine whose per-token time doubles from idle to full, as vLLM's does
   * at about a load factor of 2. 0 places on the cache alone.
   * @default see kvAwareDefaults
   */
  loadWeight?: number;
  /**
   * A call's fixed cost on any runner, in prompt tokens, added to the tokens to prefill: what a
   * prompt wholly cached still costs (the h100-8b profile's 30 ms prefill overhead is 120 tokens
   * at 250 µs each). It keeps a long cached prefix from looking free on a loaded runner.
   * @default see kvAwareDefaults
   */
  overheadTokens?: number;
  /**
   * The load guard: the cheapest holder is passed over for least-loaded order when its load
   * exceeds the least loaded runner's by more than this (in `loadOf` units) and by more than
   * `balanceRelThreshold` times, as prefix-affinity's guard and SGLang's. Wider than
   * prefix-affinity's 0.5 because the cost already weighs load: the guard is only for a holder
   * a whole engine's worth busier, where calls would queue.
   * @default see kvAwareDefaults
   */
  balanceAbsThreshold?: number;
  /** See `balanceAbsThreshold`. @default see kvAwareDefaults */
  balanceRelThreshold?: number;
}

/** {@link KvAwareOptions} with defaults filled in. */
export interface KvAwareConfig extends LoadAwareConfig {
  readonly loadWeight: number;
  readonly overheadTokens: number;
  readonly balanceAbsThreshold: number;
  readonly balanceRelThreshold: number;
}

/** The defaults, frozen so no caller can change them for everyone else. */
export const kvAwareDefaults = Object.freeze({
  loadWeight: 1,
  overheadTokens: 120,
  balanceAbsThreshold: 1,
  balanceRelThreshold: 1.5,
});

const check = checksFor(PlacerConfigError);

const kvAwareRules = {
  loadWeight: rule.number({ min: 0 }),
  overheadTokens: rule.number({ min: 0 }),
  balanceAbsThreshold: rule.number({ min: 0 }),
  balanceRelThreshold: rule.number({ min: 1 }),
};

/**
 * Fills in defaults and validates every option.
 * @throws PlacerConfigError naming the option and the bad value.
 */
export function resolveKvAware(options: KvAwareOptions): KvAwareConfig {
  return Object.freeze({
    ...resolveLoadAware(options),
    ...check.resolve(kvAwareDefaults, kvAwareRules, options),
  });
}
