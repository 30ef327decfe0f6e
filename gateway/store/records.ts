/**
 * Record rules both stores share, so the memory and Redis stores accept, merge and copy records
 * the same way and the contract suite can hold them to one behaviour.
 */
import { checkMs, show } from '../../placer/kernel/index.ts';
import { StoreConfigError, StoreInvalidRecordError } from './errors.ts';
import { FINAL_STATUSES, LIVE_STATUSES } from './types.ts';
import type { CallFinish, CallRecord, CallStart, StoredResult } from './types.ts';

/**
 * Refuses a record `create` must not store: one neither `queued` nor `running` (finish is the
 * only way to a final status, which keeps it a compare-and-set), or one without the id, owner
 * and times the stores key and expire it by.
 * @throws StoreInvalidRecordError
 */
export function checkNewRecord(record: CallRecord): void {
  if (typeof record.id !== 'string' || record.id === '')
    throw invalid(`a call id must be a non-empty string, got ${show(record.id)}`);
  if (!LIVE_STATUSES.has(record.status)) {
    throw invalid(`call ${record.id} must be created with status "queued" or "running", got ${show(record.status)}`);
  }
  if (typeof record.owner !== 'string')
    throw invalid(`call ${record.id} must name its owner, got ${show(record.owner)}`);
  for (const field of ['createdAt', 'expiresAt'] as const) {
    if (!Number.isFinite(record[field]))
      throw invalid(`call ${record.id} needs ${field} in ms since the epoch, got ${show(record[field])}`);
  }
}

/** The error for a `create` whose id is taken. */
export function duplicateCall(id: string): StoreInvalidRecordError {
  return invalid(`call ${id} already exists; call ids must be unique`);
}

/**
 * The fields `start` writes over the queued record, copied field by field so nothing else a
 * caller put in the object reaches the store.
 * @throws StoreInvalidRecordError when the runner or a time is missing.
 */
export function startFields(id: string, start: CallStart): Pick<CallRecord, 'runner' | 'startedAt' | 'delayMs'> {
  if (typeof start?.runner !== 'string' || start.runner === '')
    throw invalid(`call ${id} must start on a named runner, got ${show(start?.runner)}`);
  for (const field of ['startedAt', 'delayMs'] as const) {
    if (!Number.isFinite(start[field]))
      throw invalid(`call ${id} needs ${field} in ms to start, got ${show(start[field])}`);
  }
  return { runner: start.runner, startedAt: start.startedAt, delayMs: start.delayMs };
}

/**
 * The fields `finish` writes over the live record, without undefined ones, so the stored
 * record reads the same from memory and from JSON. A finish that carries the call's start
 * (its `start` write went unconfirmed) writes that too.
 * @throws StoreInvalidRecordError when the status is not final.
 */
export function finalFields(id: string, finish: CallFinish): Partial<CallRecord> {
  if (!FINAL_STATUSES.has(finish.status)) {
    throw invalid(`a call can only finish with a final status, got ${show(finish.status)}`);
  }
  return {
    ...(finish.start ? startFields(id, finish.start) : {}),
    status: finish.status,
    completedAt: finish.completedAt,
    ...(finish.executionMs === undefined ? {} : { executionMs: finish.executionMs }),
    ...(finish.error ? { error: { code: finish.error.code, message: finish.error.message } } : {}),
  };
}

/** The record after `finish`: the live record with the final fields written over it. */
export function finalRecord(live: CallRecord, finish: CallFinish): CallRecord {
  return { ...live, ...finalFields(live.id, finish) };
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
