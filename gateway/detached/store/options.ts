/**
 * Store options with their defaults, validated once when a store is made, so a bad setting fails
 * with one precise line instead of a cache that never forgets or a TTL that fires at once.
 */
import { silentLogger, systemClock } from '../../../placer/kernel/index.ts';
import type { Logger } from '../../../placer/kernel/index.ts';
import { redactUrl } from '../../../placer/kernel/index.ts';
import { checksFor, show } from '../../../placer/kernel/index.ts';
import { StoreConfigError } from './errors.ts';

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

/** Options of the Redis store. */
export interface RedisStoreOptions extends CommonStoreOptions {
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
}

/** Where a Redis store connects. */
export interface RedisAddress {
  readonly host: string;
  readonly port: number;
  readonly db: number;
  readonly username?: string;
  readonly password?: string;
  /** `redis://host:port/db`, safe to log and to put in error messages. */
  readonly display: string;
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
  return Object.freeze({ ...resolveCommon(options), keyPrefix, redis: parseRedisUrl(options.url) });
}

/**
 * Parses `redis://[user:password@]host:port[/db]`.
 * @throws StoreConfigError quoting the URL with its password masked.
 */
export function parseRedisUrl(url: unknown): RedisAddress {
  const bad = () => check.fail(`store must be redis://host:port[/db], got ${show(typeof url === 'string' ? redactUrl(url) : url)}`);
  if (typeof url !== 'string') throw bad();
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw bad();
  }
  const dbText = parsed.pathname.replace(/^\//, '');
  const db = dbText === '' ? 0 : Number(dbText);
  if (parsed.protocol !== 'redis:' || parsed.hostname === '' || parsed.port === '' || parsed.search !== '' || parsed.hash !== '') throw bad();
  if (!/^\d*$/.test(dbText) || !Number.isSafeInteger(db)) throw bad();
  // WHATWG URL keeps IPv6 brackets in hostname; the socket wants the bare address.
  const host = parsed.hostname.replace(/^\[(.*)\]$/, '$1');
  const port = Number(parsed.port);
  if (port === 0) throw bad();
  let credentials: { username?: string; password?: string };
  try {
    credentials = {
      ...(parsed.username ? { username: decodeURIComponent(parsed.username) } : {}),
      ...(parsed.password ? { password: decodeURIComponent(parsed.password) } : {}),
    };
  } catch {
    throw bad(); // a stray % in the user or password
  }
  return Object.freeze({ host, port, db, display: `redis://${parsed.host}/${db}`, ...credentials });
}

function resolveCommon(options: CommonStoreOptions): Required<CommonStoreOptions> {
  const { resultTtl = storeDefaults.resultTtl, maxStoredBytes = storeDefaults.maxStoredBytes, logger = storeDefaults.logger, now = storeDefaults.now } = options;
  if (typeof now !== 'function') throw check.fail(`now must be a function, got ${show(now)}`);
  check.logger('logger', logger);
  // Infinity is refused by the integer check: an unbounded store is what this option exists to prevent.
  check.integer('maxStoredBytes', maxStoredBytes, { min: 1 });
  if (maxStoredBytes < RECORD_OVERHEAD_BYTES) {
    throw check.fail(`maxStoredBytes must be at least ${RECORD_OVERHEAD_BYTES} (one empty record), got ${show(maxStoredBytes)}`);
  }
  return { resultTtl: check.ms('resultTtl', resultTtl, 1), maxStoredBytes, logger, now };
}

const check = checksFor(StoreConfigError);
