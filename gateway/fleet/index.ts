/**
 * The runner pool: the runners the gateway knows (static and registered), their transport,
 * load and breaker, the registry and its routes, and how a call to a runner is signed and secured.
 *
 * The room's public face: what other rooms take from it.
 */
export { breakerDefaults } from './breaker.ts';
export { CacheIndex } from './cache-index.ts';
export type { CacheIndexOptions, FeedOutcome, FeedState } from './cache-index.ts';
export { CacheTruth } from './cache-truth.ts';
export type { CacheTruthOptions, CacheTruthPanel, CallCache } from './cache-truth.ts';
export { CallSigner, resolveDataPlane } from './data-plane.ts';
export type { DataPlaneConfig, DataPlaneOptions } from './data-plane.ts';
export { committedFailure } from './http-runner.ts';
export type { CloseOptions, RunnerResponse } from './http-runner.ts';
export { FleetPool } from './pool.ts';
export type { GatewayPool } from './pool.ts';
export type { RoomListener } from './runner-entry.ts';
export { RunnerRegistry } from './registry.ts';
export type { FleetRunner } from './registry.ts';
export { registerRunnerRoutes } from './runner-routes.ts';
export { EndedCalls, runnerLoad } from './runner-load.ts';
