/**
 * The in-memory batch store: the batch store and batch work contracts, and its options refused by name.
 */
import { describe, expect, it } from 'vitest';
import { createMemoryBatchStore } from '../../../gateway/store/index.ts';
import { CONTRACT_BOUNDS, describeBatchStore } from './batch-contract.ts';
import type { BatchStoreUnderTest } from './batch-contract.ts';
import { describeBatchWork } from './batch-work-contract.ts';

const underTest = async (): Promise<BatchStoreUnderTest> => {
  let t = 1_700_000_000_000;
  const store = createMemoryBatchStore({ ...CONTRACT_BOUNDS, now: () => t });
  return {
    store,
    now: () => t,
    elapse: (ms) => void (t += ms),
    bytes: () => store.separateBytes(),
    close: () => store.close(),
  };
};

describeBatchStore('memory batch store', underTest);
describeBatchWork('memory batch store', underTest);

describe('createMemoryBatchStore', () => {
  it.each([
    [{ maxStoredBytes: 0 }, 'maxStoredBytes'],
    [{ maxStoredBytes: Number.POSITIVE_INFINITY }, 'maxStoredBytes'],
    [{ resultTtl: -1 }, 'resultTtl'],
  ])('refuses %j naming %s', (options, name) => {
    expect(() => createMemoryBatchStore(options)).toThrow(
      expect.objectContaining({ code: 'STORE_INVALID_OPTION', message: expect.stringContaining(name) }),
    );
  });

  it('answers STORE_UNAVAILABLE once closed', async () => {
    const store = createMemoryBatchStore();
    await store.close();
    await expect(store.getBatch('batch_a')).rejects.toMatchObject({ code: 'STORE_UNAVAILABLE' });
  });
});
