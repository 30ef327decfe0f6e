/**
 * The Redis limiter: the counters of limits.ts shared by every gateway on one Redis. Each step is
 * one Lua script, so the check and the count are atomic across gateways.
 *
 * Layout, per key id (in a hash tag, so one key's counters share a cluster slot): a hash
 * {b, c, p} per window (`requests`, `tokens`) holding the fixed window's index and the current
 * and previous counts; a sorted set of concurrent-call leases scored by when each lapses; a
 * sorted set of stored results (`<bytes>:<call id>`, scored by expiry) with a byte counter, as
 * the detached-call store keeps its own bound; and a second such pair for the rooms reserved for
 * results of calls still running, scored by the call's lifetime end, so a reservation a gateway
 * never settled (it died) lapses then.
 *
 * Time is the gateway's clock, passed in whole ms, not Redis's: the windows then move with the
 * clock the specs drive, and gateways whose clocks differ by d ms see window edges d ms apart,
 * which shifts an estimate by at most d / windowMs of the previous window's count.
 *
 * A lease lapses after `leaseMs` so a gateway that dies holding calls frees them in time.
 */
import type { Redis } from 'ioredis';
import { connectRedis, defineScripts, quitRedis, redisScript, redisUses, STORED_BYTES_LUA } from '../store/index.ts';
import type { RedisTimeouts } from '../store/index.ts';
import { decideWindow, resolveLimiterOptions } from './limits.ts';
import type { WindowTally } from './limits.ts';
import type { Admission, KeyLimits, Limiter, LimiterOptions, StoredAdmission, StoredReservation } from './limits.ts';
import { checksFor, show } from '../../placer/kernel/index.ts';
import type { Clock } from '../../placer/kernel/index.ts';
import { GatewayConfigError } from '../errors.ts';

/** Options of the Redis limiter; its commandTimeout defaults to redisUses.limiter's. */
export interface RedisLimiterOptions extends LimiterOptions, RedisTimeouts {
  /** `redis://[user:password@]host:port[/db]`, as the detached-call store's. */
  url: string;
  /** Prefix of every key. @default 'sluice:' */
  keyPrefix?: string;
  /** How long a concurrent-call lease holds without a release, in ms: longer than any call. @default 3600000 */
  leaseMs?: number;
}

/**
 * Rolls a window hash to fixed window `bucket`: returns the current and previous counts there,
 * and the time of each one's last hit (fields l and q). A hash written before those fields has
 * its last hits at the end of their windows: no earlier than they can have been.
 */
const ROLL = `
local function roll(key, bucket, w)
  local s = redis.call('HMGET', key, 'b', 'c', 'p', 'l', 'q')
  local b = tonumber(s[1])
  if b == nil then return 0, 0, 0, 0 end
  local l = tonumber(s[4]) or ((b + 1) * w - 1)
  if b == bucket then return tonumber(s[2]) or 0, tonumber(s[3]) or 0, l, tonumber(s[5]) or (b * w - 1) end
  if b == bucket - 1 then return 0, tonumber(s[2]) or 0, 0, l end
  return 0, 0, 0, 0
end
local function put(key, bucket, cur, prev, last, prevLast, w)
  redis.call('HSET', key, 'b', bucket, 'c', cur, 'p', prev, 'l', last, 'q', prevLast)
  redis.call('PEXPIRE', key, 2 * w)
end
local function admits(key, now, w, limit, cost)
  local bucket = math.floor(now / w)
  local cur, prev, last, prevLast = roll(key, bucket, w)
  local est = cur
  if now < prevLast + w then est = prev * (w - (now - bucket * w)) / w + cur end
  if est + cost > limit then return false, cur, prev, last, prevLast end
  put(key, bucket, cur + cost, prev, now, prevLast, w)
  return true, cur, prev, last, prevLast
end
`;

/**
 * KEYS: requests window, leases. ARGV: now, windowMs, requestsPerMinute (0: none),
 * concurrentCalls (0: none), lease, lease expiry, leaseMs. Returns {1, cur, prev} when admitted
 * (the request counted, the lease held), {0, cur, prev} when the window refused it, {-1, cur, prev}
 * when every concurrent call is taken; cur and prev are the counts before this call, each
 * followed by the time of its last hit (so {1, cur, prev, last, prevLast}).
 */
