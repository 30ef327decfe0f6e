/**
 * The one way the gateway opens a Redis connection. Every Redis user of the gateway (the
 * detached-call store, the client keys and their limits, and the control plane's deployments,
 * lease and boards) connects here, so all of them follow one declared policy:
 *
 * - Connecting gives up after `connectTimeout` (2 s by default): a black-holed host must not
 *   stall a caller for the OS's minutes-long TCP timeout.
 * - A lost connection is made again forever, 100 ms after the first failed attempt, then 100 ms
 *   more each time, at most a second apart: Redis coming back is noticed within a second.
 * - A command unanswered after `commandTimeout` fails, so a Redis that accepts but never
 *   answers (stopped, swapping) fails commands instead of hanging them. The default is each
 *   use's ({@link redisUses}): they differ in what a command is worth waiting for.
 * - A command is sent at most once. One unanswered when the connection drops fails then, and
 *   is never sent again after the reconnect (maxRetriesPerRequest 0, no resending of unfulfilled
 *   commands): it may have run, and a write repeated blindly could count a call twice or land
 *   after its caller gave up.
 * - A command issued while there is no connection is, per use: failed at once (`fail`: the
 *   store, whose writes must never land after their caller answered, and which waits for a
 *   connection being made itself), or queued (`queue`) until the connection is made (sent then)
 *   or the next attempt fails (failed then, within a reconnect delay and the connect timeout). A
 *   queued command is still sent when the connection comes back after its own timeout fired, so
 *   `queue` is for uses whose late commands are reads, idempotent writes, or counts that lapse
 *   by themselves.
 * - No connection error is thrown at an event listener (that would end the process): each
 *   command's caller gets the failure. What reaches messages and logs names the Redis by
 *   `display` (`redis://host:port/db`), never by its URL, which may carry a password.
 *
 * It lives beside the store because the store may import nothing else of the gateway, while the
 * other users already take the store's URL parser and STORE_UNAVAILABLE from here.
 */
import { Redis } from 'ioredis';
import type { RedisOptions } from 'ioredis';
import { checksFor, redactUrl, show } from '../../placer/kernel/index.ts';
import { StoreConfigError } from './errors.ts';

/** Where a Redis is, from its URL. */
export interface RedisAddress {
  readonly host: string;
  readonly port: number;
  readonly db: number;
  readonly username?: string;
  readonly password?: string;
  /** `redis://host:port/db`, safe to log and to put in error messages. */
  readonly display: string;
}

/** The timeouts of a Redis connection; every Redis user's options take them. */
export interface RedisTimeouts {
  /** How long opening a connection to Redis may take, in ms. @default see redisDefaults */
  connectTimeout?: number;
  /** How long a command may go unanswered before it fails, in ms. @default the use's, see redisUses */
  commandTimeout?: number;
}

/** The policy's fixed figures and the default connect timeout, frozen. */
export const redisDefaults = Object.freeze({
  connectTimeout: 2_000,
  /** The wait before reconnect attempt n is n times this, up to maxReconnectDelay, in ms. */
  reconnectStep: 100,
  maxReconnectDelay: 1_000,
});

/** How one user's connection differs from the others'. */
export interface RedisUse {
  /** Its default command timeout, in ms. */
  readonly commandTimeout: number;
  /** What a command issued without a connection does (see the module's comment). */
  readonly whileDisconnected: 'fail' | 'queue';
  /** `auto`: commands issued in one tick go out in one write (ioredis's auto-pipelining). */
  readonly pipelining: 'auto' | 'off';
}

/** Every use of Redis in the gateway and how it differs, in one table. */
export const redisUses = Object.freeze({
  /**
   * The detached-call store: a finished call's result (up to maxResultBytes) is worth ten
   * seconds of a slow Redis; a create or start has a tighter bound of its own (redis.ts).
   */
  store: use({ commandTimeout: 10_000, whileDisconnected: 'fail', pipelining: 'off' }),
  /**
   * The client keys' limits, asked on every call's way in: a stalled Redis must fail a step
   * quickly, and steps of many calls in one tick share a write.
   */
  limiter: use({ commandTimeout: 1_000, whileDisconnected: 'queue', pipelining: 'auto' }),
  /** The client keys made through /v1/keys: read in the background, written by an operator. */
  keys: use({ commandTimeout: 5_000, whileDisconnected: 'queue', pipelining: 'off' }),
  /**
   * The control plane's deployments, lease and boards: a lease renewal that hangs is worth less
   * than a pass that goes on reading "not held".
   */
  control: use({ commandTimeout: 1_000, whileDisconnected: 'queue', pipelining: 'off' }),
});

