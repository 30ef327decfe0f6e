/**
 * Settings of the `prefix-affinity` placer with their defaults, validated when it is created so a
 * bad threshold fails with one line instead of a placer that quietly never keeps affinity.
 */
import { PlacerConfigError } from '../errors.ts';
import { resolveLoadAware, type LoadAwareConfig, type LoadAwareOptions } from '../load-options.ts';
import { checksFor, rule } from '../kernel/index.ts';

/** Options for `createPrefixAffinityPlacer`; the load-aware ones are shared with `least-loaded`. */
export interface PrefixAffinityOptions extends LoadAwareOptions {
  /**
   * Block size in UTF-16 code units; 64 characters are about 16 tokens, an engine's KV block.
   * @default see prefixAffinityDefaults
   */
  blockSize?: number;
  /**
   * Block hashes the prefix index keeps (least recently served evicted first); about 80 bytes
   * each as measured here, so the default covers 6.4 M characters of distinct prefixes in 8 MB.
   * @default see prefixAffinityDefaults
   */
  maxBlocks?: number;
  /**
   * Smallest share of the prompt (matched prefix / prompt length) worth keeping affinity for;
   * below it the call goes least-loaded. SGLang's cache threshold.
   * @default see prefixAffinityDefaults
   */
  minMatchRatio?: number;
  /**
   * Affinity is set aside when the home runner's load exceeds the least loaded runner's by more
   * than this (and by more than `balanceRelThreshold` times). In utilisation (`loadOf`: 1 is every
   * slot busy), not requests, so it stays right across unequal runners: half a runner's slots.
   * SGLang's 64 requests are a quarter of a 256-sequence engine, but on 16-sequence engines a
   * quarter is 4 calls, within the ordinary spread of a pool at half load, and tripped so often
   * that sessions kept losing their cached history (see the placer's file comment).
   * @default see prefixAffinityDefaults
   */
  balanceAbsThreshold?: number;
  /**
   * See `balanceAbsThreshold`: also needed is home load > this x min load. SGLang's 1.5.
   * @default see prefixAffinityDefaults
   */
  balanceRelThreshold?: number;
}

/** {@link PrefixAffinityOptions} with defaults filled in, frozen. */
export interface PrefixAffinityConfig extends LoadAwareConfig {
  readonly blockSize: number;
  readonly maxBlocks: number;
  readonly minMatchRatio: number;
  readonly balanceAbsThreshold: number;
  readonly balanceRelThreshold: number;
}

/** The defaults, frozen so no caller can change them for everyone else. */
export const prefixAffinityDefaults = Object.freeze({
  blockSize: 64,
  maxBlocks: 100_000,
  minMatchRatio: 0.3,
  balanceAbsThreshold: 0.5,
  balanceRelThreshold: 1.5,
});

/** Refused above this: an index this large would be a memory leak with extra steps. */
const MAX_BLOCKS_LIMIT = 10_000_000;

/**
 * Fills in defaults and validates every option.
 * @throws PlacerConfigError naming the option and the bad value.
 */
export function resolvePrefixAffinity(options: PrefixAffinityOptions): PrefixAffinityConfig {
  return Object.freeze({
    ...resolveLoadAware(options),
    ...check.resolve(prefixAffinityDefaults, prefixAffinityRules, options),
  });
}

/** How each option is checked, in the order the first bad one is reported. */
const prefixAffinityRules = {
  blockSize: rule.integer({ min: 1, max: 1_000_000 }),
  maxBlocks: rule.integer({ min: 1, max: MAX_BLOCKS_LIMIT }),
  minMatchRatio: rule.number({ min: 0, max: 1 }),
  balanceAbsThreshold: rule.number({ min: 0 }),
  balanceRelThreshold: rule.number({ min: 1 }),
};

const check = checksFor(PlacerConfigError);
