/**
 * The reconciler's lease (gateway/control/lease.ts): the memory lease always held, and the Redis
 * lease held by exactly one of the gateways on a real redis-server, handed over on release and
 * on expiry, and read as not held (never thrown) when Redis is gone.
 */
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { MemoryLease, RedisLease, leaseDefaults } from '../../../gateway/control/lease.ts';
import type { LogFields } from '../../../placer/kernel/index.ts';
import { eventually } from '../../support/fleet.ts';
import { warningRecorder } from '../../support/logger.ts';
import { startRedis } from '../../support/redis.ts';
import { redisForSuite } from '../../support/redis-suite.ts';
import { closedAfterEach } from '../../support/closed-after-each.ts';

const server = redisForSuite();

const opened = closedAfterEach();

/** Two gateways' leases on one Redis, under a prefix of their own, and the lease's key. */
function twoLeases(ttl: number): [RedisLease, RedisLease, string] {
  const keyPrefix = `t-${randomUUID()}:`;
  const a = new RedisLease({ url: server.url, keyPrefix, gatewayId: 'gw-a', ttl });
  const b = new RedisLease({ url: server.url, keyPrefix, gatewayId: 'gw-b', ttl });
  opened.push(a, b);
  return [a, b, `${keyPrefix}deploy:lease`];
}

describe('MemoryLease', () => {
  it('is always held, released or not', async () => {
    const lease = new MemoryLease();
    expect(lease.ttl).toBe(leaseDefaults.ttl);
    expect(await lease.hold()).toBe(true);
    await lease.release();
    expect(await lease.hold()).toBe(true);
  });
});

describe('RedisLease', () => {
  it('is held by exactly one of two gateways, and renewing keeps it', async () => {
    const [a, b] = twoLeases(60_000);
    expect(await a.hold()).toBe(true);
    expect(await b.hold()).toBe(false);
    expect(await a.hold()).toBe(true);
    expect(await b.hold()).toBe(false);
    expect(await b.holder()).toBe(a.holderId);
    expect(a.holderId).toMatch(/^gw-a:[0-9a-f]{12}$/);
  });

  it('gives exactly one of two gateways asking at once the lease', async () => {
    const [a, b] = twoLeases(60_000);
    const held = await Promise.all([a.hold(), b.hold(), a.hold(), b.hold()]);
    expect(held.filter(Boolean)).toHaveLength(2);
    expect(held[0]).toBe(held[2]);
    expect(held[1]).toBe(held[3]);
    expect(held[0]).not.toBe(held[1]);
  });

  it('goes to the other gateway at its next hold() once the holder releases it', async () => {
    const [a, b] = twoLeases(60_000);
    expect(await a.hold()).toBe(true);
    await a.release();
    expect(await b.holder()).toBeUndefined();
    expect(await b.hold()).toBe(true);
    expect(await a.hold()).toBe(false);
  });

  it('goes to the other gateway after ttl when the holder stops renewing', async () => {
    const ttl = 300;
    const [a, b] = twoLeases(ttl);
    expect(await a.hold()).toBe(true);
    const stopped = Date.now();
    expect(await b.hold()).toBe(false);
    await eventually(() => b.hold(), 5_000, 'the other gateway to take the lapsed lease');
    expect(Date.now() - stopped).toBeGreaterThanOrEqual(ttl - 50);
    expect(await a.hold()).toBe(false);
  });

  it('is not extended by a renewal or a release from a gateway that does not hold it', async () => {
    const [a, b, key] = twoLeases(60_000);
    expect(await a.hold()).toBe(true);
    const client = new Redis(server.url);
    opened.push({ close: () => client.quit() });
    expect(await client.get(key)).toBe(a.holderId);
    await client.pexpire(key, 400);
    // b renews (it asks to hold) and releases: neither touches a's key or its expiry.
    expect(await b.hold()).toBe(false);
    await b.release();
    expect(await client.get(key)).toBe(a.holderId);
    expect(await client.pttl(key)).toBeLessThanOrEqual(400);
    await eventually(async () => (await client.exists(key)) === 0, 5_000, 'the unrenewed lease to lapse');
  });

  it('reads false, never throws, when Redis is killed, warns once, and is taken again when it is back', async () => {
    const own = await startRedis();
    try {
      const warnings: LogFields[] = [];
      const keyPrefix = `t-${randomUUID()}:`;
      const a = new RedisLease({
        url: own.url,
        keyPrefix,
        gatewayId: 'gw-a',
        ttl: 60_000,
        logger: warningRecorder(warnings),
      });
      opened.push(a);
      expect(await a.hold()).toBe(true);
      process.kill(own.pid, 'SIGKILL');
      await eventually(async () => !(await a.hold()), 5_000, 'the lease to read not held');
      expect(await a.hold()).toBe(false);
      expect(await a.hold()).toBe(false);
      expect(warnings.map((w) => w.msg)).toEqual(['reconciler lease unreachable, not reconciling']);
      expect(JSON.stringify(warnings)).toContain(`127.0.0.1:${own.port}`);
      await a.release();
      await own.stop();
      const again = await startRedis({ port: own.port });
      try {
        await eventually(() => a.hold(), 10_000, 'the lease to be taken again on the new Redis');
      } finally {
        await a.close();
        await again.stop();
      }
    } finally {
      await own.stop();
    }
  });

  it('reads false within ttl when Redis stalls, even on a shared client without a command timeout', async () => {
    const own = await startRedis();
    const client = new Redis(own.url);
    client.on('error', () => {});
    try {
      const warnings: LogFields[] = [];
      const a = new RedisLease({
        client,
        keyPrefix: `t-${randomUUID()}:`,
        gatewayId: 'gw-a',
        ttl: 300,
        logger: warningRecorder(warnings),
      });
      expect(await a.hold()).toBe(true);
      process.kill(own.pid, 'SIGSTOP');
      expect(await a.hold()).toBe(false);
      expect(warnings.map((w) => w.msg)).toEqual(['reconciler lease unreachable, not reconciling']);
      process.kill(own.pid, 'SIGCONT');
    } finally {
      client.disconnect();
      await own.stop();
    }
  });

  it('shares a client it was given and leaves it open at close', async () => {
    const client = new Redis(server.url, { maxRetriesPerRequest: 0 });
    try {
      const keyPrefix = `t-${randomUUID()}:`;
      const a = new RedisLease({ client, keyPrefix, gatewayId: 'gw-a' });
      const b = new RedisLease({ client, keyPrefix, gatewayId: 'gw-b' });
      expect(await a.hold()).toBe(true);
      expect(await b.hold()).toBe(false);
      await a.close();
      expect(await b.hold()).toBe(true);
      expect(await client.ping()).toBe('PONG');
      await b.close();
    } finally {
      await client.quit();
    }
  });

  it('refuses bad options with a message naming the option and the value', () => {
    expect(() => new RedisLease({ url: server.url, gatewayId: 'gw a' })).toThrow(
      /gatewayId must be 1-128 letters.*"gw a"/,
    );
    expect(() => new RedisLease({ url: server.url, gatewayId: 'gw', ttl: 0 })).toThrow(/ttl/);
    expect(() => new RedisLease({ gatewayId: 'gw' })).toThrow(/exactly one of url .* and client .*, got neither/);
    expect(() => new RedisLease({ url: 'http://x', gatewayId: 'gw' })).toThrow(
      expect.objectContaining({ code: 'STORE_INVALID_OPTION' }),
    );
    expect(() => new MemoryLease({ ttl: -1 })).toThrow(expect.objectContaining({ code: 'GW_INVALID_OPTION' }));
  });
});
