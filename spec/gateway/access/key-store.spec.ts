import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { createRedisKeyStore } from '../../../gateway/access/key-store.ts';
import type { KeyStore } from '../../../gateway/access/key-store.ts';
import { KeyRing } from '../../../gateway/access/keys.ts';
import { eventually } from '../../support/fleet.ts';
import { startRedis } from '../../support/redis.ts';
import { redisForSuite } from '../../support/redis-suite.ts';
import { closedAfterEach } from '../../support/closed-after-each.ts';

const server = redisForSuite();

const opened = closedAfterEach<KeyStore>();

/** Two gateways' key rings on one Redis; refreshes are slow, so only the channel can tell them in time. */
async function twoGateways() {
  const keyPrefix = `t-${randomUUID()}:`;
  const ring = async () => {
    const store = createRedisKeyStore({ url: server.url, keyPrefix, refreshMs: 600_000 });
    opened.push(store);
    const keys = new KeyRing({ store });
    await keys.start();
    return keys;
  };
  return [await ring(), await ring()] as const;
}

describe('redis key store', () => {
  it('shows a key made on one gateway to the other, and a delete stops it there too', async () => {
    const [a, b] = await twoGateways();
    const created = await a.create({ name: 'shared', limits: { concurrentCalls: 2 } });
    await eventually(() => b.lookup(created.key) !== undefined, 5000, 'the other gateway to see the key');
    expect(b.lookup(created.key)).toEqual({ id: created.record.id, name: 'shared', limits: { concurrentCalls: 2 } });
    expect(b.list()).toEqual([created.record]);
    await b.delete(created.record.id);
    expect(b.lookup(created.key)).toBeUndefined();
    await eventually(() => a.lookup(created.key) === undefined, 5000, 'the first gateway to drop the key');
  });

  it('loads the keys already stored when a gateway starts, and never stores a token', async () => {
    const keyPrefix = `t-${randomUUID()}:`;
    const first = createRedisKeyStore({ url: server.url, keyPrefix });
    opened.push(first);
    const made = await new KeyRing({ store: first }).create({ name: 'early' });
    const stored = JSON.stringify(await first.load());
    expect(stored).not.toContain(made.key);
    const later = createRedisKeyStore({ url: server.url, keyPrefix });
    opened.push(later);
    const keys = new KeyRing({ store: later });
    await keys.start();
    expect(keys.lookup(made.key)?.name).toBe('early');
  });
});

describe('redis key store without Redis', () => {
  it('refuses a new key with STORE_UNAVAILABLE (503), and the key is not made', async () => {
    const gone = await startRedis();
    const store = createRedisKeyStore({ url: gone.url, keyPrefix: `t-${randomUUID()}:` });
    opened.push(store);
    await gone.stop();
    const keys = new KeyRing({ store });
    await expect(keys.create({ name: 'nowhere' })).rejects.toMatchObject({ code: 'STORE_UNAVAILABLE', status: 503 });
    expect(keys.list()).toEqual([]);
  });
});
