/**
 * The batch store contract: what every BatchStore does, run against each implementation with a
 * clock the suite moves (files and final batches leave by time, never to make room).
 */
import { describe, expect, it } from 'vitest';
import type { BatchRecord, BatchStore, FileRecord } from '../../../gateway/store/index.ts';
import { newBatchRecord } from '../../support/batch-record.ts';

/** A store under test on a clock the suite moves, with its byte bound and result TTL. */
export interface BatchStoreUnderTest {
  store: BatchStore;
  now(): number;
  elapse(ms: number): void;
  /** The bytes the store's files hold against its bound, however it counts them. */
  bytes(): Promise<number>;
  close(): Promise<void>;
}

/** Bound and TTL every store under test is made with. */
export const CONTRACT_BOUNDS = { maxStoredBytes: 2000, resultTtl: 60_000 };

const FILE_TTL = 10_000;

export function describeBatchStore(name: string, make: () => Promise<BatchStoreUnderTest>): void {
  describe(`${name} (batch store contract)`, () => {
    const file = (t: BatchStoreUnderTest, id: string, bytes: number, client?: string): FileRecord => ({
      id,
      ...(client ? { client } : {}),
      filename: `${id}.jsonl`,
      purpose: 'batch',
      bytes,
      createdAt: t.now(),
      expiresAt: t.now() + FILE_TTL,
    });
    const batch = (t: BatchStoreUnderTest, id: string, client?: string): BatchRecord =>
      newBatchRecord(t.now(), { id, inputFileId: 'file-1', ...(client ? { client } : {}) });

    it('keeps a file and its content until its expiresAt, counting its bytes until then', async () => {
      const t = await make();
      await t.store.putFile(file(t, 'file-a', 10), Buffer.alloc(10, 1));
      expect(await t.store.getFile('file-a')).toMatchObject({ id: 'file-a', bytes: 10, purpose: 'batch' });
      expect(await t.store.fileContent('file-a')).toEqual(Buffer.alloc(10, 1));
      expect(await t.bytes()).toBe(10);
      t.elapse(FILE_TTL);
      expect(await t.store.getFile('file-a')).toBeUndefined();
      expect(await t.store.fileContent('file-a')).toBeUndefined();
      expect(await t.bytes()).toBe(0);
      await t.close();
    });

    it('refuses a file past the byte bound with STORE_FULL, writing nothing, and takes it once one is deleted', async () => {
      const t = await make();
      await t.store.putFile(file(t, 'file-a', 1200), Buffer.alloc(1200));
      const refused = await t.store.putFile(file(t, 'file-b', 1200), Buffer.alloc(1200)).catch((e: unknown) => e);
      expect((refused as { code?: string }).code).toBe('STORE_FULL');
      expect(await t.store.getFile('file-b')).toBeUndefined();
      expect(await t.store.deleteFile('file-a')).toBe(true);
      expect(await t.store.deleteFile('file-a')).toBe(false);
      await t.store.putFile(file(t, 'file-b', 1200), Buffer.alloc(1200));
      expect(await t.bytes()).toBe(1200);
      await t.close();
    });

    it("lists one owner's files and batches newest first, paged by after and limit, and everyone's for all", async () => {
      const t = await make();
      for (const [id, client] of [
        ['file-1', 'k1'],
        ['file-2', 'k2'],
        ['file-3', 'k1'],
        ['file-4', 'k1'],
      ] as const) {
        await t.store.putFile(file(t, id, 1, client), Buffer.alloc(1));
        await t.store.putBatch(batch(t, id.replace('file-', 'batch_'), client));
        t.elapse(1);
      }
      const mine = { kind: 'client', client: 'k1' } as const;
      const first = await t.store.listFiles(mine, undefined, 2);
      expect([first.data.map((f) => f.id), first.hasMore]).toEqual([['file-4', 'file-3'], true]);
      const next = await t.store.listFiles(mine, 'file-3', 2);
      expect([next.data.map((f) => f.id), next.hasMore]).toEqual([['file-1'], false]);
      const all = await t.store.listBatches({ kind: 'all' }, undefined, 10);
      expect(all.data.map((b) => b.id)).toEqual(['batch_4', 'batch_3', 'batch_2', 'batch_1']);
      const anonymous = await t.store.listBatches({ kind: 'client', client: undefined }, undefined, 10);
      expect(anonymous.data).toEqual([]);
      await t.close();
    });

    it('updates a batch until it is final, then refuses, and forgets it a result TTL after it ended', async () => {
      const t = await make();
      await t.store.putBatch(batch(t, 'batch_a'));
      const running = await t.store.updateBatch('batch_a', {
        status: 'in_progress',
        requestCounts: { total: 2, completed: 0, failed: 0 },
      });
      expect(running).toMatchObject({ status: 'in_progress', requestCounts: { total: 2, completed: 0, failed: 0 } });
      // While it runs, its counts are the results written.
      await t.store.putLineResult('batch_a', 'x', { outcome: 'completed', line: '{}' });
      expect((await t.store.getBatch('batch_a'))!.requestCounts).toEqual({ total: 2, completed: 1, failed: 0 });
      await t.store.updateBatch('batch_a', {
        status: 'completed',
        completedAt: t.now(),
        requestCounts: { total: 2, completed: 1, failed: 1 },
      });
      expect((await t.store.getBatch('batch_a'))!.requestCounts).toEqual({ total: 2, completed: 1, failed: 1 });
      expect(await t.store.updateBatch('batch_a', { status: 'cancelled' })).toBeUndefined();
      expect((await t.store.getBatch('batch_a'))!.status).toBe('completed');
      expect(await t.store.updateBatch('batch_none', { status: 'failed' })).toBeUndefined();
      t.elapse(CONTRACT_BOUNDS.resultTtl);
      expect(await t.store.getBatch('batch_a')).toBeUndefined();
      await t.close();
    });
  });
}