const ADMIT_CALL = redisScript(
  'sluiceAdmitCall',
  2,
  `${ROLL}
local now, w = tonumber(ARGV[1]), tonumber(ARGV[2])
local rpm, conc = tonumber(ARGV[3]), tonumber(ARGV[4])
if conc > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[1])
  if not redis.call('ZSCORE', KEYS[2], ARGV[5]) and redis.call('ZCARD', KEYS[2]) >= conc then
    if rpm > 0 then
      local c, p, l, q = roll(KEYS[1], math.floor(now / w), w)
      return {-1, c, p, l, q}
    end
    return {-1, 0, 0, 0, 0}
  end
end
local cur, prev, last, prevLast = 0, 0, 0, 0
if rpm > 0 then
  local ok
  ok, cur, prev, last, prevLast = admits(KEYS[1], now, w, rpm, 1)
  if not ok then return {0, cur, prev, last, prevLast} end
end
if conc > 0 then
  redis.call('ZADD', KEYS[2], ARGV[6], ARGV[5])
  redis.call('PEXPIRE', KEYS[2], ARGV[7])
end
return {1, cur, prev, last, prevLast}
`,
);

/** KEYS: tokens window. ARGV: now, windowMs, limit, cost. Returns {1|0, cur, prev} as ADMIT_CALL. */
const ADMIT_TOKENS = redisScript(
  'sluiceAdmitTokens',
  1,
  `${ROLL}
local ok, cur, prev, last, prevLast = admits(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]))
if ok then return {1, cur, prev, last, prevLast} end
return {0, cur, prev, last, prevLast}
`,
);

/** KEYS: tokens window. ARGV: now, windowMs, delta. Moves the current count by delta, never below 0. */
const SETTLE = redisScript(
  'sluiceSettle',
  1,
  `${ROLL}
local now, w, delta = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local bucket = math.floor(now / w)
local cur, prev, last, prevLast = roll(KEYS[1], bucket, w)
-- Tokens counted late are a hit now: the window holds them a whole window from here.
if delta > 0 then last = now end
put(KEYS[1], bucket, math.max(0, cur + delta), prev, last, prevLast, w)
return 1
`,
);

/**
 * KEYS: stored set, its byte counter, reserved set, its byte counter. ARGV: now, storedBytes,
 * cap, call id, until, ttl ms. Returns {1, bytes reserved} when admitted, {0, the first stored
 * result's expiry or 0} when stored results and reservations already reach the limit.
 */
const STORED_RESERVE = redisScript(
  'sluiceStoredReserve',
  4,
  `${STORED_BYTES_LUA}
local used = stored_bytes(KEYS[1], KEYS[2], ARGV[1]) + stored_bytes(KEYS[3], KEYS[4], ARGV[1])
local limit = tonumber(ARGV[2])
if used >= limit then
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {0, tonumber(first[2] or '0')}
end
local reserved = math.min(tonumber(ARGV[3]), limit - used)
if redis.call('ZADD', KEYS[3], ARGV[5], string.format('%d:%s', reserved, ARGV[4])) == 1 then redis.call('INCRBY', KEYS[4], reserved) end
for i = 3, 4 do
  if redis.call('PTTL', KEYS[i]) < tonumber(ARGV[6]) then redis.call('PEXPIRE', KEYS[i], ARGV[6]) end
end
return {1, reserved}
`,
);

/** Lua's `unreserve(set, counter, member, bytes)`: drops a reservation still held, once. */
const UNRESERVE = `
local function unreserve(set, counter, member, bytes)
  if redis.call('ZREM', set, member) == 1 then redis.call('DECRBY', counter, bytes) end
end
`;

/**
 * KEYS: stored set, its byte counter, reserved set, its byte counter. ARGV: now, reservation
 * member, reserved bytes, result member, bytes, expiry, ttl ms.
 */
const STORED_SETTLE = redisScript(
  'sluiceStoredSettle',
  4,
  `${STORED_BYTES_LUA}${UNRESERVE}
unreserve(KEYS[3], KEYS[4], ARGV[2], ARGV[3])
stored_bytes(KEYS[1], KEYS[2], ARGV[1])
if redis.call('ZADD', KEYS[1], ARGV[6], ARGV[4]) == 1 then redis.call('INCRBY', KEYS[2], ARGV[5]) end
for i = 1, 2 do
  if redis.call('PTTL', KEYS[i]) < tonumber(ARGV[7]) then redis.call('PEXPIRE', KEYS[i], ARGV[7]) end
end
return 1
`,
);

