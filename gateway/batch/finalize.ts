/**
 * A batch's last step: its output and error files assembled from the line results the store
 * holds, in the input's order, and its final status written. Whoever holds the batch's finalize
 * lease does it; the final write is a compare-and-set on a batch not yet final, so of two
 * finalizers (a lease that expired under a slow one) one wins and the other's files are deleted.
 */
import type { Clock, Logger } from '../../placer/kernel/index.ts';
import type { Caller } from '../access/index.ts';
import type { BatchRecord, BatchStop, BatchStore, LineResult, RequestCounts } from '../store/index.ts';
import type { FileKeeper } from './files.ts';
import { newObjectId } from './files.ts';
import type { BatchLine } from './jsonl.ts';
import { unansweredLine } from './views.ts';

/** A batch's files' lines and its counts. */
export interface Assembled {
  output: string[];
  errors: string[];
  counts: RequestCounts;
}

const EXPIRED_MESSAGE = 'This request could not be executed before the completion window expired.';

/**
 * The files' lines of a batch of `lines` from its `results`: a line with none is listed
 * `batch_expired` when the batch expired, left out when it was cancelled, and listed
 * `result_missing` otherwise (it cannot happen: every line ends with a result written).
 */
export function assemble(
  lines: readonly BatchLine[],
  results: ReadonlyMap<string, LineResult>,
  stop: BatchStop | undefined,
): Assembled {
  const output: string[] = [];
  const errors: string[] = [];
  for (const line of lines) {
    const result = results.get(line.customId);
    if (result) (result.outcome === 'completed' ? output : errors).push(result.line);
    else if (stop === 'expired')
      errors.push(unansweredLine(newObjectId('batch_req'), line, 'batch_expired', EXPIRED_MESSAGE));
    else if (stop === undefined)
      errors.push(
        unansweredLine(newObjectId('batch_req'), line, 'result_missing', 'no result was written for this line'),
      );
  }
  return { output, errors, counts: { total: lines.length, completed: output.length, failed: errors.length } };
}

/** What finalizing works with. */
export interface FinalizeSettings {
  store: BatchStore;
  files: FileKeeper;
  clock: Pick<Clock, 'now'>;
  logger: Logger;
}

/**
 * Finalizes batch `id` of `lines`, run as `caller`: resolves with its final record, or undefined
 * when another finalizer ended it first (or it was gone).
 * @throws whatever the store or the file keeper throws.
 */
export async function finalizeBatch(
  settings: FinalizeSettings,
  batch: { id: string; lines: readonly BatchLine[]; caller: Caller },
  stop: BatchStop | undefined,
): Promise<BatchRecord | undefined> {
  const { store, files, clock } = settings;
  // A cancel whose stop the store had not seen when the step was taken still ends the batch cancelled.
  if (stop === undefined && (await store.getBatch(batch.id))?.status === 'cancelling') stop = 'cancelled';
  if (stop === undefined && !(await store.updateBatch(batch.id, { status: 'finalizing', finalizingAt: clock.now() })))
    return undefined;
  const { output, errors, counts } = assemble(batch.lines, await store.lineResults(batch.id), stop);
  const keep = async (lines: string[], name: string) =>
    lines.length === 0
      ? undefined
      : (
          await files.keep({
            caller: batch.caller,
            filename: `${batch.id}_${name}.jsonl`,
            purpose: 'batch_output',
            content: Buffer.from(`${lines.join('\n')}\n`),
          })
        ).id;
  const outputFileId = await keep(output, 'output');
  const errorFileId = await keep(errors, 'error');
  const now = clock.now();
  const final: Partial<BatchRecord> =
    stop === 'cancelled'
      ? { status: 'cancelled', cancelledAt: now }
      : stop === 'expired'
        ? { status: 'expired', expiredAt: now }
        : { status: 'completed', completedAt: now };
  const ended = await store.updateBatch(batch.id, {
    ...final,
    requestCounts: counts,
    ...(outputFileId ? { outputFileId } : {}),
    ...(errorFileId ? { errorFileId } : {}),
  });
  if (!ended) {
    settings.logger.info('batch finalized by another gateway first', { batch: batch.id });
    for (const id of [outputFileId, errorFileId]) if (id) await store.deleteFile(id).catch(() => false);
  }
  return ended;
}
