/**
 * A batch as the runner holds it while it runs (its lines, the chunks of them it leased, the
 * lines of those not yet released, why it stops), and the rules of a line's answer, of a key's
 * share and of who a line runs as that the runner applies.
 */
import type { Caller } from '../access/index.ts';
import type { BatchRecord, BatchStore, LineResult } from '../store/index.ts';
import { parseBatchInput } from './jsonl.ts';
import type { BatchInput, BatchLine } from './jsonl.ts';
import type { LineAnswer } from './line-calls.ts';

/** Codes of answers that say nothing ran: the line is released again after a delay. */
export const RETRY_CODES: ReadonlySet<string> = new Set([
  // The gateway is stopping: the line goes back, and the batch ends with the gateway (close).
  'GW_SHUTTING_DOWN',
  'PLACER_TIMEOUT',
  'GW_OVERLOADED',
  'GW_QUEUE_FULL',
  'GW_UPLOADS_FULL',
  'GW_TOO_MANY_UPLOADS',
  'GW_RATE_LIMITED',
]);

/** How long a batch waits after a busy answer when the answer names no Retry-After, in ms. */
const RETRY_DELAY_MS = 1000;
/** The longest wait a busy answer's Retry-After gets, in ms. */
const MAX_RETRY_DELAY_MS = 60_000;

/**
 * The share of a key's concurrentCalls its batch lines may hold at once: the rest stays free
 * for its interactive calls, so a batch never locks its key out of them.
 */
export const BATCH_SHARE_OF_CONCURRENCY = 0.5;

/** The most lines of `caller`'s batches in flight at once: a share of its concurrentCalls, at least one. */
export function keyLineBound(caller: Caller): number {
  const limit = caller.kind === 'client' ? caller.key.limits.concurrentCalls : undefined;
  return limit === undefined ? Number.POSITIVE_INFINITY : Math.max(1, Math.floor(limit * BATCH_SHARE_OF_CONCURRENCY));
}

/** A client key as a caller holds it. */
type ClientKeyOf = Extract<Caller, { kind: 'client' }>['key'];

/** Why a batch stops releasing lines. */
export type Stop = 'cancelled' | 'expired';

/** A line of a chunk this gateway leased. */
export interface ChunkLine {
  readonly line: BatchLine;
  readonly chunk: number;
}

/** A line that ended whose result the store did not take yet (it was unavailable). */
export interface Unwritten {
  readonly item: ChunkLine;
  readonly result: LineResult;
}

/** A batch this gateway runs. */
export class Active {
  /** Every line of its input, in order. */
  lines: readonly BatchLine[] = [];
  /** Lines in each of its chunks (its record's, set at validation). */
  chunkLines = 1;
  /** Lines of its leased chunks not yet released. */
  readonly pending: ChunkLine[] = [];
  /** Its leased chunks, each with its lines not yet ended here. */
  readonly chunks = new Map<number, { left: number }>();
  readonly unwritten: Unwritten[] = [];
  /** Custom ids of its lines in flight here: a chunk taken again (its lease was lost, then retaken) never runs one twice. */
  readonly running = new Set<string>();
  readonly expiry = new AbortController();
  inFlight = 0;
  /** No line is released before this time (after a busy answer). */
  notBefore = 0;
  /** No work is asked of the store before this time (after it had none). */
  idleUntil = 0;
  /** A take of work from the store is under way. */
  taking = false;
  stop: Stop | undefined;
  validated = false;

  constructor(
    readonly record: BatchRecord,
    readonly caller: Caller,
  ) {}

  get id(): string {
    return this.record.id;
  }

  /** The key whose turn the batch's lines take. */
  get flow(): string {
    return this.record.client ?? '';
  }
}

/**
 * The delay before a line answered busy runs again, in ms (the answer's Retry-After, up to a
 * minute, or a second); undefined when its answer is its result.
 */
export function retryDelay(answer: LineAnswer): number | undefined {
  if (answer.status !== 429 && answer.status !== 503) return undefined;
  let code: unknown;
  try {
    code = (JSON.parse(answer.body.toString('utf8')) as { error?: { code?: unknown } }).error?.code;
  } catch {
    return undefined;
  }
  if (typeof code !== 'string' || !RETRY_CODES.has(code)) return undefined;
  return answer.retryAfter === undefined ? RETRY_DELAY_MS : Math.min(answer.retryAfter, MAX_RETRY_DELAY_MS);
}

/** Who a batch's lines run as, as its record keeps it: a client key's public fields, or the caller's kind and id. */
export function runAsOf(caller: Caller): Record<string, unknown> {
  if (caller.kind !== 'client') return { ...caller };
  const { id, name, models, limits } = caller.key;
  return { kind: 'client', key: { id, name, ...(models ? { models: [...models] } : {}), limits: { ...limits } } };
}

/** The caller a batch's lines run as, from its record; anonymous when the record names none. */
export function callerOf(record: BatchRecord): Caller {
  const runAs = record.runAs as { kind?: string; key?: ClientKeyOf; id?: string } | undefined;
  if (runAs?.kind === 'client' && runAs.key) return { kind: 'client', key: runAs.key };
  if ((runAs?.kind === 'operator' || runAs?.kind === 'viewer') && typeof runAs.id === 'string')
    return { kind: runAs.kind, id: runAs.id };
  return { kind: 'anonymous' };
}

/** A batch's input as its file holds it now: its lines, or its problems (`missing_file` when the file is gone). */
export async function readInput(store: BatchStore, record: BatchRecord, maxLines: number): Promise<BatchInput> {
  const content = await store.fileContent(record.inputFileId);
  if (content) return parseBatchInput(content, record.endpoint, maxLines);
  return { kind: 'invalid', errors: [{ code: 'missing_file', message: `input file ${record.inputFileId} is gone` }] };
}
