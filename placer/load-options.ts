/**
 * The options every load-aware placer shares: where its randomness and time come from, and how
 * old a runner's report may be. Validated once, when the placer is created.
 */
import { PlacerConfigError } from './errors.ts';
import { LOAD_STALE_AFTER_MS } from './load.ts';
import { checkFunction, checkInteger } from './kernel/index.ts';

/** Options common to `least-loaded`, `load-weighted` and `prefix-affinity`. */
export interface LoadAwareOptions {
  /**
   * Source of randomness in [0, 1); tests pass a seeded one so picks are exact.
   * @default Math.random
   */
  random?: () => number;
  /**
   * Current time in ms since the epoch, on the same clock as a report's `at`.
   * @default Date.now
   */
  now?: () => number;
  /**
   * Runner reports older than this, in ms, are ignored and only the gateway's own count is used.
   * @default 2_000
   */
  staleAfterMs?: number;
}

/** {@link LoadAwareOptions} with defaults filled in. */
export interface LoadAwareConfig {
  readonly random: () => number;
  readonly now: () => number;
  readonly staleAfterMs: number;
}

/**
 * Fills in defaults and validates.
 * @throws PlacerConfigError naming the option and the bad value.
 */
export function resolveLoadAware(options: LoadAwareOptions): LoadAwareConfig {
  const { random = Math.random, now = Date.now, staleAfterMs = LOAD_STALE_AFTER_MS } = options;
  return Object.freeze({
    random: checkFunction('random', random, fail),
    now: checkFunction('now', now, fail),
    staleAfterMs: checkInteger('staleAfterMs', staleAfterMs, { min: 0, unit: 'ms' }, fail),
  });
}

const fail = (message: string): PlacerConfigError => new PlacerConfigError(message);
