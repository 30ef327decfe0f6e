/** A redis-server for the tests of one describe block (or file), as fleetForSuite is for a fleet. */
import { fieldsWhenStarted, startedForSuite } from './fleet.ts';
import { startRedis } from './redis.ts';
import type { RedisServer } from './redis.ts';

/**
 * Starts a redis-server before the tests of the enclosing describe (or file) and stops it after
 * them. The handle's fields throw when read before the server started.
 */
export function redisForSuite(): RedisServer {
  const started = startedForSuite(
    'redis-server',
    () => startRedis(),
    (server) => server.stop(),
  );
  return fieldsWhenStarted(started, ['url', 'port', 'pid', 'stop']);
}
