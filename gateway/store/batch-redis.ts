/**
 * The Redis BatchStore, beside the Redis CallStore under the same key prefix, so every gateway
 * on one Redis reads every file and batch. A file is a hash {record, content, member}; its bytes
 * are a member of the call store's own stored set (`<bytes>:f:<id>`, scored by when the file
 * expires, in Redis's clock) and counter, so detached results and files share one
 * maxStoredBytes that Redis itself counts, and a file that does not fit is refused atomically.
 * A batch is its record's JSON, changed by compare-and-set on the whole string (no JSON decoding
 * in Lua); a final one expires a result TTL after it ended. Listings are sorted sets of ids by
 * creation time, per owner and for all, pruned of ids whose record is gone as they are read.
 * Expiry is also read on the store's clock, as the memory store reads it. The batches not final
 * are a set `batches-running`; their work (chunks, leases, line results) is batch-work-redis.ts's.
 */
import type { Redis } from 'ioredis';
import { SluiceError } from '../../placer/kernel/index.ts';
import { StoreInvalidRecordError, StoreUnavailableError, storeFull } from './errors.ts';
import { resolveRedisStoreConfig } from './options.ts';
import type { RedisStoreConfig, RedisStoreOptions } from './options.ts';
import { connectRedis, defineScripts, quitRedis, redisScript, redisUses } from './redis-connection.ts';
import { COMMON_LUA } from './redis-scripts.ts';
import type {
  BatchRecord,
  BatchStop,
  BatchStore,
  ChunkTake,
  FileRecord,
  LineClaim,
  LineResult,
  Owner,
  Page,
} from './batch-types.ts';
import { FINAL_BATCH_STATUSES } from './batch-types.ts';
import { BATCH_WORK_SCRIPTS, RedisBatchWork } from './batch-work-redis.ts';
import type { BatchWorkScripts } from './batch-work-redis.ts';

/**
 * KEYS: file, stored set, byte counter, owner's list, everyone's list. ARGV: content, record
 * JSON, ttl ms, maxStoredBytes, member, bytes, creation time, id. Returns {1, bytes held} when
 * kept, {0, 0} when the id is taken, {-1, bytes held} when it does not fit (nothing written).
 */
const PUT_FILE = redisScript(
  'sluiceBatchPutFile',
  5,
  `${COMMON_LUA}
if redis.call('EXISTS', KEYS[1]) == 1 then return {0, 0} end
local now = now_ms()
local used = stored_bytes(KEYS[2], KEYS[3], now)
local bytes = tonumber(ARGV[6])
if used + bytes > tonumber(ARGV[4]) then return {-1, used} end
redis.call('HSET', KEYS[1], 'record', ARGV[2], 'content', ARGV[1], 'member', ARGV[5])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[3]), ARGV[5])
redis.call('INCRBY', KEYS[3], bytes)
redis.call('ZADD', KEYS[4], ARGV[7], ARGV[8])
redis.call('ZADD', KEYS[5], ARGV[7], ARGV[8])
return {1, used + bytes}`,
);

/** KEYS: file, stored set, byte counter, owner's list, everyone's list. ARGV: id. Returns 1 when deleted. */
const DELETE_FILE = redisScript(
  'sluiceBatchDeleteFile',
  5,
  `local member = redis.call('HGET', KEYS[1], 'member')
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('ZREM', KEYS[5], ARGV[1])
if not member then return 0 end
redis.call('DEL', KEYS[1])
if redis.call('ZREM', KEYS[2], member) == 1 then
  redis.call('DECRBY', KEYS[3], tonumber(string.match(member, '^(%d+):')))
end
return 1`,
);

/** KEYS: batch. ARGV: the JSON expected, the JSON to write, ttl ms (0: none). Returns 1 when written. */
const SWAP_BATCH = redisScript(
  'sluiceBatchSwap',
  1,
  `if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if tonumber(ARGV[3]) > 0 then redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
else redis.call('SET', KEYS[1], ARGV[2]) end
return 1`,
);