/** KEYS: reserved set, its byte counter. ARGV: reservation member, reserved bytes. */
const STORED_RELEASE = redisScript(
  'sluiceStoredRelease',
  2,
  `${UNRESERVE}
unreserve(KEYS[1], KEYS[2], ARGV[1], ARGV[2])
return 1
`,
);

/** A window script's answer: the outcome code, then the counts and last hits before this call. */
type WindowReply = [code: number, current: number, previous: number, currentLast: number, previousLast: number];

/** The counts of a {@link WindowReply}. */
const tallyOf = ([, current, previous, currentLast, previousLast]: WindowReply): WindowTally => ({
  current,
  previous,
  currentLast,
  previousLast,
});

interface LimitScripts {
  sluiceAdmitCall(requests: string, leases: string, ...args: (string | number)[]): Promise<WindowReply>;
  sluiceAdmitTokens(tokens: string, ...args: (string | number)[]): Promise<WindowReply>;
  sluiceSettle(tokens: string, ...args: (string | number)[]): Promise<number>;
  sluiceStoredReserve(
    stored: string,
    storedCounter: string,
    reserved: string,
    reservedCounter: string,
    ...args: (string | number)[]
  ): Promise<[number, number]>;
  sluiceStoredSettle(
    stored: string,
    storedCounter: string,
    reserved: string,
    reservedCounter: string,
    ...args: (string | number)[]
  ): Promise<number>;
  sluiceStoredRelease(reserved: string, reservedCounter: string, ...args: (string | number)[]): Promise<number>;
}

/**
 * Makes a Redis limiter and starts connecting. A step that cannot reach Redis, or that it does
 * not answer within the command timeout, rejects; the gateway decides what that means for the
 * call (see docs/security.md).
 * @throws StoreConfigError for a bad URL or timeout.
 */
export function createRedisLimiter(options: RedisLimiterOptions): Limiter {
  return new RedisLimiter(options);
}

class RedisLimiter implements Limiter {
  readonly #client: Redis & LimitScripts;
  readonly #clock: Pick<Clock, 'now'>;
  readonly #windowMs: number;
  readonly #retryAfterMs: number;
  readonly #leaseMs: number;
  readonly #prefix: string;
  #closing: Promise<void> | undefined;

