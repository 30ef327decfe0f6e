/**
 * Placement options with their defaults, validated once at start so a bad setting fails with
 * one precise line instead of a walk that never waits or never gives up.
 */
import { PlacerConfigError } from './errors.ts';
import { MAX_TIMER_MS, checksFor, rule } from './kernel/index.ts';
import type { PlacerConfig } from './types.ts';

/** The placement settings a caller may override; anything left out takes Fn's default. */
export interface PlacerOptions {
  /**
   * How long a sync call may wait for a runner to commit, in ms. Bounds waiting, never execution.
   * @default see placerDefaults
   */
  placerTimeout?: number;
  /**
   * How long a detached call may wait for a runner to commit, in ms. Shorter than the sync one
   * because the client is answered 202 only once a runner commits.
   * @default see placerDefaults
   */
  detachedPlacerTimeout?: number;
  /**
   * Pause after every runner was offered the call once, in ms. 0 still yields to the event loop.
   * @default see placerDefaults
   */
  retryAllDelay?: number;
}

/** Fn's LB agent defaults, frozen so no caller can change them for everyone else. */
export const placerDefaults: PlacerConfig = Object.freeze({
  placerTimeout: 360_000,
  detachedPlacerTimeout: 30_000,
  retryAllDelay: 10,
});

/**
 * The largest delay a Node timer honours (about 24.8 days); beyond it setTimeout fires at once,
 * which would turn a long timeout into a busy loop, so larger values are refused.
 */
export const MAX_PLACER_DELAY = MAX_TIMER_MS;

/**
 * Fills in defaults and validates every option up front.
 * @throws PlacerConfigError naming the option and the bad value.
 * @returns a frozen config.
 */
export function resolvePlacerConfig(options: PlacerOptions = {}): PlacerConfig {
  // Only the placement keys: a gateway passes its whole options object here.
  const { placerTimeout, detachedPlacerTimeout, retryAllDelay } = options;
  return check.resolve(placerDefaults, placerRules, { placerTimeout, detachedPlacerTimeout, retryAllDelay });
}

const placerRules = { placerTimeout: rule.ms(1), detachedPlacerTimeout: rule.ms(1), retryAllDelay: rule.ms(0) };

const check = checksFor(PlacerConfigError);
