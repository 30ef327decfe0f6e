/**
 * The Redis batch store against a real redis-server: the batch store and batch work contracts, files counted in
 * the call store's own byte count (so detached results and files share maxStoredBytes), and
 * files and batches read by a second store on the same Redis.
 */
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { createRedisBatchStore } from '../../../gateway/store/index.ts';
import { redisForSuite } from '../../support/redis-suite.ts';
import { CONTRACT_BOUNDS, describeBatchStore } from './batch-contract.ts';
import type { BatchStoreUnderTest } from './batch-contract.ts';
import { describeBatchWork } from './batch-work-contract.ts';

const server = redisForSuite();

const underTest = async (): Promise<BatchStoreUnderTest> => {
  let t = Date.now();
  const keyPrefix = `t-${randomUUID()}:`;
  const store = createRedisBatchStore({ url: server.url, keyPrefix, ...CONTRACT_BOUNDS, now: () => t });
  // The call store's own byte counter, read as it is: the files are counted in it.
  const plain = new Redis(server.url);
  return {
    store,
    now: () => t,
    elapse: (ms) => void (t += ms),
    bytes: async () => Number((await plain.get(`${keyPrefix}stored-bytes`)) ?? 0),
    close: async () => {
      plain.disconnect();
      await store.close();
    },
  };
};

describeBatchStore('redis batch store', underTest);
describeBatchWork('redis batch store', underTest);

describe('createRedisBatchStore', () => {
  it('shares files and batches with every store on the same Redis and prefix', async () => {
    const options = { url: server.url, keyPrefix: `t-${randomUUID()}:` };
    const [one, two] = [createRedisBatchStore(options), createRedisBatchStore(options)];
    try {
      const now = Date.now();
      const file = {
        id: 'file-x',
        client: 'k1',
        filename: 'x.jsonl',
        purpose: 'batch' as const,
        bytes: 3,
        createdAt: now,
        expiresAt: now + 60_000,
      };
      await one.putFile(file, Buffer.from('{}\n'));
      expect(await two.getFile('file-x')).toEqual(file);
      expect((await two.fileContent('file-x'))?.toString()).toBe('{}\n');
      expect((await two.listFiles({ kind: 'client', client: 'k1' }, undefined, 10)).data.map((f) => f.id)).toEqual([
        'file-x',
      ]);
      expect(await two.deleteFile('file-x')).toBe(true);
      expect(await one.getFile('file-x')).toBeUndefined();
    } finally {
      await Promise.all([one.close(), two.close()]);
    }
  });

  it('answers STORE_UNAVAILABLE once closed', async () => {
    const store = createRedisBatchStore({ url: server.url });
    await store.close();
    await expect(store.getBatch('batch_a')).rejects.toMatchObject({ code: 'STORE_UNAVAILABLE' });
  });
});
