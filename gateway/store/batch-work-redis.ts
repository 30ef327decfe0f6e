/**
 * The work of batches in Redis, shared by every gateway on it: a batch's chunks are a hash
 * `chunks:<id>` {n, stop, fin, c<i>} where `c<i>` is `done` or a lease `<holder>|<until>` and
 * `fin` the finalize step's lease (until: Redis's own clock, in ms, so gateways' clocks never
 * matter); its lines are a hash `lines:<id>` of custom_id → `s<holder>` (started) or `c<line>` /
 * `f<line>` (the output or error file's line), and `counts:<id>` the results written each way.
 * Each rule runs in one Lua script, so two gateways taking, claiming or writing at once cannot
 * interleave. These keys live two days past their last write and go when the batch is final.
 */
import type { Redis } from 'ioredis';
import { redisScript } from './redis-connection.ts';
import { COMMON_LUA } from './redis-scripts.ts';
import type { BatchStop, ChunkTake, LineClaim, LineResult } from './batch-types.ts';

/** How long a batch's work outlives its last write: more than the longest completion window. */
const WORK_TTL_MS = 48 * 3_600_000;

/** Lua: whether a lease value is held by ARGV-given `holder` (`<holder>|<until>`). */
const HELD_BY = `
local function held_by(v, holder)
  return v ~= false and v ~= 'done' and string.sub(v, 1, #holder + 1) == holder .. '|'
end`;

/** KEYS: chunks. ARGV: count, ttl. */
const OPEN = redisScript(
  'sluiceBatchOpen',
  1,
  `redis.call('HSETNX', KEYS[1], 'n', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1`,
);

/**
 * KEYS: chunks. ARGV: holder, lease ttl. Returns {'chunk', i}, {'finalize', stop or ''} or
 * {'none'}: a free or expired chunk unless stopped; else the finalize step when every chunk is
 * done (or the batch stopped) and no chunk or finalize lease is live.
 */
const TAKE = redisScript(
  'sluiceBatchTake',
  1,
  `${COMMON_LUA}
local all = redis.call('HGETALL', KEYS[1])
local h = {}
for i = 1, #all, 2 do h[all[i]] = all[i + 1] end
local n = tonumber(h['n'])
if not n then return {'none'} end
local now = now_ms()
local function live(v)
  if v == nil or v == 'done' then return false end
  return tonumber(string.match(v, '|(%d+)$')) > now
end
local lease = ARGV[1] .. '|' .. (now + tonumber(ARGV[2]))
local stop = h['stop']
local busy = false
local done = 0
for i = 0, n - 1 do
  local v = h['c' .. i]
  if v == 'done' then done = done + 1
  elseif live(v) then busy = true
  elseif stop == nil then
    redis.call('HSET', KEYS[1], 'c' .. i, lease)
    return {'chunk', i}
  end
end
if busy or (stop == nil and done < n) or live(h['fin']) then return {'none'} end
redis.call('HSET', KEYS[1], 'fin', lease)
return {'finalize', stop or ''}`,
);

/** KEYS: chunks. ARGV: field, holder, ttl. Returns 1 when renewed. */
const RENEW = redisScript(
  'sluiceBatchRenew',
  1,
  `${COMMON_LUA}${HELD_BY}
if not held_by(redis.call('HGET', KEYS[1], ARGV[1]), ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. '|' .. (now_ms() + tonumber(ARGV[3])))
return 1`,
);

/** KEYS: chunks. ARGV: field, holder, 'done' or '' (give back). */
const SETTLE = redisScript(
  'sluiceBatchSettle',
  1,
  `${HELD_BY}
if not held_by(redis.call('HGET', KEYS[1], ARGV[1]), ARGV[2]) then return 0 end
if ARGV[3] == 'done' then redis.call('HSET', KEYS[1], ARGV[1], 'done') else redis.call('HDEL', KEYS[1], ARGV[1]) end
return 1`,
);

/** KEYS: lines. ARGV: custom_id, holder, ttl. Returns 'claimed' (also when the mark is the holder's own), 'started' or 'ended'. */
const CLAIM = redisScript(
  'sluiceBatchClaim',
  1,
  `local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then
  redis.call('HSET', KEYS[1], ARGV[1], 's' .. ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return 'claimed'
end
if v == 's' .. ARGV[2] then return 'claimed' end
if string.sub(v, 1, 1) == 's' then return 'started' end
return 'ended'`,
);

/** KEYS: lines. ARGV: custom_id, holder. */
const UNCLAIM = redisScript(
  'sluiceBatchUnclaim',
  1,
  `if redis.call('HGET', KEYS[1], ARGV[1]) == 's' .. ARGV[2] then redis.call('HDEL', KEYS[1], ARGV[1]) end
return 1`,
);

/** KEYS: lines, counts. ARGV: custom_id, 'c' or 'f', line, outcome, ttl. Returns 1 when written. */
const PUT = redisScript(
  'sluiceBatchPut',
  2,
  `local v = redis.call('HGET', KEYS[1], ARGV[1])
if v and string.sub(v, 1, 1) ~= 's' then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ARGV[3])
redis.call('HINCRBY', KEYS[2], ARGV[4], 1)
redis.call('PEXPIRE', KEYS[1], ARGV[5])
redis.call('PEXPIRE', KEYS[2], ARGV[5])
return 1`,
);