  constructor(options: RedisLimiterOptions) {
    ({
      clock: this.#clock,
      windowMs: this.#windowMs,
      retryAfterMs: this.#retryAfterMs,
    } = resolveLimiterOptions(options));
    const { leaseMs = 3_600_000, keyPrefix = 'sluice:' } = options;
    this.#leaseMs = checksFor(GatewayConfigError).ms('leaseMs', leaseMs, 1);
    if (typeof keyPrefix !== 'string')
      throw new GatewayConfigError(`keyPrefix must be a string, got ${show(keyPrefix)}`);
    this.#prefix = keyPrefix;
    const { client } = connectRedis(options.url, redisUses.limiter, options);
    this.#client = defineScripts<LimitScripts>(client, [
      ADMIT_CALL,
      ADMIT_TOKENS,
      SETTLE,
      STORED_RESERVE,
      STORED_SETTLE,
      STORED_RELEASE,
    ]);
  }

  async admitCall(keyId: string, limits: KeyLimits, lease: string): Promise<Admission> {
    const { requestsPerMinute: rpm = 0, concurrentCalls: conc = 0 } = limits;
    if (rpm === 0 && conc === 0) return ADMITTED;
    const now = this.#now();
    const reply = await this.#client.sluiceAdmitCall(
      this.#key(keyId, 'requests'),
      this.#key(keyId, 'leases'),
      now,
      this.#windowMs,
      rpm,
      conc,
      lease,
      now + this.#leaseMs,
      this.#leaseMs,
    );
    if (reply[0] === -1) {
      // Where the requests window stands, uncounted, for the refusal's x-ratelimit headers.
      const window = rpm === 0 ? undefined : decideWindow(now, this.#windowMs, rpm, 0, tallyOf(reply)).state;
      return { kind: 'refused', limit: 'concurrent', retryAfterMs: this.#retryAfterMs, ...(window ? { window } : {}) };
    }
    if (rpm === 0) return ADMITTED;
    const decision = decideWindow(now, this.#windowMs, rpm, 1, tallyOf(reply));
    return reply[0] === 1
      ? { kind: 'admitted', window: decision.state }
      : { kind: 'refused', limit: 'requests', retryAfterMs: decision.retryAfterMs, window: decision.state };
  }

  async admitTokens(keyId: string, limits: KeyLimits, estimate: number): Promise<Admission> {
    const limit = limits.tokensPerMinute;
    if (limit === undefined) return ADMITTED;
    const cost = Math.min(estimate, limit);
    const now = this.#now();
    const reply = await this.#client.sluiceAdmitTokens(this.#key(keyId, 'tokens'), now, this.#windowMs, limit, cost);
    const decision = decideWindow(now, this.#windowMs, limit, cost, tallyOf(reply));
    return reply[0] === 1
      ? { kind: 'admitted', window: decision.state }
      : { kind: 'refused', limit: 'tokens', retryAfterMs: decision.retryAfterMs, window: decision.state };
  }

  async settle(keyId: string, actual: number, estimated: number): Promise<void> {
    if (actual === estimated) return;
    await this.#client.sluiceSettle(this.#key(keyId, 'tokens'), this.#now(), this.#windowMs, actual - estimated);
  }

  async release(keyId: string, lease: string): Promise<void> {
    await this.#client.zrem(this.#key(keyId, 'leases'), lease);
  }

  async reserveStored(
    keyId: string,
    limits: KeyLimits,
    { callId, cap, until }: StoredReservation,
  ): Promise<StoredAdmission> {
    const limit = limits.storedBytes;
    if (limit === undefined) return NOTHING_RESERVED;
    const now = this.#now();
    const ttl = Math.max(1, Math.ceil(until - now));
    const [code, value] = await this.#client.sluiceStoredReserve(
      ...this.#storedKeys(keyId),
      now,
      limit,
      Math.max(0, Math.floor(cap)),
      callId,
      Math.ceil(until),
      ttl,
    );
    if (code === 1) return { kind: 'admitted', reserved: value };
    return { kind: 'refused', limit: 'stored-bytes', retryAfterMs: Math.max(this.#retryAfterMs, value - now) };
  }

  async settleStored(keyId: string, callId: string, reserved: number, bytes: number, expiresAt: number): Promise<void> {
    const now = this.#now();
    const ttl = Math.max(1, Math.ceil(expiresAt - now));
    await this.#client.sluiceStoredSettle(
      ...this.#storedKeys(keyId),
      now,
      `${reserved}:${callId}`,
      reserved,
      `${bytes}:${callId}`,
      bytes,
      Math.ceil(expiresAt),
      ttl,
    );
  }

  async releaseStored(keyId: string, callId: string, reserved: number): Promise<void> {
    await this.#client.sluiceStoredRelease(
      this.#key(keyId, 'reserved'),
      this.#key(keyId, 'reserved-bytes'),
      `${reserved}:${callId}`,
      reserved,
    );
  }

  close(): Promise<void> {
    this.#closing ??= quitRedis(this.#client);
    return this.#closing;
  }

  #now(): number {
    return Math.floor(this.#clock.now());
  }

  /** The stored results and the reservations of a key, with their byte counters, as the scripts take them. */
  #storedKeys(keyId: string): [string, string, string, string] {
    return [
      this.#key(keyId, 'stored'),
      this.#key(keyId, 'stored-bytes'),
      this.#key(keyId, 'reserved'),
      this.#key(keyId, 'reserved-bytes'),
    ];
  }

  #key(
    keyId: string,
    what: 'requests' | 'tokens' | 'leases' | 'stored' | 'stored-bytes' | 'reserved' | 'reserved-bytes',
  ): string {
    return `${this.#prefix}limits:{${keyId}}:${what}`;
  }
}

const ADMITTED: Admission = Object.freeze({ kind: 'admitted' });
const NOTHING_RESERVED: StoredAdmission = Object.freeze({ kind: 'admitted', reserved: 0 });
