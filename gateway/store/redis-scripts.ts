/**
 * The Lua scripts behind the Redis store's compare-and-set operations. Each runs atomically in
 * Redis, so two gateways finishing, claiming or releasing at once cannot interleave.
 *
 * Layout: a call is a hash {status, record, start, final}: `record` is the JSON written at create
 * and never changed, `start` the JSON of the fields start wrote (runner, startedAt, delayMs),
 * `final` the JSON of the fields finish wrote; readers merge them in that order. Keeping
 * `status` in its own field lets the scripts compare it without decoding JSON in Lua (whose
 * cjson rounds numbers to 14 digits). A result is a hash {status, type, body}, body binary.
 * An Idempotency-Key is a hash {callId, fingerprint}.
 *
 * The byte bound lives in Redis too, so every gateway on one Redis shares it: a sorted set of
 * the finished calls, each member `<bytes>:<id>` scored by when it expires (Redis's own clock,
 * in ms), and a counter of their bytes. The scripts that read the count first prune the members
 * whose time has passed, so bytes come back exactly when results leave, by TTL. A call's room
 * for its result, reserved at create, is a member of the same set until its finish.
 */
import type { Redis } from 'ioredis';
import { defineScripts, redisScript } from './redis-connection.ts';

/**
 * Lua's `stored_bytes(stored, bytes, now)`: prunes the members of the sorted set `stored` whose
 * time has passed (members `<bytes>:<id>`, scored by expiry), takes their bytes off the counter
 * `bytes`, and returns what the rest hold. The store's byte bound and a client key's storedBytes
 * (gateway/access/limits-redis.ts) count stored results with it.
 */
export const STORED_BYTES_LUA = `
local function stored_bytes(stored, bytes, now)
  local gone = redis.call('ZRANGEBYSCORE', stored, '-inf', now, 'LIMIT', 0, 1000)
  if #gone > 0 then
    local freed = 0
    for _, member in ipairs(gone) do freed = freed + tonumber(string.match(member, '^(%d+):')) end
    redis.call('ZREM', stored, unpack(gone))
    redis.call('DECRBY', bytes, freed)
  end
  -- Nothing stored means nothing counted, whatever drift (a key deleted by hand) says.
  if redis.call('ZCARD', stored) == 0 then
    redis.call('DEL', bytes)
    return 0
  end
  return tonumber(redis.call('GET', bytes) or '0')
end
`;

/**
 * Lua's `now_ms()` (Redis's own clock in ms) and `stored_bytes`: shared by the scripts below and
 * the batch store's (batch-redis.ts), whose files are members of the same stored set.
 */
export const COMMON_LUA = `
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
${STORED_BYTES_LUA}`;

/**
 * KEYS: call, stored set, byte counter. ARGV: record JSON, ttl ms, not-after (ms of Redis's
 * clock), status (`queued` or `running`), bytes to reserve (0: none), maxStoredBytes, how long
 * the reservation holds at most (ms: the call's lifetime), its member (`<bytes>:r:<id>`).
 * Returns {1, stored bytes} when created, {0, 0} when the id is taken, {-1, 0} when the write
 * arrived after its not-after bound (its gateway has given up on it by then, and a record
 * written now would say the call is live when nobody places or runs it), {-2, stored bytes}
 * when the reservation does not fit (nothing written).
 *
 * A reservation is a member of the stored set like a result, scored by when it lapses, so the
 * byte count holds it and a call nobody finishes (its gateway died) gives it back then; the call
 * names it in its `reserved` field, for finish.
 */
const CREATE = redisScript(
  'sluiceCreate',
  3,
  `${COMMON_LUA}
local now = now_ms()
if now > tonumber(ARGV[3]) then return {-1, 0} end
if redis.call('EXISTS', KEYS[1]) == 1 then return {0, 0} end
local reserve = tonumber(ARGV[5])
local used = 0
if reserve > 0 then
  used = stored_bytes(KEYS[2], KEYS[3], now)
  if used + reserve > tonumber(ARGV[6]) then return {-2, used} end
  redis.call('ZADD', KEYS[2], now + tonumber(ARGV[7]), ARGV[8])
  used = redis.call('INCRBY', KEYS[3], reserve)
  redis.call('HSET', KEYS[1], 'reserved', ARGV[8])
end
redis.call('HSET', KEYS[1], 'status', ARGV[4], 'record', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, used}
`,
);

