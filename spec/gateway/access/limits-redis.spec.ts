import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { createRedisLimiter } from '../../../gateway/access/limits-redis.ts';
import type { Limiter } from '../../../gateway/access/limits.ts';
import { startRedis } from '../../support/redis.ts';
import { redisForSuite } from '../../support/redis-suite.ts';
import { closedAfterEach } from '../../support/closed-after-each.ts';
import { WINDOW, describeLimiter, fakeClock } from './limits-contract.ts';

const server = redisForSuite();

const opened = closedAfterEach<Limiter>();

// Each fixture gets its own prefix; a peer shares it (and the clock), as a second gateway would.
describeLimiter(
  'redis limiter',
  async (options) => {
    const { clock, elapse } = fakeClock();
    const keyPrefix = `t-${randomUUID()}:`;
    const make = () => {
      const limiter = createRedisLimiter({ ...options, clock, keyPrefix, url: server.url });
      opened.push(limiter);
      return limiter;
    };
    return { limiter: make(), elapse, peer: make };
  },
  true,
);

describe('createRedisLimiter', () => {
  it('lets a lease lapse after leaseMs, so a gateway that died frees its calls', async () => {
    const { clock, elapse } = fakeClock();
    const limiter = createRedisLimiter({
      url: server.url,
      keyPrefix: `t-${randomUUID()}:`,
      clock,
      windowMs: WINDOW,
      leaseMs: 5_000,
    });
    opened.push(limiter);
    expect((await limiter.admitCall('k', { concurrentCalls: 1 }, 'a')).kind).toBe('admitted');
    elapse(4_999);
    expect((await limiter.admitCall('k', { concurrentCalls: 1 }, 'b')).kind).toBe('refused');
    elapse(1);
    expect((await limiter.admitCall('k', { concurrentCalls: 1 }, 'c')).kind).toBe('admitted');
  });

  it('rejects a step when Redis cannot be reached', async () => {
    const stopped = await startRedis();
    const limiter = createRedisLimiter({ url: stopped.url });
    opened.push(limiter);
    await stopped.stop();
    await expect(limiter.admitCall('k', { requestsPerMinute: 1 }, 'a')).rejects.toThrow();
  });
});
