/**
 * Store options with their defaults, validated once when a store is made, so a bad setting fails
 * with one precise line instead of a cache that never forgets or a TTL that fires at once.
 */
import { silentLogger, systemClock } from '../../placer/kernel/index.ts';
import type { Logger } from '../../placer/kernel/index.ts';
import { checksFor, show } from '../../placer/kernel/index.ts';
import { StoreConfigError } from './errors.ts';
import { parseRedisUrl, redisUses, resolveRedisTimeouts } from './redis-connection.ts';
import type { RedisAddress, RedisTimeouts } from './redis-connection.ts';

/** Options both stores take. */
export interface CommonStoreOptions {
  /**
   * How long a finished call's record and result are kept, in ms. Idempotency keys get their own
   * TTL per claim.
   * @default see storeDefaults
   */
  resultTtl?: number;
  /**
   * Bound on what finished calls keep, in bytes: each record counts its result's body plus
   * {@link RECORD_OVERHEAD_BYTES}. A result that does not fit is refused (StoreFullError), never
   * made room for by dropping another before its TTL. Gateways sharing one Redis share the
   * bound, which Redis itself counts.
   * @default see storeDefaults
   */
  maxStoredBytes?: number;
  /** Where store problems are logged (evictions, lost connections, failing cancel handlers). @default see storeDefaults (silent) */
  logger?: Logger;
  /** The clock for TTLs and call lifetimes, ms since the epoch. @default see storeDefaults (the kernel's systemClock) */
  now?: () => number;
}

/** Options of the in-memory store. */
export interface MemoryStoreOptions extends CommonStoreOptions {
  /**
   * Bound on Idempotency-Keys held at once; the oldest claims are dropped beyond it.
   * @default see storeDefaults
   */
  maxKeys?: number;
}

/**
 * Options of the Redis store. Its commandTimeout defaults to redisUses.store's and is at least
 * {@link CREATE_TIMEOUT_MS}: a create that timed out first could still land after its caller
 * gave the call up.
 */
export interface RedisStoreOptions extends CommonStoreOptions, RedisTimeouts {
  /** `redis://[user:password@]host:port[/db]`. */
  url: string;
  /** Prefix of every key and pub/sub channel, so several fleets can share one Redis. @default see storeDefaults */
  keyPrefix?: string;
}

/**
 * What a finished record costs besides its body in the stores' byte bound: the record's fields
 * and the bookkeeping, rounded up so a flood of calls without results is bounded too.
 */
export const RECORD_OVERHEAD_BYTES = 1024;

/**
 * How long a create waits for Redis before the gateway gives the call up (and answers 503), and
 * a start before the gateway lets the call run on without it: both hold a client's answer.
 */
export const CREATE_TIMEOUT_MS = 3_000;

/** The defaults, frozen so no caller can change them for everyone else. */
export const storeDefaults = Object.freeze({
  resultTtl: 3_600_000,
  maxStoredBytes: 256 * 1024 * 1024,
  maxKeys: 100_000,
  keyPrefix: 'sluice:',
  logger: silentLogger as Logger,
  now: (): number => systemClock.now(),
});

/** Resolved memory store options. */
export interface MemoryStoreConfig {
  readonly resultTtl: number;
  readonly maxStoredBytes: number;
  readonly maxKeys: number;
  readonly logger: Logger;
  readonly now: () => number;
}

/** Resolved Redis store options, with the URL parsed into `redis`. */
export interface RedisStoreConfig {
  readonly resultTtl: number;
  readonly maxStoredBytes: number;
  readonly keyPrefix: string;
  readonly logger: Logger;
  readonly now: () => number;
  readonly redis: RedisAddress;
  readonly connectTimeout: number;
  readonly commandTimeout: number;
}

/**
 * Fills in defaults and validates every memory store option.
 * @throws StoreConfigError naming the option and the bad value.
 */
export function resolveMemoryStoreConfig(options: MemoryStoreOptions = {}): MemoryStoreConfig {
  const { maxKeys = storeDefaults.maxKeys } = options;
  return Object.freeze({ ...resolveCommon(options), maxKeys: check.integer('maxKeys', maxKeys, { min: 1 }) });
}

/**
 * Fills in defaults, validates every Redis store option and parses the URL.
 * @throws StoreConfigError naming the option and the bad value.
 */
export function resolveRedisStoreConfig(options: RedisStoreOptions): RedisStoreConfig {
  const { keyPrefix = storeDefaults.keyPrefix } = options;
  if (typeof keyPrefix !== 'string') throw check.fail(`keyPrefix must be a string, got ${show(keyPrefix)}`);
  const common = resolveCommon(options);
  const redis = parseRedisUrl(options.url);
  const timeouts = resolveRedisTimeouts(options, redisUses.store);
  if (timeouts.commandTimeout < CREATE_TIMEOUT_MS) {
    throw check.fail(
      `commandTimeout must be at least ${CREATE_TIMEOUT_MS} ms, the time a create waits for its answer, got ${show(timeouts.commandTimeout)}`,
    );
  }
  return Object.freeze({ ...common, keyPrefix, redis, ...timeouts });
}

function resolveCommon(options: CommonStoreOptions): Required<CommonStoreOptions> {
  const {
    resultTtl = storeDefaults.resultTtl,
    maxStoredBytes = storeDefaults.maxStoredBytes,
    logger = storeDefaults.logger,
    now = storeDefaults.now,
  } = options;
  if (typeof now !== 'function') throw check.fail(`now must be a function, got ${show(now)}`);
  check.logger('logger', logger);
  // Infinity is refused by the integer check: an unbounded store is what this option exists to prevent.
  check.integer('maxStoredBytes', maxStoredBytes, { min: 1 });
  if (maxStoredBytes < RECORD_OVERHEAD_BYTES) {
    throw check.fail(
      `maxStoredBytes must be at least ${RECORD_OVERHEAD_BYTES} (one empty record), got ${show(maxStoredBytes)}`,
    );
  }
  return { resultTtl: check.ms('resultTtl', resultTtl, 1), maxStoredBytes, logger, now };
}

const check = checksFor(StoreConfigError);
