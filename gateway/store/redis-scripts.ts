/**
 * The Lua scripts behind the Redis store's compare-and-set operations. Each runs atomically in
 * Redis, so two gateways finishing, claiming or releasing at once cannot interleave.
 *
 * Layout: a call is a hash {status, record, final}: `record` is the JSON written at create and
 * never changed, `final` the JSON of the fields finish wrote; readers merge the two. Keeping
 * `status` in its own field lets the scripts compare it without decoding JSON in Lua (whose
 * cjson rounds numbers to 14 digits). A result is a hash {status, type, body}, body binary.
 * An Idempotency-Key is a hash {callId, fingerprint}.
 */
import type { Redis } from 'ioredis';

/** KEYS: call. ARGV: record JSON, ttl ms. Returns 1 when created, 0 when the id is taken. */
const CREATE = `
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'status', 'running', 'record', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`;

/**
 * KEYS: call, result. ARGV: status, final JSON, ttl ms, then optionally result status, content
 * type, body. Returns 1 when the call was running and is now final, else 0 with nothing changed.
 */
const FINISH = `
if redis.call('HGET', KEYS[1], 'status') ~= 'running' then return 0 end
redis.call('HSET', KEYS[1], 'status', ARGV[1], 'final', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
if #ARGV > 3 then
  redis.call('DEL', KEYS[2])
  redis.call('HSET', KEYS[2], 'status', ARGV[4], 'type', ARGV[5], 'body', ARGV[6])
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
return 1
`;

/** KEYS: key. ARGV: callId, fingerprint, ttl ms. Returns nil when claimed, else the holder. */
const CLAIM = `
local held = redis.call('HMGET', KEYS[1], 'callId', 'fingerprint')
if held[1] then return held end
redis.call('HSET', KEYS[1], 'callId', ARGV[1], 'fingerprint', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return nil
`;

/** KEYS: key. ARGV: callId. Deletes the key only while it still points at that call. */
const RELEASE = `
if redis.call('HGET', KEYS[1], 'callId') == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`;

/** The scripts as commands on a client (ioredis sends EVALSHA and falls back to EVAL). */
export interface StoreScripts {
  sluiceCreate(call: string, record: string, ttlMs: number): Promise<number>;
  sluiceFinish(call: string, result: string, ...args: (string | number | Buffer)[]): Promise<number>;
  sluiceClaim(key: string, callId: string, fingerprint: string, ttlMs: number): Promise<[string, string] | null>;
  sluiceRelease(key: string, callId: string): Promise<number>;
}

/** Defines the store's scripts on `client` and returns it typed with them. */
export function defineScripts(client: Redis): Redis & StoreScripts {
  client.defineCommand('sluiceCreate', { numberOfKeys: 1, lua: CREATE });
  client.defineCommand('sluiceFinish', { numberOfKeys: 2, lua: FINISH });
  client.defineCommand('sluiceClaim', { numberOfKeys: 1, lua: CLAIM });
  client.defineCommand('sluiceRelease', { numberOfKeys: 1, lua: RELEASE });
  return client as Redis & StoreScripts;
}
