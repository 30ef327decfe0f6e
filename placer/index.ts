/**
 * The placer module's public face: the placement contracts, the one shared walk, the built-in
 * placers and the registry that loads custom ones, on top of the kernel (./kernel/index.ts), which
 * it re-exports for custom placers. Nothing here speaks HTTP; the error base carries an HTTP status
 * and an OpenAI error type only so every layer's errors answer clients one way.
 */
export * from './kernel/index.ts';
export type {
  Busy,
  CachedReport,
  CallType,
  FailedBeforeCommit,
  Placed,
  Placer,
  PlacerConfig,
  LoadReport,
  PromptCache,
  Runner,
  RunnerCall,
  RunnerLoad,
  RunnerPool,
  TryExecResult,
} from './types.ts';
export {
  PlacerAbortedError,
  PlacerConfigError,
  PlacerNotFoundError,
  PlacerPoolError,
  PlacerTimeoutError,
} from './errors.ts';
export type { PlacerOptions } from './options.ts';
export { MAX_PLACER_DELAY, placerDefaults, resolvePlacerConfig } from './options.ts';
export type { Placement, WalkOptions } from './walk.ts';
export { placeCall } from './walk.ts';
export type { WalkAnswer, WalkStep } from './walk.ts';
export { walkSteps } from './walk.ts';
export { FNV_OFFSET_BASIS, fnv1a64, jumpConsistentHash } from './hash.ts';
export { rotate } from './rotate.ts';
export type { LoadedRunner } from './load.ts';
export { KV_CACHE_WEIGHT, LOAD_STALE_AFTER_MS, byLoad, loadOf, loadsOf, readLoad, thenByLoad } from './load.ts';
export type { PoolView } from './pool-view.ts';
export { poolViewOf } from './pool-view.ts';
export type { LoadAwareConfig, LoadAwareOptions } from './load-options.ts';
export { LOAD_AWARE_OPTION_KEYS, loadAwareDefaults, resolveLoadAware } from './load-options.ts';
export type { RoundRobinOptions } from './round-robin/index.ts';
export { createRoundRobinPlacer, roundRobinDefaults } from './round-robin/index.ts';
export type { ConsistentHashOptions } from './consistent-hash/index.ts';
export { consistentHashDefaults, createConsistentHashPlacer } from './consistent-hash/index.ts';
export type { LeastLoadedConfig, LeastLoadedOptions } from './least-loaded/index.ts';
export { createLeastLoadedPlacer, leastLoadedDefaults, leastLoadedOrder } from './least-loaded/index.ts';
export type { LoadWeightedOptions } from './load-weighted/index.ts';
export { createLoadWeightedPlacer } from './load-weighted/index.ts';
export type { PrefixAffinityConfig, PrefixAffinityOptions } from './prefix-affinity/index.ts';
export { createPrefixAffinityPlacer, prefixAffinityDefaults } from './prefix-affinity/index.ts';
export type { KvAwareConfig, KvAwareOptions } from './kv-aware/index.ts';
export { createKvAwarePlacer, kvAwareDefaults } from './kv-aware/index.ts';
export type { LoadPlacerOptions } from './registry.ts';
export { builtinPlacers, createBuiltinPlacer, loadPlacer, placerDescriptors } from './registry.ts';
export type { PlacerContext, PlacerDescriptor } from './descriptor.ts';
