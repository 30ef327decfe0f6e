/**
 * The client keys and limits the gateway's settings ask for: a key ring loaded from --keys and
 * watched (and read again on SIGHUP), its API keys and the limit counters in the --store Redis
 * when there is one, so every gateway on that Redis shares them; and whether client calls need
 * a key, settled here from the settings: --require-keys as given, else yes with --keys.
 */
import type { Clock, Logger } from '../../placer/kernel/index.ts';
import { GatewayConfigError } from '../errors.ts';
import type { Limiter } from '../access/limits.ts';
import type { KeyRing } from '../access/keys.ts';
import type { Setting } from './settings.ts';
import { storeRedisOf } from './store-redis.ts';

/** The settings of client keys, shared by `gateway` and `up`. */
export const keySettings: readonly Setting[] = [
  {
    key: 'keys',
    type: 'string',
    description:
      'keys file: a JSON or YAML list of client keys (name, hash, models, limits); read again when it changes and on SIGHUP (docs/security.md)',
    defaultText: 'none',
  },
];

/**
 * The key ring, limiter and requireKeys for `values`: with --keys, a ring loaded from the file
 * (a bad file throws GW_INVALID_KEYS_FILE) and watched; with a Redis --store, API keys and
 * counters in that Redis. Nothing when neither is set: the gateway makes its own ring and
 * in-memory limiter.
 * @throws GatewayConfigError when a Redis store already holds keys and neither --keys nor
 * --require-keys says whether they are required: starting open would silently drop them.
 */
export async function clientKeysOptions(
  values: Record<string, unknown>,
  logger: Logger,
  clock: Clock,
): Promise<{ clientKeys?: KeyRing; limiter?: Limiter; requireKeys?: boolean }> {
  const file = values.keys as string | undefined;
  const redis = storeRedisOf(values);
  if (file === undefined && redis === undefined) return {};
  const [{ KeyRing }, { watchKeysFile }, { createRedisKeyStore }, { createRedisLimiter }] = await Promise.all([
    import('../access/keys.ts'),
    import('../access/keys-file.ts'),
    import('../access/key-store.ts'),
    import('../access/limits-redis.ts'),
  ]);
  const ring = new KeyRing({
    clock,
    logger,
    ...(redis ? { store: createRedisKeyStore({ url: redis.url, ...redis.timeouts, logger }) } : {}),
  });
  const given = values.requireKeys as boolean | undefined;
  const requireKeys = given ?? file !== undefined;
  if (redis)
    await ring
      .start()
      .catch((error: Error) =>
        logger.warn('client keys not loaded from the store; loading them when it answers', { error }),
      );
  if (redis && given === undefined && !requireKeys && ring.size > 0) {
    await ring.close();
    throw new GatewayConfigError(
      `the --store Redis holds ${ring.size} client key(s) made through /v1/keys, but the gateway would start open to clients: give --require-keys to require keys, or --require-keys false to start open on purpose`,
    );
  }
  if (file !== undefined) {
    const watch = await watchKeysFile(file, ring, { logger });
    // The CLI's own signal: an operator who edited the file in place on a filesystem that does
    // not report changes (some network mounts) reloads it by hand.
    process.on('SIGHUP', () => void watch.reload());
  }
  const windowMs = values.keyLimitWindow as number | undefined;
  return {
    clientKeys: ring,
    requireKeys,
    ...(redis
      ? {
          limiter: createRedisLimiter({
            url: redis.url,
            ...redis.timeouts,
            clock,
            ...(windowMs === undefined ? {} : { windowMs }),
          }),
        }
      : {}),
  };
}
