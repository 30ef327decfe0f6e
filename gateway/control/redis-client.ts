/**
 * The Redis connection the deployment pieces share (lease.ts, redis-store.ts, boards.ts): made
 * from a URL by the gateway's one Redis connection factory (gateway/store/redis-connection.ts,
 * as its `control` use), or an ioredis client the gateway already has, so one connection serves them
 * all. A client given is the giver's: close() leaves it open.
 */
import { Redis } from 'ioredis';
import { show } from '../../placer/kernel/index.ts';
import type { LogFields, Logger } from '../../placer/kernel/index.ts';
import { GatewayConfigError } from '../errors.ts';
import { connectRedis, quitRedis, redisUses } from '../store/index.ts';
import type { RedisTimeouts } from '../store/index.ts';

/**
 * Where a deployment piece finds Redis: a URL, or a client to share. Exactly one. The timeouts
 * are those of a connection made from the URL (commandTimeout defaults to redisUses.control's);
 * a client given keeps its own.
 */
export interface RedisConnectionOptions extends RedisTimeouts {
  /** `redis://[user:password@]host:port[/db]`, as `--store`'s. */
  url?: string;
  /** An ioredis client to use instead of a connection of its own; left open by close(). */
  client?: Redis;
  /** Prefix of every key. @default 'sluice:' */
  keyPrefix?: string;
}

/** An open connection, and whether this piece made it (and so closes it). */
export interface RedisConnection {
  readonly client: Redis;
  readonly owned: boolean;
  /** `redis://host:port/db`, safe to put in messages and logs. */
  readonly display: string;
  readonly prefix: string;
}

/**
 * Opens (or adopts) the connection `options` names.
 * @throws GatewayConfigError when both or neither of url and client are given, timeouts come
 *   with a client, or keyPrefix is not a string; StoreConfigError for a bad URL or timeout.
 */
export function openRedis(options: RedisConnectionOptions, what: string): RedisConnection {
  const { url, client, keyPrefix = 'sluice:', connectTimeout, commandTimeout } = options;
  if (typeof keyPrefix !== 'string')
    throw new GatewayConfigError(`${what}: keyPrefix must be a string, got ${show(keyPrefix)}`);
  if ((url === undefined) === (client === undefined)) {
    throw new GatewayConfigError(
      `${what}: give exactly one of url (redis://host:port[/db]) and client (an ioredis client), got ${url === undefined ? 'neither' : 'both'}`,
    );
  }
  if (client !== undefined) {
    if (connectTimeout !== undefined || commandTimeout !== undefined) {
      throw new GatewayConfigError(
        `${what}: connectTimeout and commandTimeout are those of a connection made from url; a client given keeps its own`,
      );
    }
    if (!(client instanceof Redis))
      throw new GatewayConfigError(`${what}: client must be an ioredis Redis client, got ${show(client)}`);
    const { host, port, db } = client.options;
    return Object.freeze({
      client,
      owned: false,
      display: `redis://${host ?? 'localhost'}:${port ?? 6379}/${db ?? 0}`,
      prefix: keyPrefix,
    });
  }
  // A command waits for the first connection, and for a reconnect under way until its attempt
  // fails; one unanswered when the connection dropped is not sent again later.
  const made = connectRedis(url!, redisUses.control, { connectTimeout, commandTimeout });
  return Object.freeze({ client: made.client, owned: true, display: made.display, prefix: keyPrefix });
}

/** Closes a connection this piece made; a shared one is left to its owner. Idempotent through the caller's memo. */
export async function closeRedis(connection: RedisConnection): Promise<void> {
  if (connection.owned) await quitRedis(connection.client);
}

/**
 * Warns once per outage: the first failure logs `warn` with the error, the failures after it
 * nothing, and the first success after them `info`, so a Redis down for an hour is two lines,
 * not one per pass.
 */
export class OutageLog {
  readonly #logger: Logger;
  readonly #lost: string;
  readonly #back: string;
  readonly #fields: LogFields;
  #down = false;

  /** `lost` is the warning's message, `back` the recovery's; `fields` go on both (never a secret). */
  constructor(logger: Logger, lost: string, back: string, fields: LogFields) {
    this.#logger = logger;
    this.#lost = lost;
    this.#back = back;
    this.#fields = fields;
  }

  /** True while the last command failed. */
  get down(): boolean {
    return this.#down;
  }

  /** Notes a failed command: warns when it is the first since the last success. */
  failed(error: unknown): void {
    if (this.#down) return;
    this.#down = true;
    this.#logger.warn(this.#lost, { ...this.#fields, error: error as Error });
  }

  /** Notes a command that went through: logs the recovery after an outage. */
  succeeded(): void {
    if (!this.#down) return;
    this.#down = false;
    this.#logger.info(this.#back, this.#fields);
  }
}