interface BatchScripts {
  sluiceBatchPutFile(...args: (string | number | Buffer)[]): Promise<[number, number]>;
  sluiceBatchDeleteFile(...args: string[]): Promise<number>;
  sluiceBatchSwap(key: string, expected: string, next: string, ttl: number): Promise<number>;
}

/** Attempts of a compare-and-set against other writers before giving up. */
const MAX_SWAPS = 20;

class RedisBatchStore implements BatchStore {
  readonly #config: RedisStoreConfig;
  readonly #client: Redis & BatchScripts & BatchWorkScripts;
  readonly #work: RedisBatchWork;
  readonly shared = true;
  #closing: Promise<void> | undefined;

  constructor(config: RedisStoreConfig) {
    this.#config = config;
    const { client } = connectRedis(config.redis, redisUses.store, config);
    // Logged once per outage, not once per reconnect attempt.
    let healthy = true;
    client.on('error', (error: Error) => {
      if (healthy) config.logger.warn('batch store connection lost', { store: config.redis.display, error });
      healthy = false;
    });
    client.on('ready', () => {
      if (!healthy) config.logger.info('batch store connection restored', { store: config.redis.display });
      healthy = true;
    });
    this.#client = defineScripts<BatchScripts & BatchWorkScripts>(client, [
      PUT_FILE,
      DELETE_FILE,
      SWAP_BATCH,
      ...BATCH_WORK_SCRIPTS,
    ]);
    this.#work = new RedisBatchWork(
      this.#client,
      (operation) => this.#run(operation),
      (id) => ({ chunks: this.#key('chunks', id), lines: this.#key('lines', id), counts: this.#key('counts', id) }),
    );
  }

  async putFile(record: FileRecord, content: Buffer): Promise<void> {
    const { maxStoredBytes, now } = this.#config;
    const ttl = Math.max(1, Math.ceil(record.expiresAt - now()));
    const member = `${content.length}:f:${record.id}`;
    const [kept, held] = await this.#run(() =>
      this.#client.sluiceBatchPutFile(
        ...this.#fileKeys(record),
        content,
        JSON.stringify(record),
        ttl,
        maxStoredBytes,
        member,
        content.length,
        record.createdAt,
        record.id,
      ),
    );
    if (kept === -1) throw storeFull(record.id, { bytes: content.length, storedBytes: held, maxStoredBytes });
    if (kept === 0) throw new StoreInvalidRecordError(`file ${record.id} already exists`);
  }

  async getFile(id: string): Promise<FileRecord | undefined> {
    const raw = await this.#run(() => this.#client.hget(this.#key('file', id), 'record'));
    if (!raw) return undefined;
    const record = JSON.parse(raw) as FileRecord;
    if (this.#config.now() < record.expiresAt) return record;
    await this.deleteFile(id);
    return undefined;
  }

  async fileContent(id: string): Promise<Buffer | undefined> {
    if (!(await this.getFile(id))) return undefined;
    return (await this.#run(() => this.#client.hgetBuffer(this.#key('file', id), 'content'))) ?? undefined;
  }

  async listFiles(owner: Owner, after: string | undefined, limit: number): Promise<Page<FileRecord>> {
    return this.#page('files', owner, after, limit, (id) => this.getFile(id));
  }

  async deleteFile(id: string): Promise<boolean> {
    const raw = await this.#run(() => this.#client.hget(this.#key('file', id), 'record'));
    const client = raw ? (JSON.parse(raw) as FileRecord).client : undefined;
    const keys = this.#fileKeys({ id, ...(client === undefined ? {} : { client }) });
    return (await this.#run(() => this.#client.sluiceBatchDeleteFile(...keys, id))) === 1;
  }

  async putBatch(record: BatchRecord): Promise<void> {
    const set = await this.#run(() => this.#client.set(this.#key('batch', record.id), JSON.stringify(record), 'NX'));
    if (set !== 'OK') throw new StoreInvalidRecordError(`batch ${record.id} already exists`);
    await this.#run(() =>
      this.#client
        .multi()
        .zadd(this.#list('batches', record.client), record.createdAt, record.id)
        .zadd(this.#key('batches-all', ''), record.createdAt, record.id)
        .sadd(this.#key('batches-running', ''), record.id)
        .exec(),
    );
  }

  async getBatch(id: string): Promise<BatchRecord | undefined> {
    const record = (await this.#readBatch(id))?.record;
    return record && this.#counted(record);
  }

  async updateBatch(id: string, fields: Partial<BatchRecord>): Promise<BatchRecord | undefined> {
    for (let attempt = 0; attempt < MAX_SWAPS; attempt++) {
      const read = await this.#readBatch(id);
      if (!read || FINAL_BATCH_STATUSES.has(read.record.status)) return undefined;
      const next: BatchRecord = { ...read.record, ...fields, id };
      const ttl = FINAL_BATCH_STATUSES.has(next.status) ? this.#config.resultTtl : 0;
      const swapped = await this.#run(() =>
        this.#client.sluiceBatchSwap(this.#key('batch', id), read.raw, JSON.stringify(next), ttl),
      );
      if (swapped === 1) return this.#settled(next);
    }
    throw new StoreUnavailableError(`batch ${id} kept changing under ${MAX_SWAPS} writes; try again`);
  }

  async listBatches(owner: Owner, after: string | undefined, limit: number): Promise<Page<BatchRecord>> {
    return this.#page('batches', owner, after, limit, (id) => this.getBatch(id));
  }

  async runningBatches(): Promise<string[]> {
    const running = this.#key('batches-running', '');
    const ids = await this.#run(() => this.#client.smembers(running));
    const live: string[] = [];
    for (const id of ids) {
      const record = await this.getBatch(id);
      if (record && !FINAL_BATCH_STATUSES.has(record.status)) live.push(id);
      else await this.#run(() => this.#client.srem(running, id));
    }
    return live;
  }

  openChunks(id: string, count: number): Promise<void> {
    return this.#work.open(id, count);
  }

  takeChunk(id: string, holder: string, ttl: number): Promise<ChunkTake> {
    return this.#work.take(id, holder, ttl);
  }

  renewChunk(id: string, index: number, holder: string, ttl: number): Promise<boolean> {
    return this.#work.renew(id, index, holder, ttl);
  }

  endChunk(id: string, index: number, holder: string): Promise<void> {
    return this.#work.settle(id, index, holder, 'done');
  }

  releaseChunk(id: string, index: number, holder: string): Promise<void> {
    return this.#work.settle(id, index, holder, 'give back');
  }

  stopBatch(id: string, stop: BatchStop): Promise<void> {
    return this.#work.stop(id, stop);
  }

  claimLine(id: string, customId: string, holder: string): Promise<LineClaim> {
    return this.#work.claim(id, customId, holder);
  }

  unclaimLine(id: string, customId: string, holder: string): Promise<void> {
    return this.#work.unclaim(id, customId, holder);
  }

  putLineResult(id: string, customId: string, result: LineResult): Promise<boolean> {
    return this.#work.put(id, customId, result);
  }

  lineResults(id: string): Promise<Map<string, LineResult>> {
    return this.#work.results(id);
  }

  async separateBytes(): Promise<number> {
    // Counted in the call store's own count, which its health reports.
    return 0;
  }

  close(): Promise<void> {
    this.#closing ??= quitRedis(this.#client);
    return this.#closing;
  }

  /** A batch not final with its counts of lines ended, from the results written. */
  async #counted(record: BatchRecord): Promise<BatchRecord> {
    if (FINAL_BATCH_STATUSES.has(record.status)) return record;
    return { ...record, requestCounts: { ...record.requestCounts, ...(await this.#work.counts(record.id)) } };
  }

  /** A batch just written: counted while it runs; once final, its work is forgotten and it leaves the running set. */
  async #settled(record: BatchRecord): Promise<BatchRecord> {
    if (!FINAL_BATCH_STATUSES.has(record.status)) return this.#counted(record);
    await this.#work.forget(record.id);
    await this.#run(() => this.#client.srem(this.#key('batches-running', ''), record.id));
    return record;
  }

  /** The batch and its JSON as stored, unless it ended more than the result TTL ago. */
  async #readBatch(id: string): Promise<{ raw: string; record: BatchRecord } | undefined> {
    const raw = await this.#run(() => this.#client.get(this.#key('batch', id)));
    if (!raw) return undefined;
    const record = JSON.parse(raw) as BatchRecord;
    const ended = record.completedAt ?? record.failedAt ?? record.expiredAt ?? record.cancelledAt;
    if (ended !== undefined && this.#config.now() >= ended + this.#config.resultTtl) return undefined;
    return { raw, record };
  }

  /** A page of `owner`'s ids in `kind`, newest first, read with `read` and pruned of those gone. */
  async #page<T extends { id: string }>(
    kind: 'files' | 'batches',
    owner: Owner,
    after: string | undefined,
    limit: number,
    read: (id: string) => Promise<T | undefined>,
  ): Promise<Page<T>> {
    const list = owner.kind === 'all' ? this.#key(`${kind}-all`, '') : this.#list(kind, owner.client);
    const ids = await this.#run(() => this.#client.zrevrange(list, 0, -1));
    let start = 0;
    if (after !== undefined) {
      start = ids.indexOf(after) + 1;
      if (start === 0) return { data: [], hasMore: false };
    }
    const data: T[] = [];
    let i = start;
    for (; i < ids.length && data.length < limit; i++) {
      const record = await read(ids[i]!);
      if (record) data.push(record);
      else await this.#run(() => this.#client.zrem(list, ids[i]!));
    }
    return { data, hasMore: i < ids.length };
  }

  #fileKeys(record: { id: string; client?: string }): [string, string, string, string, string] {
    return [
      this.#key('file', record.id),
      this.#key('stored', ''),
      this.#key('stored-bytes', ''),
      this.#list('files', record.client),
      this.#key('files-all', ''),
    ];
  }

  #list(kind: 'files' | 'batches', client: string | undefined): string {
    return this.#key(`${kind}-of`, client ?? '-');
  }

  #key(kind: string, name: string): string {
    return name === '' ? `${this.#config.keyPrefix}${kind}` : `${this.#config.keyPrefix}${kind}:${name}`;
  }

  /** Runs a command once connected, turning any failure into StoreUnavailableError naming the store. */
  async #run<T>(operation: () => Promise<T>): Promise<T> {
    const { display } = this.#config.redis;
    if (this.#closing) throw new StoreUnavailableError(`the redis batch store ${display} is closed`);
    try {
      await this.#connected();
      return await operation();
    } catch (error) {
      if (error instanceof SluiceError) throw error;
      throw new StoreUnavailableError(`redis store ${display} is unavailable: ${(error as Error).message}`, {
        cause: error,
      });
    }
  }

  /** Waits for a connection being made, within the connect timeout; commands are never queued. */
  async #connected(): Promise<void> {
    const client = this.#client;
    if (client.status === 'ready') return;
    if (!['wait', 'connecting', 'connect', 'reconnecting'].includes(client.status))
      throw new Error(`not connected (${client.status})`);
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        client.off('ready', onReady);
        reject(new Error(`not connected within ${this.#config.connectTimeout} ms`));
      }, this.#config.connectTimeout);
      const onReady = () => {
        clearTimeout(timer);
        resolve();
      };
      client.once('ready', onReady);
    });
  }
}

/**
 * Makes a Redis batch store and starts connecting in the background.
 * @throws StoreConfigError for a bad URL or option.
 */
export function createRedisBatchStore(options: RedisStoreOptions): BatchStore {
  return new RedisBatchStore(resolveRedisStoreConfig(options));
}
