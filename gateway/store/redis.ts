/**
 * The Redis CallStore, for several gateways sharing the work: any gateway answers status and
 * result for any call, and a cancel reaching a gateway that does not own a call is published to
 * the owner's channel. Compare-and-set steps run as Lua scripts (redis-scripts.ts).
 */
import { Redis } from 'ioredis';
import { SluiceError } from '../../placer/errors.ts';
import { StoreUnavailableError } from './errors.ts';
import { resolveRedisStoreConfig } from './options.ts';
import type { RedisStoreConfig, RedisStoreOptions } from './options.ts';
import { defineScripts } from './redis-scripts.ts';
import type { StoreScripts } from './redis-scripts.ts';
import { checkClaimTtl, checkNewRecord, duplicateCall, finalFields } from './records.ts';
import type { CallFinish, CallRecord, CallStore, KeyClaim, StoredResult } from './types.ts';

/** A black-holed host must not stall a call for the OS's minutes-long TCP timeout. */
const CONNECT_TIMEOUT_MS = 2_000;
/** A Redis that accepts but never answers (stuck, swapping) fails commands instead of hanging them. */
const COMMAND_TIMEOUT_MS = 10_000;
/** Reconnect backoff cap: Redis coming back is noticed within a second. */
const MAX_RECONNECT_DELAY_MS = 1_000;

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
  /** The last connection error, which says more than ioredis's "max retries" on a queued command. */
  #lastError: Error | undefined;
  #closing: Promise<void> | undefined;

  constructor(config: RedisStoreConfig) {
    this.#config = config;
    const { host, port, db, username, password } = config.redis;
    const client = new Redis({
      host,
      port,
      db,
      ...(username === undefined ? {} : { username }),
      ...(password === undefined ? {} : { password }),
      connectTimeout: CONNECT_TIMEOUT_MS,
      commandTimeout: COMMAND_TIMEOUT_MS,
      // Fail a command after one failed reconnect rather than queueing it while Redis is down:
      // the gateway answers 503 at once and the client retries, instead of hanging.
      maxRetriesPerRequest: 1,
      retryStrategy: (attempt) => Math.min(attempt * 100, MAX_RECONNECT_DELAY_MS),
    });
    this.#watch(client, 'commands');
    this.#client = defineScripts(client);
  }

  async create(record: CallRecord): Promise<void> {
    checkNewRecord(record);
    // A running record outlives the call by the result TTL, so a call whose gateway died can
    // still be found and marked failed, and then vanishes like any finished call.
    const ttl = Math.max(1, Math.ceil(record.expiresAt + this.#config.resultTtl - this.#config.now()));
    const created = await this.#run(() => this.#client.sluiceCreate(this.#key('call', record.id), JSON.stringify(record), ttl));
    if (created !== 1) throw duplicateCall(record.id);
  }

  async get(id: string): Promise<CallRecord | undefined> {
    const [record, final] = await this.#run(() => this.#client.hmget(this.#key('call', id), 'record', 'final'));
    if (!record) return undefined;
    return { ...(JSON.parse(record) as CallRecord), ...(final ? (JSON.parse(final) as Partial<CallRecord>) : {}) };
  }

  async finish(id: string, finish: CallFinish, result?: StoredResult): Promise<boolean> {
    const fields = finalFields(finish);
    const args: (string | number | Buffer)[] = [finish.status, JSON.stringify(fields), this.#config.resultTtl];
    if (result) args.push(String(result.status), result.contentType, result.body);
    const done = await this.#run(() => this.#client.sluiceFinish(this.#key('call', id), this.#key('result', id), ...args));
    return done === 1;
  }

  async getResult(id: string): Promise<StoredResult | undefined> {
    const [status, type, body] = await this.#run(() => this.#client.hmgetBuffer(this.#key('result', id), 'status', 'type', 'body'));
    if (!status || !type || !body) return undefined;
    return { status: Number(status.toString()), contentType: type.toString(), body };
  }

  async claimKey(key: string, claim: KeyClaim, ttlMs: number): Promise<KeyClaim | undefined> {
    checkClaimTtl(ttlMs);
    const held = await this.#run(() => this.#client.sluiceClaim(this.#key('key', key), claim.callId, claim.fingerprint, ttlMs));
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
    await this.#run(() => this.#subscribe().subscribe(channel));
  }

  close(): Promise<void> {
    this.#closing ??= Promise.all([this.#client, this.#subscriber].map(quit)).then(() => undefined);
    return this.#closing;
  }

  #key(kind: 'call' | 'result' | 'key' | 'cancel', name: string): string {
    return `${this.#config.keyPrefix}${kind}:${name}`;
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
      if (!healthy) logger.info('store connection restored', { store: redis.display, role });
      healthy = true;
    });
  }

  /** Runs a Redis operation, turning any failure into a StoreUnavailableError naming the store. */
  async #run<T>(operation: () => Promise<T>): Promise<T> {
    const { display } = this.#config.redis;
    if (this.#closing) throw new StoreUnavailableError(`the redis store ${display} is closed`);
    try {
      return await operation();
    } catch (error) {
      if (error instanceof SluiceError) throw error;
      const reason = this.#client.status === 'ready' || !this.#lastError ? error : this.#lastError;
      throw new StoreUnavailableError(`redis store ${display} is unavailable: ${describe(reason)}`, { cause: error });
    }
  }
}

/** Quits politely when connected; otherwise stops reconnecting at once. */
async function quit(connection: Redis | undefined): Promise<void> {
  if (!connection) return;
  if (connection.status !== 'ready') {
    connection.disconnect();
    return;
  }
  try {
    await connection.quit();
  } catch {
    connection.disconnect();
  }
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
