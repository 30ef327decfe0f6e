/**
 * Where the operator API's client keys live when several gateways share a Redis: a hash of
 * id -> JSON (name, digest, models, limits, createdAt; never a token), and a channel on which a
 * gateway that changed it says so. Every gateway reloads the hash on that message, on each
 * (re)connection, and every `refreshMs` besides, in case a message was missed while it was
 * disconnected: a deleted key stops working everywhere within that time at worst.
 */
import type { Redis } from 'ioredis';
import { checksFor, silentLogger } from '../../placer/kernel/index.ts';
import type { Logger } from '../../placer/kernel/index.ts';
import { GatewayConfigError } from '../errors.ts';
import { StoreUnavailableError, connectRedis, quitRedis, redisUses } from '../store/index.ts';
import type { RedisTimeouts } from '../store/index.ts';
import type { KeyLimits } from './limits.ts';

/** An API key as a store keeps it. */
export interface StoredKey {
  readonly id: string;
  readonly name: string;
  /** Hex SHA-256 of the token. */
  readonly digest: string;
  readonly models?: readonly string[];
  readonly limits: KeyLimits;
  readonly createdAt: number;
}

/** Persistence of the API's keys, shared by every gateway using it. */
export interface KeyStore {
  /** Every stored key. */
  load(): Promise<readonly StoredKey[]>;
  /** Adds a key and tells the other gateways. */
  put(key: StoredKey): Promise<void>;
  /** Removes a key and tells the other gateways. */
  remove(id: string): Promise<void>;
  /**
   * Calls `onChange` with every stored key whenever they may have changed (another gateway's
   * write, a reconnect, a refresh), and `onFailure` when such a read failed.
   */
  watch(onChange: (keys: readonly StoredKey[]) => void, onFailure?: (error: Error) => void): void;
  /** Stops watching and closes connections; idempotent. */
  close(): Promise<void>;
}

/** Options of {@link createRedisKeyStore}; its commandTimeout defaults to redisUses.keys'. */
export interface RedisKeyStoreOptions extends RedisTimeouts {
  url: string;
  /** @default 'sluice:' */
  keyPrefix?: string;
  /** How often the keys are read again whatever the channel said, in ms. @default 5000 */
  refreshMs?: number;
  /** @default silentLogger */
  logger?: Logger;
}

/** Makes a Redis key store; it connects in the background. @throws StoreConfigError for a bad URL or timeout. */
export function createRedisKeyStore(options: RedisKeyStoreOptions): KeyStore {
  return new RedisKeyStore(options);
}

class RedisKeyStore implements KeyStore {
  readonly #client: Redis;
  readonly #hash: string;
  readonly #channel: string;
  readonly #refreshMs: number;
  readonly #logger: Logger;
  /** `redis://host:port/db`, safe to put in messages. */
  readonly #display: string;
  #subscriber: Redis | undefined;
  #timer: NodeJS.Timeout | undefined;
  #closing: Promise<void> | undefined;

  constructor(options: RedisKeyStoreOptions) {
    const prefix = options.keyPrefix ?? 'sluice:';
    this.#hash = `${prefix}client-keys`;
    this.#channel = `${prefix}client-keys-changed`;
    this.#refreshMs = checksFor(GatewayConfigError).ms('refreshMs', options.refreshMs ?? 5_000, 1);
    this.#logger = options.logger ?? silentLogger;
    ({ client: this.#client, display: this.#display } = connectRedis(options.url, redisUses.keys, options));
  }

  async load(): Promise<readonly StoredKey[]> {
    const all = await this.#answer(this.#client.hgetall(this.#hash), 'read the keys');
    const keys: StoredKey[] = [];
    for (const json of Object.values(all)) {
      try {
        keys.push(JSON.parse(json) as StoredKey);
      } catch (error) {
        this.#logger.warn('stored client key unreadable', { error: error as Error });
      }
    }
    return keys;
  }

  async put(key: StoredKey): Promise<void> {
    await this.#answer(this.#client.hset(this.#hash, key.id, JSON.stringify(key)), `keep key ${key.id}`);
    // Other gateways also read the keys every refreshMs: a lost message only delays them.
    await this.#answer(this.#client.publish(this.#channel, 'put'), 'announce the new key');
  }

  async remove(id: string): Promise<void> {
    await this.#answer(this.#client.hdel(this.#hash, id), `delete key ${id}`);
    await this.#answer(this.#client.publish(this.#channel, 'remove'), 'announce the deletion');
  }

  watch(onChange: (keys: readonly StoredKey[]) => void, onFailure?: (error: Error) => void): void {
    const refresh = (): void => {
      this.load().then(onChange, (error: Error) => {
        this.#logger.warn('client keys not refreshed', { error });
        onFailure?.(error);
      });
    };
    const subscriber = this.#client.duplicate();
    subscriber.on('error', () => {});
    subscriber.on('message', refresh);
    // Every (re)connection may have missed messages.
    subscriber.on('ready', refresh);
    subscriber.subscribe(this.#channel).catch(() => {});
    this.#subscriber = subscriber;
    this.#timer = setInterval(refresh, this.#refreshMs);
    this.#timer.unref();
  }

  /** A Redis failure as STORE_UNAVAILABLE (503) naming the store, never its credentials. */
  async #answer<T>(command: Promise<T>, what: string): Promise<T> {
    try {
      return await command;
    } catch (error) {
      throw new StoreUnavailableError(
        `redis key store ${this.#display} could not ${what}: ${(error as Error).message}`,
        { cause: error },
      );
    }
  }

  close(): Promise<void> {
    clearInterval(this.#timer);
    this.#closing ??= Promise.all([this.#client, this.#subscriber].map(quitRedis)).then(() => undefined);
    return this.#closing;
  }
}
