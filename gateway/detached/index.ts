/**
 * Detached calls: how a client asks for one, the record the gateway keeps in the call store,
 * the background side that finishes it, its routes, and the callbacks that report its end.
 *
 * The room's public face: what other rooms take from it.
 */
export { registerCallRoutes } from './call-routes.ts';
export { callbackPolicyDefaults, classifyAddress, compileNetworks, sameAddress } from './callbacks/index.ts';
export type { CallbackDelivery, NetworkList, SpecialRange } from './callbacks/index.ts';
export { DetachedSignal, detachedResult } from './detached-flow.ts';
export type { DetachedReply } from './detached-flow.ts';
export { DetachedRuns } from './detached-run.ts';
export { DetachedCalls } from './detached.ts';
export { parsePreference } from './prefer.ts';
export type { CallPreference } from './prefer.ts';
export {
  FINAL_BATCH_STATUSES,
  RECORD_OVERHEAD_BYTES,
  STORED_BYTES_LUA,
  StoreUnavailableError,
  connectRedis,
  createMemoryBatchStore,
  createMemoryStore,
  createRedisBatchStore,
  parseRedisUrl,
  quitRedis,
  redisUses,
  storeDefaults,
} from './store/index.ts';
export type {
  BatchLineError,
  BatchRecord,
  BatchStatus,
  BatchStore,
  CallError,
  CallStore,
  FilePurpose,
  FileRecord,
  Owner,
  Page,
  RedisTimeouts,
  RequestCounts,
  StoreHealth,
} from './store/index.ts';
export { StoreFullError } from './store/index.ts';
