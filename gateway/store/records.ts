/**
 * Record rules both stores share, so the memory and Redis stores accept, merge and copy records
 * the same way and the contract suite can hold them to one behaviour.
 */
import { checkMs, show } from '../../placer/validate.ts';
import { StoreConfigError, StoreInvalidRecordError } from './errors.ts';
import { FINAL_STATUSES } from './types.ts';
import type { CallFinish, CallRecord, StoredResult } from './types.ts';

/**
 * Refuses a record `create` must not store: one not `running` (finish is the only way to a final
 * status, which keeps it a compare-and-set), or one without the id, owner and times the stores
 * key and expire it by.
 * @throws StoreInvalidRecordError
 */
export function checkNewRecord(record: CallRecord): void {
  if (typeof record.id !== 'string' || record.id === '') throw invalid(`a call id must be a non-empty string, got ${show(record.id)}`);
  if (record.status !== 'running') throw invalid(`call ${record.id} must be created with status "running", got ${show(record.status)}`);
  if (typeof record.owner !== 'string') throw invalid(`call ${record.id} must name its owner, got ${show(record.owner)}`);
  for (const field of ['createdAt', 'expiresAt'] as const) {
    if (!Number.isFinite(record[field])) throw invalid(`call ${record.id} needs ${field} in ms since the epoch, got ${show(record[field])}`);
  }
}

/** The error for a `create` whose id is taken. */
export function duplicateCall(id: string): StoreInvalidRecordError {
  return invalid(`call ${id} already exists; call ids must be unique`);
}

/**
 * The fields `finish` writes over the running record, without undefined ones, so the stored
 * record reads the same from memory and from JSON.
 * @throws StoreInvalidRecordError when the status is not final.
 */
export function finalFields(finish: CallFinish): Partial<CallRecord> {
  if (!FINAL_STATUSES.has(finish.status)) {
    throw invalid(`a call can only finish with a final status, got ${show(finish.status)}`);
  }
  return {
    status: finish.status,
    completedAt: finish.completedAt,
    ...(finish.executionMs === undefined ? {} : { executionMs: finish.executionMs }),
    ...(finish.error ? { error: { code: finish.error.code, message: finish.error.message } } : {}),
  };
}

/** The record after `finish`: the running record with the final fields written over it. */
export function finalRecord(running: CallRecord, finish: CallFinish): CallRecord {
  return { ...running, ...finalFields(finish) };
}

/**
 * A copy of a record as it comes back from JSON (undefined fields dropped), which is how the
 * Redis store keeps it; the memory store copies the same way so both read back alike.
 */
export function cloneRecord(record: CallRecord): CallRecord {
  return JSON.parse(JSON.stringify(record)) as CallRecord;
}

/** A copy of a result whose body shares no memory with the caller's (which may be pooled). */
export function copyResult(result: StoredResult): StoredResult {
  return { status: result.status, contentType: result.contentType, body: Buffer.from(result.body) };
}

/**
 * Validates an Idempotency-Key TTL as both stores need it: a positive whole number of ms.
 * @throws StoreConfigError
 */
export function checkClaimTtl(ttlMs: number): void {
  checkMs('ttlMs', ttlMs, 1, (message) => new StoreConfigError(message));
}

const invalid = (message: string) => new StoreInvalidRecordError(message);
