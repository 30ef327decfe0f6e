import type { BatchRecord } from '../../gateway/store/index.ts';

const DAY = 24 * 3_600_000;

/**
 * A batch as its gateway records it when the batch is created at `now`: chat completions,
 * validating, a day to complete, no lines counted yet, run by `gw-1`; `fields` name the batch
 * and its input file and change any of the rest.
 */
export function newBatchRecord(
  now: number,
  fields: Pick<BatchRecord, 'id' | 'inputFileId'> & Partial<BatchRecord>,
): BatchRecord {
  return {
    owner: 'gw-1',
    endpoint: '/v1/chat/completions',
    completionWindow: '24h',
    status: 'validating',
    createdAt: now,
    expiresAt: now + DAY,
    requestCounts: { total: 0, completed: 0, failed: 0 },
    ...fields,
  };
}