/** An open connection and how to name it. */
export interface RedisConnection {
  readonly client: Redis;
  /** `redis://host:port/db`, safe to put in messages and logs. */
  readonly display: string;
}

/**
 * Opens a connection to the Redis at `target` (a URL or a parsed address) for `use`, under the
 * policy above; it connects in the background.
 * @throws StoreConfigError for a bad URL (quoted without its password) or timeout.
 */
export function connectRedis(
  target: string | RedisAddress,
  use: RedisUse,
  timeouts: RedisTimeouts = {},
): RedisConnection {
  const { host, port, db, username, password, display } = typeof target === 'string' ? parseRedisUrl(target) : target;
  const { connectTimeout, commandTimeout } = resolveRedisTimeouts(timeouts, use);
  const options: RedisOptions = {
    host,
    port,
    db,
    ...(username === undefined ? {} : { username }),
    ...(password === undefined ? {} : { password }),
    connectTimeout,
    commandTimeout,
    enableOfflineQueue: use.whileDisconnected === 'queue',
    autoResendUnfulfilledCommands: false,
    maxRetriesPerRequest: 0,
    enableAutoPipelining: use.pipelining === 'auto',
    retryStrategy: reconnectDelay,
  };
  const client = new Redis(options);
  // Failures reach each command's caller; the event would otherwise end the process.
  client.on('error', () => {});
  return Object.freeze({ client, display });
}

/**
 * The timeouts `timeouts` gives, with `use`'s defaults for those it leaves out.
 * @throws StoreConfigError naming the bad timeout.
 */
export function resolveRedisTimeouts(timeouts: RedisTimeouts, use: RedisUse): Required<RedisTimeouts> {
  const { connectTimeout = redisDefaults.connectTimeout, commandTimeout = use.commandTimeout } = timeouts;
  return Object.freeze({
    connectTimeout: check.ms('connectTimeout', connectTimeout, 1),
    commandTimeout: check.ms('commandTimeout', commandTimeout, 1),
  });
}

/**
 * Parses `redis://[user:password@]host:port[/db]`.
 * @throws StoreConfigError quoting the URL with its password masked.
 */
export function parseRedisUrl(url: unknown): RedisAddress {
  const bad = () =>
    check.fail(`store must be redis://host:port[/db], got ${show(typeof url === 'string' ? redactUrl(url) : url)}`);
  if (typeof url !== 'string') throw bad();
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw bad();
  }
  const dbText = parsed.pathname.replace(/^\//, '');
  const db = dbText === '' ? 0 : Number(dbText);
  if (
    parsed.protocol !== 'redis:' ||
    parsed.hostname === '' ||
    parsed.port === '' ||
    parsed.search !== '' ||
    parsed.hash !== ''
  )
    throw bad();
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

/** Quits politely when connected; otherwise stops reconnecting at once. Never rejects. */
export async function quitRedis(connection: Redis | undefined): Promise<void> {
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

/** The wait before reconnect attempt `attempt` (1, 2, ...), in ms. */
function reconnectDelay(attempt: number): number {
  return Math.min(attempt * redisDefaults.reconnectStep, redisDefaults.maxReconnectDelay);
}

function use(declared: RedisUse): RedisUse {
  return Object.freeze(declared);
}

const check = checksFor(StoreConfigError);

/** A Lua script a client runs as a command of its own name (ioredis sends EVALSHA and falls back to EVAL). */
export interface RedisScript {
  /** The command's name on the client. */
  readonly name: string;
  /** How many of the command's first arguments are keys (the script's KEYS). */
  readonly numberOfKeys: number;
  /** The script's text. */
  readonly lua: string;
}

/** The script `lua`, run as command `name`, whose first `numberOfKeys` arguments are keys. */
export function redisScript(name: string, numberOfKeys: number, lua: string): RedisScript {
  return Object.freeze({ name, numberOfKeys, lua });
}

/** Defines each of `scripts` on `client` as its command, and returns the client typed with them (`T`). */
export function defineScripts<T>(client: Redis, scripts: readonly RedisScript[]): Redis & T {
  for (const { name, numberOfKeys, lua } of scripts) client.defineCommand(name, { numberOfKeys, lua });
  return client as Redis & T;
}
