/**
 * The batch work contract, run against each BatchStore: chunks leased one holder at a time and
 * taken over when a lease expires, the finalize step only when every chunk is done or the batch
 * stopped with no live lease, a line claimed once and its result written once.
 */
import { describe, expect, it } from 'vitest';
import { newBatchRecord } from '../../support/batch-record.ts';
import { eventually } from '../../support/fleet.ts';
import type { BatchStoreUnderTest } from './batch-contract.ts';

/** A lease short enough for a store on Redis's own clock to see it expire in a spec. */
const TTL = 200;

export function describeBatchWork(name: string, make: () => Promise<BatchStoreUnderTest>): void {
  describe(`${name} (batch work contract)`, () => {
    const running = async (t: BatchStoreUnderTest, id: string): Promise<void> => {
      const counts = { total: 4, completed: 0, failed: 0 };
      await t.store.putBatch(
        newBatchRecord(t.now(), { id, inputFileId: 'file-1', status: 'in_progress', requestCounts: counts }),
      );
    };

    it('leases each chunk to one holder, then the finalize step once every chunk is done', async () => {
      const t = await make();
      await running(t, 'batch_w');
      await t.store.openChunks('batch_w', 2);
      await t.store.openChunks('batch_w', 5);
      expect(await t.store.takeChunk('batch_w', 'a', 60_000)).toEqual({ kind: 'chunk', index: 0 });
      expect(await t.store.takeChunk('batch_w', 'b', 60_000)).toEqual({ kind: 'chunk', index: 1 });
      expect(await t.store.takeChunk('batch_w', 'b', 60_000)).toEqual({ kind: 'none' });
      // Only the holder ends or renews its chunk.
      await t.store.endChunk('batch_w', 0, 'b');
      expect(await t.store.renewChunk('batch_w', 0, 'b', 60_000)).toBe(false);
      expect(await t.store.renewChunk('batch_w', 0, 'a', 60_000)).toBe(true);
      await t.store.endChunk('batch_w', 0, 'a');
      expect(await t.store.takeChunk('batch_w', 'c', 60_000)).toEqual({ kind: 'none' });
      await t.store.endChunk('batch_w', 1, 'b');
      expect(await t.store.takeChunk('batch_w', 'c', 60_000)).toEqual({ kind: 'finalize' });
      expect(await t.store.takeChunk('batch_w', 'a', 60_000)).toEqual({ kind: 'none' });
      expect(await t.store.runningBatches()).toEqual(['batch_w']);
      await t.store.updateBatch('batch_w', { status: 'completed', completedAt: t.now() });
      expect(await t.store.runningBatches()).toEqual([]);
      await t.close();
    });

    it("hands a chunk whose lease expired to another holder, and the first holder's lease is lost", async () => {
      const t = await make();
      await running(t, 'batch_x');
      await t.store.openChunks('batch_x', 1);
      expect(await t.store.takeChunk('batch_x', 'a', TTL)).toEqual({ kind: 'chunk', index: 0 });
      t.elapse(TTL);
      await eventually(async () => (await t.store.takeChunk('batch_x', 'b', 60_000)).kind === 'chunk', 5000);
      expect(await t.store.renewChunk('batch_x', 0, 'a', 60_000)).toBe(false);
      // A chunk given back is free at once.
      await t.store.releaseChunk('batch_x', 0, 'b');
      expect(await t.store.takeChunk('batch_x', 'c', 60_000)).toEqual({ kind: 'chunk', index: 0 });
      await t.close();
    });

    it('hands out no chunk of a stopped batch, and its finalize step once no lease is live, naming why', async () => {
      const t = await make();
      await running(t, 'batch_s');
      await t.store.openChunks('batch_s', 3);
      expect(await t.store.takeChunk('batch_s', 'a', 60_000)).toEqual({ kind: 'chunk', index: 0 });
      await t.store.stopBatch('batch_s', 'cancelled');
      await t.store.stopBatch('batch_s', 'expired');
      expect(await t.store.takeChunk('batch_s', 'b', 60_000)).toEqual({ kind: 'none' });
      await t.store.endChunk('batch_s', 0, 'a');
      expect(await t.store.takeChunk('batch_s', 'b', 60_000)).toEqual({ kind: 'finalize', stop: 'cancelled' });
      await t.close();
    });

    it('claims a line for one holder, writes its result once, and counts it', async () => {
      const t = await make();
      await running(t, 'batch_l');
      expect(await t.store.claimLine('batch_l', 'x', 'a')).toBe('claimed');
      expect(await t.store.claimLine('batch_l', 'x', 'a')).toBe('claimed');
      expect(await t.store.claimLine('batch_l', 'x', 'b')).toBe('started');
      // A mark is taken off only by its holder.
      await t.store.unclaimLine('batch_l', 'x', 'b');
      expect(await t.store.claimLine('batch_l', 'x', 'b')).toBe('started');
      await t.store.unclaimLine('batch_l', 'x', 'a');
      expect(await t.store.claimLine('batch_l', 'x', 'b')).toBe('claimed');
      expect(await t.store.putLineResult('batch_l', 'x', { outcome: 'completed', line: '{"x":1}' })).toBe(true);
      expect(await t.store.putLineResult('batch_l', 'x', { outcome: 'failed', line: '{"x":2}' })).toBe(false);
      expect(await t.store.claimLine('batch_l', 'x', 'c')).toBe('ended');
      expect(await t.store.putLineResult('batch_l', 'y', { outcome: 'failed', line: '{"y":1}' })).toBe(true);
      expect(await t.store.lineResults('batch_l')).toEqual(
        new Map([
          ['x', { outcome: 'completed', line: '{"x":1}' }],
          ['y', { outcome: 'failed', line: '{"y":1}' }],
        ]),
      );
      expect((await t.store.getBatch('batch_l'))!.requestCounts).toEqual({ total: 4, completed: 1, failed: 1 });
      await t.close();
    });
  });
}