/** The scripts the work needs defined on the client. */
export const BATCH_WORK_SCRIPTS = [OPEN, TAKE, RENEW, SETTLE, CLAIM, UNCLAIM, PUT];

/** The commands those scripts become. */
export interface BatchWorkScripts {
  sluiceBatchOpen(key: string, count: number, ttl: number): Promise<number>;
  sluiceBatchTake(key: string, holder: string, ttl: number): Promise<[string, (number | string)?]>;
  sluiceBatchRenew(key: string, field: string, holder: string, ttl: number): Promise<number>;
  sluiceBatchSettle(key: string, field: string, holder: string, how: string): Promise<number>;
  sluiceBatchClaim(key: string, customId: string, holder: string, ttl: number): Promise<LineClaim>;
  sluiceBatchUnclaim(key: string, customId: string, holder: string): Promise<number>;
  sluiceBatchPut(
    lines: string,
    counts: string,
    customId: string,
    kind: string,
    line: string,
    outcome: string,
    ttl: number,
  ): Promise<number>;
}

/** Runs a command on the connected client, its failures turned into the store's errors. */
export type RunCommand = <T>(operation: () => Promise<T>) => Promise<T>;

/** One batch's work keys. */
export interface WorkKeys {
  chunks: string;
  lines: string;
  counts: string;
}

/** The work operations of the Redis batch store. */
export class RedisBatchWork {
  readonly #client: Redis & BatchWorkScripts;
  readonly #run: RunCommand;
  readonly #keys: (id: string) => WorkKeys;

  constructor(client: Redis & BatchWorkScripts, run: RunCommand, keys: (id: string) => WorkKeys) {
    this.#client = client;
    this.#run = run;
    this.#keys = keys;
  }

  async open(id: string, count: number): Promise<void> {
    await this.#run(() => this.#client.sluiceBatchOpen(this.#keys(id).chunks, count, WORK_TTL_MS));
  }

  async take(id: string, holder: string, ttl: number): Promise<ChunkTake> {
    const [kind, value] = await this.#run(() => this.#client.sluiceBatchTake(this.#keys(id).chunks, holder, ttl));
    if (kind === 'chunk') return { kind, index: Number(value) };
    if (kind !== 'finalize') return { kind: 'none' };
    return value ? { kind, stop: value as BatchStop } : { kind };
  }

  async renew(id: string, index: number, holder: string, ttl: number): Promise<boolean> {
    const renewed = await this.#run(() =>
      this.#client.sluiceBatchRenew(this.#keys(id).chunks, field(index), holder, ttl),
    );
    return renewed === 1;
  }

  async settle(id: string, index: number, holder: string, how: 'done' | 'give back'): Promise<void> {
    const value = how === 'done' ? 'done' : '';
    await this.#run(() => this.#client.sluiceBatchSettle(this.#keys(id).chunks, field(index), holder, value));
  }

  async stop(id: string, stop: BatchStop): Promise<void> {
    await this.#run(() => this.#client.hsetnx(this.#keys(id).chunks, 'stop', stop));
  }

  claim(id: string, customId: string, holder: string): Promise<LineClaim> {
    return this.#run(() => this.#client.sluiceBatchClaim(this.#keys(id).lines, customId, holder, WORK_TTL_MS));
  }

  async unclaim(id: string, customId: string, holder: string): Promise<void> {
    await this.#run(() => this.#client.sluiceBatchUnclaim(this.#keys(id).lines, customId, holder));
  }

  async put(id: string, customId: string, result: LineResult): Promise<boolean> {
    const { lines, counts } = this.#keys(id);
    const kind = result.outcome === 'completed' ? 'c' : 'f';
    const written = await this.#run(() =>
      this.#client.sluiceBatchPut(lines, counts, customId, kind, result.line, result.outcome, WORK_TTL_MS),
    );
    return written === 1;
  }

  async results(id: string): Promise<Map<string, LineResult>> {
    const all = await this.#run(() => this.#client.hgetall(this.#keys(id).lines));
    const results = new Map<string, LineResult>();
    for (const [customId, value] of Object.entries(all)) {
      const kind = value[0];
      if (kind === 'c' || kind === 'f')
        results.set(customId, { outcome: kind === 'c' ? 'completed' : 'failed', line: value.slice(1) });
    }
    return results;
  }

  /** The lines ended each way so far. */
  async counts(id: string): Promise<{ completed: number; failed: number }> {
    const [completed, failed] = await this.#run(() => this.#client.hmget(this.#keys(id).counts, 'completed', 'failed'));
    return { completed: Number(completed ?? 0), failed: Number(failed ?? 0) };
  }

  /** Forgets a batch's work (it is final). */
  async forget(id: string): Promise<void> {
    const { chunks, lines, counts } = this.#keys(id);
    await this.#run(() => this.#client.del(chunks, lines, counts));
  }
}

/** The chunks hash's field of a chunk, or of the finalize step (index -1). */
function field(index: number): string {
  return index < 0 ? 'fin' : `c${index}`;
}
