/**
 * The Redis CallStore, for several gateways sharing the work: any gateway answers status and
 * result for any call, and a cancel reaching a gateway that does not own a call is published to
 * the owner's channel. Compare-and-set steps run as Lua scripts (redis-scripts.ts).
 *
 * A command is never queued for later: not while disconnected (its connection is the `store`
 * use of redis-connection.ts, which fails such a command at once), not again after a reconnect
 * (no Redis user resends an unanswered command). A write the store has given up on
 * could otherwise land long after its caller answered the client, as a live record nobody
 * places or runs. A create sent into a Redis that then stalls is already on the wire, so it
 * carries a not-after bound that its script checks against Redis's own clock.
 */
import { performance } from 'node:perf_hooks';
import type { Redis } from 'ioredis';
import { SluiceError } from '../../placer/kernel/index.ts';
import { StoreUnavailableError, storeFull } from './errors.ts';
import { CREATE_TIMEOUT_MS, RECORD_OVERHEAD_BYTES, resolveRedisStoreConfig } from './options.ts';
import type { RedisStoreConfig, RedisStoreOptions } from './options.ts';
import { connectRedis, quitRedis, redisUses } from './redis-connection.ts';
import { defineStoreScripts } from './redis-scripts.ts';
import type { StoreScripts } from './redis-scripts.ts';
import { checkClaimTtl, checkNewRecord, duplicateCall, finalFields, startFields } from './records.ts';
import type { CallFinish, CallRecord, CallStart, CallStore, KeyClaim, StoreHealth, StoredResult } from './types.ts';

/**
 * What the create's not-after bound leaves for error in our reading of Redis's clock: it is
 * CREATE_TIMEOUT_MS minus this after the send, so a create that lands at all lands while its
 * gateway still waits. Our reading comes from the health check (Redis's TIME against the middle
 * of the ping's round trip, at most HEALTH_TIMEOUT_MS), so it is off by half a round trip plus
 * whatever the two clocks drifted since, well within a second.
 */
const CLOCK_MARGIN_MS = 1_000;
/** A health check that takes longer says the store is not answering. */
const HEALTH_TIMEOUT_MS = 1_000;
/** A health answer is repeated for this long, so probes and admission cost one ping a second. */
const HEALTH_CACHE_MS = 1_000;

/**
 * Makes a Redis store and starts connecting in the background; a store that cannot reach Redis
 * rejects each call with StoreUnavailableError while it keeps trying to reconnect.
 * @throws StoreConfigError for a bad URL or option.
 */
export function createRedisStore(options: RedisStoreOptions): CallStore {
  return new RedisStore(resolveRedisStoreConfig(options));
}

class RedisStore implements CallStore {
  readonly #config: RedisStoreConfig;
  readonly #client: Redis & StoreScripts;
  /** Pub/sub needs a connection of its own: a subscribed connection takes no other commands. */
  #subscriber: Redis | undefined;
  readonly #handlers = new Map<string, (id: string) => void>();
  /** The last connection error, which says more than ioredis's "stream isn't writeable". */
  #lastError: Error | undefined;
  #closing: Promise<void> | undefined;
  /** The last health answer and when it came (performance.now()). */
  #health: { at: number; value: StoreHealth } | undefined;
  #checking: Promise<StoreHealth> | undefined;
  /** Redis's clock minus ours, in ms, as the last health check saw it. */
  #offset: number | undefined;

  constructor(config: RedisStoreConfig) {
    this.#config = config;
    // While Redis is away a command fails at once (the gateway answers 503 and the client
    // retries) and is never sent later, when its caller has long given up on it.
    const { client } = connectRedis(config.redis, redisUses.store, config);
    this.#watch(client, 'commands');
    this.#client = defineStoreScripts(client);
  }