/**
 * KEYS: call. ARGV: start JSON. Returns 1 when the call was queued and is now running, 0 when
 * it was not queued (nothing changed). The TTL set at create stays: it already covers the
 * call's lifetime.
 */
const START = redisScript(
  'sluiceStart',
  1,
  `
if redis.call('HGET', KEYS[1], 'status') ~= 'queued' then return 0 end
redis.call('HSET', KEYS[1], 'status', 'running', 'start', ARGV[1])
return 1
`,
);

/**
 * KEYS: call, result, stored set, byte counter. ARGV: status, final JSON, ttl ms,
 * maxStoredBytes, member (`<bytes>:<id>`), bytes, then optionally result status, content type,
 * body. Returns {1, stored bytes} when the call was live (queued or running) and is now final;
 * {0, stored bytes} when it was not (nothing changed); {-1, stored bytes} when the result does
 * not fit (nothing changed). A finish without a result is never refused for space. A written
 * finish gives back the room the call reserved at create.
 */
const FINISH = redisScript(
  'sluiceFinish',
  4,
  `${COMMON_LUA}
local status = redis.call('HGET', KEYS[1], 'status')
if status ~= 'queued' and status ~= 'running' then return {0, 0} end
local now = now_ms()
local used = stored_bytes(KEYS[3], KEYS[4], now)
local bytes = tonumber(ARGV[6])
-- The call's own reservation, unless it lapsed, is room for its result.
local reservation = redis.call('HGET', KEYS[1], 'reserved')
local own = 0
if reservation and redis.call('ZSCORE', KEYS[3], reservation) then own = tonumber(string.match(reservation, '^(%d+):')) end
if #ARGV > 6 and used - own + bytes > tonumber(ARGV[4]) then return {-1, used - own} end
if own > 0 then
  redis.call('ZREM', KEYS[3], reservation)
  redis.call('DECRBY', KEYS[4], own)
end
redis.call('HSET', KEYS[1], 'status', ARGV[1], 'final', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
if #ARGV > 6 then
  redis.call('DEL', KEYS[2])
  redis.call('HSET', KEYS[2], 'status', ARGV[7], 'type', ARGV[8], 'body', ARGV[9])
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
redis.call('ZADD', KEYS[3], now + tonumber(ARGV[3]), ARGV[5])
return {1, redis.call('INCRBY', KEYS[4], bytes)}
`,
);

/** KEYS: stored set, byte counter. Returns {stored bytes, Redis's clock in ms}. */
const HEALTH = redisScript(
  'sluiceHealth',
  2,
  `${COMMON_LUA}
local now = now_ms()
return {stored_bytes(KEYS[1], KEYS[2], now), now}
`,
);

/** KEYS: key. ARGV: callId, fingerprint, ttl ms. Returns nil when claimed, else the holder. */
const CLAIM = redisScript(
  'sluiceClaim',
  1,
  `
local held = redis.call('HMGET', KEYS[1], 'callId', 'fingerprint')
if held[1] then return held end
redis.call('HSET', KEYS[1], 'callId', ARGV[1], 'fingerprint', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return nil
`,
);

/** KEYS: key. ARGV: callId. Deletes the key only while it still points at that call. */
const RELEASE = redisScript(
  'sluiceRelease',
  1,
  `
if redis.call('HGET', KEYS[1], 'callId') == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`,
);

/** The scripts as commands on a client (ioredis sends EVALSHA and falls back to EVAL). */
export interface StoreScripts {
  sluiceCreate(call: string, stored: string, bytes: string, ...args: (string | number)[]): Promise<[number, number]>;
  sluiceStart(call: string, start: string): Promise<number>;
  sluiceFinish(
    call: string,
    result: string,
    stored: string,
    bytes: string,
    ...args: (string | number | Buffer)[]
  ): Promise<[number, number]>;
  sluiceHealth(stored: string, bytes: string): Promise<[number, number]>;
  sluiceClaim(key: string, callId: string, fingerprint: string, ttlMs: number): Promise<[string, string] | null>;
  sluiceRelease(key: string, callId: string): Promise<number>;
}

/** Defines the store's scripts on `client` and returns it typed with them. */
export function defineStoreScripts(client: Redis): Redis & StoreScripts {
  return defineScripts<StoreScripts>(client, [CREATE, START, FINISH, HEALTH, CLAIM, RELEASE]);
}
