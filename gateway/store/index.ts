/**
 * The detached-call store: where a detached call's record, result and Idempotency-Key live.
 * `createStore` turns the `store` setting into a store; the gateway uses only {@link CallStore}.
 * Here too is the gateway's one Redis connection factory ({@link connectRedis}, with its
 * declared policy), which every Redis user of the gateway opens its connections with.
 */
import { show } from '../../placer/kernel/index.ts';
import { StoreConfigError } from './errors.ts';
import { createMemoryStore } from './memory.ts';
import type { MemoryStoreOptions, RedisStoreOptions } from './options.ts';
import { redactUrl } from '../../placer/kernel/index.ts';
import { createRedisStore } from './redis.ts';
import type { CallStore } from './types.ts';

export { createMemoryStore } from './memory.ts';
export { createRedisStore } from './redis.ts';
export { StoreConfigError, StoreFullError, StoreInvalidRecordError, StoreUnavailableError } from './errors.ts';
export type { StoreFullDetail } from './errors.ts';
export { CREATE_TIMEOUT_MS, RECORD_OVERHEAD_BYTES, storeDefaults } from './options.ts';
export type { CommonStoreOptions, MemoryStoreOptions, RedisStoreOptions } from './options.ts';
export {
  connectRedis,
  defineScripts,
  parseRedisUrl,
  quitRedis,
  redisDefaults,
  redisScript,
  redisUses,
  resolveRedisTimeouts,
} from './redis-connection.ts';
export type { RedisAddress, RedisConnection, RedisScript, RedisTimeouts, RedisUse } from './redis-connection.ts';
export { FINAL_STATUSES, LIVE_STATUSES, scopedIdempotencyKey } from './types.ts';
export type {
  CallError,
  CallFinish,
  CallRecord,
  CallStart,
  CallStatus,
  CallStore,
  KeyClaim,
  StoreHealth,
  StoredResult,
} from './types.ts';
export { STORED_BYTES_LUA } from './redis-scripts.ts';
export { createMemoryBatchStore } from './batch-memory.ts';
export { createRedisBatchStore } from './batch-redis.ts';
export type { MemoryBatchStoreOptions } from './batch-memory.ts';
export { FINAL_BATCH_STATUSES } from './batch-types.ts';
export type {
  BatchLineError,
  BatchRecord,
  BatchStatus,
  BatchStore,
  FilePurpose,
  FileRecord,
  Owner,
  Page,
  BatchStop,
  ChunkTake,
  LineClaim,
  LineResult,
  RequestCounts,
} from './batch-types.ts';

/**
 * Options for {@link createStore}: each store takes the fields it knows (memory: maxKeys;
 * Redis: keyPrefix and the connection's timeouts) and ignores the other's, so one options
 * object serves either.
 */
export type StoreOptions = MemoryStoreOptions & Omit<RedisStoreOptions, 'url'>;

/**
 * Makes the store the `store` setting names: undefined or `memory` for the in-memory store,
 * `redis://host:port[/db]` for a Redis store shared by several gateways.
 * @throws StoreConfigError naming `store` (or the bad option).
 */
export function createStore(spec: string | undefined, options: StoreOptions = {}): CallStore {
  // Undefined fields fall back to each store's defaults, so passing them through is safe.
  const { maxKeys, keyPrefix, connectTimeout, commandTimeout, ...common } = options;
  if (spec === undefined || spec === 'memory') {
    return createMemoryStore({ ...common, maxKeys });
  }
  if (typeof spec === 'string' && spec.startsWith('redis://')) {
    return createRedisStore({ ...common, keyPrefix, connectTimeout, commandTimeout, url: spec });
  }
  throw new StoreConfigError(
    `store must be "memory" or redis://host:port[/db], got ${show(typeof spec === 'string' ? redactUrl(spec) : spec)}`,
  );
}