  async create(record: CallRecord, reserve?: number): Promise<void> {
    checkNewRecord(record);
    // A live record outlives the call by the result TTL, so a call whose gateway died can
    // still be found and marked failed, and then vanishes like any finished call.
    const ttl = Math.max(1, Math.ceil(record.expiresAt + this.#config.resultTtl - this.#config.now()));
    // The bound is in Redis's clock, read by a health check; the first create makes one.
    if (this.#offset === undefined) await this.health();
    // Date.now(), not the gateway's clock: the bound is a reading of Redis's wall clock, estimated
    // from ours plus the offset the health check measured against Redis TIME with Date.now() too.
    const notAfter = Math.floor(Date.now() + (this.#offset ?? 0) + CREATE_TIMEOUT_MS - CLOCK_MARGIN_MS);
    const bytes = reserve !== undefined && reserve > 0 ? Math.ceil(reserve) : 0;
    // The reservation lapses with the call's lifetime, in Redis's clock, should nobody finish it.
    const holds = Math.max(1, Math.ceil(record.expiresAt - this.#config.now()));
    const { maxStoredBytes } = this.#config;
    const [created, storedBytes] = await this.#run(() =>
      this.#within(
        this.#client.sluiceCreate(
          this.#key('call', record.id),
          this.#key('stored', ''),
          this.#key('stored-bytes', ''),
          JSON.stringify(record),
          ttl,
          notAfter,
          record.status,
          bytes,
          maxStoredBytes,
          holds,
          `${bytes}:r:${record.id}`,
        ),
        CREATE_TIMEOUT_MS,
        `did not confirm the record of call ${record.id}`,
      ),
    );
    if (created === -2) throw storeFull(record.id, { bytes, storedBytes, maxStoredBytes });
    if (bytes > 0 && created === 1) this.#counted(storedBytes);
    if (created === -1) {
      throw new StoreUnavailableError(
        `redis store ${this.#config.redis.display} took too long to write the record of call ${record.id}; it was not written`,
      );
    }
    if (created !== 1) throw duplicateCall(record.id);
  }

  async start(id: string, start: CallStart): Promise<boolean> {
    const fields = JSON.stringify({ status: 'running', ...startFields(id, start) });
    // No not-after bound, unlike create: a start that lands late says only what is true, and a
    // call that finished meanwhile is no longer queued, so the script leaves it alone.
    const started = await this.#run(() =>
      this.#within(
        this.#client.sluiceStart(this.#key('call', id), fields),
        CREATE_TIMEOUT_MS,
        `did not confirm the start of call ${id}`,
      ),
    );
    return started === 1;
  }

  async get(id: string): Promise<CallRecord | undefined> {
    const [record, start, final] = await this.#run(() =>
      this.#client.hmget(this.#key('call', id), 'record', 'start', 'final'),
    );
    if (!record) return undefined;
    const over = (json: string | null | undefined) => (json ? (JSON.parse(json) as Partial<CallRecord>) : {});
    return { ...(JSON.parse(record) as CallRecord), ...over(start), ...over(final) };
  }

  async finish(id: string, finish: CallFinish, result?: StoredResult): Promise<boolean> {
    const { resultTtl, maxStoredBytes } = this.#config;
    const fields = finalFields(id, finish);
    const bytes = RECORD_OVERHEAD_BYTES + (result?.body.length ?? 0);
    const args: (string | number | Buffer)[] = [
      finish.status,
      JSON.stringify(fields),
      resultTtl,
      maxStoredBytes,
      `${bytes}:${id}`,
      bytes,
    ];
    if (result) args.push(String(result.status), result.contentType, result.body);
    const [done, storedBytes] = await this.#run(() =>
      this.#client.sluiceFinish(
        this.#key('call', id),
        this.#key('result', id),
        this.#key('stored', ''),
        this.#key('stored-bytes', ''),
        ...args,
      ),
    );
    if (done === -1) throw storeFull(id, { bytes, storedBytes, maxStoredBytes });
    if (done === 1) this.#counted(storedBytes);
    return done === 1;
  }

  /** Admission reads the cached count: keeps it current between health checks. */
  #counted(storedBytes: number): void {
    if (this.#health?.value.ok) this.#health = { ...this.#health, value: { ...this.#health.value, storedBytes } };
  }

  async getResult(id: string): Promise<StoredResult | undefined> {
    const [status, type, body] = await this.#run(() =>
      this.#client.hmgetBuffer(this.#key('result', id), 'status', 'type', 'body'),
    );
    if (!status || !type || !body) return undefined;
    return { status: Number(status.toString()), contentType: type.toString(), body };
  }

  async claimKey(key: string, claim: KeyClaim, ttlMs: number): Promise<KeyClaim | undefined> {
    checkClaimTtl(ttlMs);
    const held = await this.#run(() =>
      this.#client.sluiceClaim(this.#key('key', key), claim.callId, claim.fingerprint, ttlMs),
    );
    return held ? { callId: held[0], fingerprint: held[1] } : undefined;
  }

  async releaseKey(key: string, callId: string): Promise<void> {
    await this.#run(() => this.#client.sluiceRelease(this.#key('key', key), callId));
  }

  async requestCancel(id: string, owner: string): Promise<void> {
    // At most once: an owner disconnected at this moment misses it, and its call then ends on
    // its own timeout. The caller has marked nothing yet, so it can tell the client the truth.
    await this.#run(() => this.#client.publish(this.#key('cancel', owner), id));
  }

  async onCancel(owner: string, handler: (id: string) => void): Promise<void> {
    const channel = this.#key('cancel', owner);
    this.#handlers.set(channel, handler);
    const subscriber = this.#subscribe();
    await this.#run(() => subscriber.subscribe(channel), subscriber);
  }

  health(): Promise<StoreHealth> {
    if (this.#closing)
      return Promise.resolve({ ok: false, reason: `the redis store ${this.#config.redis.display} is closed` });
    const cached = this.#health;
    if (cached && performance.now() - cached.at < HEALTH_CACHE_MS) return Promise.resolve(cached.value);
    this.#checking ??= this.#check().finally(() => (this.#checking = undefined));
    return this.#checking;
  }

  close(): Promise<void> {
    this.#closing ??= Promise.all([this.#client, this.#subscriber].map(quitRedis)).then(() => undefined);
    return this.#closing;
  }

  #key(kind: 'call' | 'result' | 'key' | 'cancel' | 'stored' | 'stored-bytes', name: string): string {
    return name === '' ? `${this.#config.keyPrefix}${kind}` : `${this.#config.keyPrefix}${kind}:${name}`;
  }

  /**
   * Pings Redis through the script that also prunes and counts stored bytes; never rejects. The
   * reason of a failed check is a sentence naming the store (without credentials).
   */
  async #check(): Promise<StoreHealth> {
    const { logger, maxStoredBytes, redis } = this.#config;
    const before = this.#health?.value;
    let value: StoreHealth;
    try {
      // Wall clock against Redis's wall clock (TIME): the offset is between those two, whatever
      // clock the gateway places on (a test's fake one included).
      const sent = Date.now();
      const [storedBytes, redisNow] = await this.#within(
        this.#attempt(() => this.#client.sluiceHealth(this.#key('stored', ''), this.#key('stored-bytes', ''))),
        HEALTH_TIMEOUT_MS,
        'did not answer a health check',
      );
      this.#offset = redisNow - (sent + Date.now()) / 2;
      value = { ok: true, storedBytes, maxStoredBytes };
    } catch (error) {
      value = { ok: false, reason: describe(error) };
    }
    // A stalled Redis (stopped, swapping) drops no connection, so only this notices it.
    if (!value.ok && before?.ok !== false)
      logger.warn('store not answering', { store: redis.display, reason: value.reason });
    if (value.ok && before?.ok === false) logger.info('store answering again', { store: redis.display });
    this.#health = { at: performance.now(), value };
    return value;
  }

  /** Rejects with StoreUnavailableError after `ms`; the command itself may still run (see create). */
  #within<T>(command: Promise<T>, ms: number, what: string): Promise<T> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new StoreUnavailableError(`redis store ${this.#config.redis.display} ${what} within ${ms} ms`)),
        ms,
      );
    });
    command.catch(() => {}); // its late failure has no one to tell
    return Promise.race([command, late]).finally(() => clearTimeout(timer));
  }

  #subscribe(): Redis {
    if (this.#subscriber) return this.#subscriber;
    const subscriber = this.#client.duplicate();
    this.#watch(subscriber, 'cancels');
    subscriber.on('message', (channel: string, id: string) => {
      const handler = this.#handlers.get(channel);
      try {
        handler?.(id);
      } catch (error) {
        this.#config.logger.warn('cancel handler failed', { callId: id, channel, error });
      }
    });
    this.#subscriber = subscriber;
    return subscriber;
  }

  /** Logs a lost connection once per outage, not once per reconnect attempt. */
  #watch(connection: Redis, role: 'commands' | 'cancels'): void {
    const { logger, redis } = this.#config;
    let healthy = true;
    connection.on('error', (error: Error) => {
      this.#lastError = error;
      if (healthy) logger.warn('store connection lost', { store: redis.display, role, error });
      healthy = false;
    });
    connection.on('ready', () => {
      this.#lastError = undefined;
      // A health answer from before the connection came (back) is stale now.
      if (role === 'commands') this.#health = undefined;
      if (!healthy) logger.info('store connection restored', { store: redis.display, role });
      healthy = true;
    });
  }

  /**
   * Runs a Redis operation. While the last health check found Redis not answering, fails at
   * once instead of letting each operation wait out its timeout; the check is made again at
   * most a second later, so a store that answers again is used again within a second.
   */
  async #run<T>(operation: () => Promise<T>, connection: Redis = this.#client): Promise<T> {
    if (this.#health && !this.#health.value.ok) {
      const health = await this.health();
      if (!health.ok) throw new StoreUnavailableError(health.reason);
    }
    return this.#attempt(operation, connection);
  }

  /** Runs a Redis operation, turning any failure into a StoreUnavailableError naming the store. */
  async #attempt<T>(operation: () => Promise<T>, connection: Redis = this.#client): Promise<T> {
    const { display } = this.#config.redis;
    if (this.#closing) throw new StoreUnavailableError(`the redis store ${display} is closed`);
    try {
      await this.#connected(connection);
      return await operation();
    } catch (error) {
      if (error instanceof SluiceError) throw error;
      const reason = connection.status === 'ready' || !this.#lastError ? error : this.#lastError;
      throw new StoreUnavailableError(`redis store ${display} is unavailable: ${describe(reason)}`, { cause: error });
    }
  }

  /**
   * Waits for a connection being made (the first one, or a reconnect under way), since without
   * an offline queue a command sent before it is ready fails; a connection waiting to retry
   * fails at once with what went wrong.
   */
  async #connected(connection: Redis): Promise<void> {
    const { status } = connection;
    if (status === 'ready') return;
    if (status !== 'wait' && status !== 'connecting' && status !== 'connect')
      throw this.#lastError ?? new Error(`not connected (${status})`);
    await new Promise<void>((resolve, reject) => {
      const settle = (error?: Error) => {
        clearTimeout(timer);
        connection.off('ready', onReady);
        connection.off('error', onError);
        connection.off('close', onClose);
        if (error) reject(error);
        else resolve();
      };
      const onReady = () => settle();
      const onError = (error: Error) => settle(error);
      const onClose = () => settle(this.#lastError ?? new Error('connection closed'));
      const { connectTimeout } = this.#config;
      const timer = setTimeout(() => settle(new Error(`not connected within ${connectTimeout} ms`)), connectTimeout);
      connection.once('ready', onReady);
      connection.once('error', onError);
      connection.once('close', onClose);
    });
  }
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
