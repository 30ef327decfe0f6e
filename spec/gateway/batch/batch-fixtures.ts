/**
 * What the batch runner specs on the fake clock share: a file keeper with room for any batch, a
 * batch of chat lines started on a runner as the gateway starts one, and a stored file's lines.
 */
import { createMemoryLimiter } from '../../../gateway/access/index.ts';
import type { Caller } from '../../../gateway/access/index.ts';
import type { BatchRunner } from '../../../gateway/batch/batch-runner.ts';
import { FileKeeper } from '../../../gateway/batch/files.ts';
import type { BatchRecord, BatchStore } from '../../../gateway/store/index.ts';
import type { FakeClock } from '../../placer/fake.ts';
import { newBatchRecord } from '../../support/batch-record.ts';

const DAY = 24 * 3_600_000;

/**
 * A keeper of `store`'s files on `clock`, with a day's file lifetime and a gibibyte of room, and
 * a key limiter that never refuses: a spec's batches are bounded by what it checks, not by bytes.
 */
export function roomyFileKeeper(store: BatchStore, clock: FakeClock): FileKeeper {
  return new FileKeeper({
    store,
    calls: { health: async () => ({ ok: true, storedBytes: 0, maxStoredBytes: 1 << 30 }) },
    limiter: createMemoryLimiter({ clock }),
    clock,
    fileTtl: DAY,
  });
}

/** Where a spec starts its batches. */
export interface BatchBench {
  store: BatchStore;
  files: FileKeeper;
  runner: BatchRunner;
  clock: FakeClock;
}

/**
 * Keeps for `caller` a JSONL input of one chat completion line (model `m`) per custom id of
 * `ids`, records a batch over it (a client's batch is the client's; `fields` name the batch and
 * change the rest of {@link newBatchRecord}) and starts it on the bench's runner.
 */
export async function startChatBatch(
  bench: BatchBench,
  caller: Caller,
  ids: readonly string[],
  fields: Pick<BatchRecord, 'id'> & Partial<BatchRecord>,
): Promise<BatchRecord> {
  const lines = ids.map((id) =>
    JSON.stringify({ custom_id: id, method: 'POST', url: '/v1/chat/completions', body: { model: 'm' } }),
  );
  const input = await bench.files.keep({
    caller,
    filename: 'in.jsonl',
    purpose: 'batch',
    content: Buffer.from(lines.join('\n')),
  });
  const record = newBatchRecord(bench.clock.now(), {
    inputFileId: input.id,
    ...(caller.kind === 'client' ? { client: caller.key.id } : {}),
    ...fields,
  });
  await bench.store.putBatch(record);
  bench.runner.start(record, caller);
  return record;
}

/** The lines of a stored JSONL file, each parsed; none when there is no file. */
export async function storedLines(store: BatchStore, fileId: string | undefined): Promise<any[]> {
  if (!fileId) return [];
  const text = (await store.fileContent(fileId))!.toString();
  return text
    .split('\n')
    .filter((line) => line)
    .map((line) => JSON.parse(line));
}
