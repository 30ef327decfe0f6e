import { describe, expect, it } from 'vitest';
import { storeRedisOf, storeRedisSettings } from '../../../gateway/cli/store-redis.ts';
import { formatHelp, resolveSettings } from '../../../gateway/cli/settings.ts';

const URL = 'redis://gw:s3cret@127.0.0.1:6379/0';

describe('storeRedisOf', () => {
  it('returns undefined for a memory store, and the URL with only the timeouts given for a Redis one', () => {
    expect(storeRedisOf({})).toBeUndefined();
    expect(storeRedisOf({ store: 'memory' })).toBeUndefined();
    expect(storeRedisOf({ store: URL })).toEqual({ url: URL, timeouts: {} });
    expect(storeRedisOf({ store: URL, redisConnectTimeout: 500, redisCommandTimeout: 4_000 })).toEqual({
      url: URL,
      timeouts: { connectTimeout: 500, commandTimeout: 4_000 },
    });
  });

  it('reads the timeouts from their flags, durations in any unit', () => {
    const { values } = resolveSettings(
      [{ key: 'store', type: 'string', description: 'store' }, ...storeRedisSettings],
      ['--store', URL, '--redis-connect-timeout', '750ms', '--redis-command-timeout', '5s'],
      {},
    );
    expect(storeRedisOf(values)?.timeouts).toEqual({ connectTimeout: 750, commandTimeout: 5_000 });
  });

  it("throws naming the flag when a timeout comes without a Redis store, or the command timeout is under a create's wait", () => {
    expect(() => storeRedisOf({ store: 'memory', redisCommandTimeout: 5_000 })).toThrow(
      '--redis-command-timeout applies to a Redis --store, and the store is memory',
    );
    expect(() => storeRedisOf({ redisConnectTimeout: 500 })).toThrow(
      '--redis-connect-timeout applies to a Redis --store, and the store is memory',
    );
    expect(() => storeRedisOf({ store: URL, redisCommandTimeout: 1_000 })).toThrow(
      expect.objectContaining({
        code: 'CLI_INVALID_SETTING',
        message:
          "--redis-command-timeout must be at least 3s, the time a detached call's create waits for its answer, got 1s",
      }),
    );
  });

  it("shows each use's default command timeout in --help", () => {
    const help = formatHelp('sluice gateway', 'the gateway', storeRedisSettings);
    expect(help).toContain('(default per use: 10s detached calls, 5s client keys, 1s limits, 1s deployments;');
    expect(help).toContain('(default 2s; env SLUICE_REDIS_CONNECT_TIMEOUT)');
  });
});
