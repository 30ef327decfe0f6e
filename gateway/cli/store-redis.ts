/**
 * The `--store` Redis as the command line gives it to every Redis user of the gateway (the
 * detached-call store, the client keys and their limits, the deployments, lease and boards):
 * its URL, and the timeouts of each connection made to it.
 */
import { CREATE_TIMEOUT_MS, redisDefaults, redisUses } from '../store/index.ts';
import type { RedisTimeouts } from '../store/index.ts';
import type { Setting } from './settings.ts';
import { SettingsError, flagOf, formatDuration } from './settings.ts';

/** Each use's default command timeout, as --help shows it. */
const perUse = [
  `${formatDuration(redisUses.store.commandTimeout)} detached calls`,
  `${formatDuration(redisUses.keys.commandTimeout)} client keys`,
  `${formatDuration(redisUses.limiter.commandTimeout)} limits`,
  `${formatDuration(redisUses.control.commandTimeout)} deployments`,
].join(', ');

/** The timeouts of the --store Redis's connections, shared by `gateway` and `up`. */
export const storeRedisSettings: readonly Setting[] = [
  {
    key: 'redisConnectTimeout',
    type: 'duration',
    libraryDefault: redisDefaults.connectTimeout,
    description: 'with a Redis --store: how long making a connection to it may take, for every use of it',
  },
  {
    key: 'redisCommandTimeout',
    type: 'duration',
    description: `with a Redis --store: how long a command to it may go unanswered before it fails, for every use of it; at least ${formatDuration(CREATE_TIMEOUT_MS)}, the time a detached call's create waits`,
    defaultText: `per use: ${perUse}`,
  },
];

/** Where the --store Redis is and the timeouts its users get. */
export interface StoreRedis {
  /** `redis://[user:password@]host:port[/db]`: never logged as it is. */
  readonly url: string;
  /** Only those given: each use applies its own default to the others. */
  readonly timeouts: RedisTimeouts;
}

/**
 * The --store Redis of `values`, or undefined when the store is not Redis.
 * @throws SettingsError naming the flag: a timeout given without a Redis --store, or a command
 *   timeout shorter than a detached call's create waits (the store would refuse it less plainly).
 */
export function storeRedisOf(values: Record<string, unknown>): StoreRedis | undefined {
  const {
    store,
    redisConnectTimeout: connectTimeout,
    redisCommandTimeout: commandTimeout,
  } = values as { store?: unknown; redisConnectTimeout?: number; redisCommandTimeout?: number };
  if (typeof store !== 'string' || !store.startsWith('redis://')) {
    const given = storeRedisSettings.map((s) => s.key).find((key) => values[key] !== undefined);
    if (given !== undefined)
      throw new SettingsError(
        `${flagOf(given)} applies to a Redis --store, and the store is ${String(store ?? 'memory')}`,
      );
    return undefined;
  }
  if (commandTimeout !== undefined && commandTimeout < CREATE_TIMEOUT_MS) {
    throw new SettingsError(
      `${flagOf('redisCommandTimeout')} must be at least ${formatDuration(CREATE_TIMEOUT_MS)}, the time a detached call's create waits for its answer, got ${formatDuration(commandTimeout)}`,
    );
  }
  const timeouts: RedisTimeouts = {
    ...(connectTimeout === undefined ? {} : { connectTimeout }),
    ...(commandTimeout === undefined ? {} : { commandTimeout }),
  };
  return Object.freeze({ url: store, timeouts: Object.freeze(timeouts) });
}
