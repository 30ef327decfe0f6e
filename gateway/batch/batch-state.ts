/**
 * A batch as the runner holds it while it runs (its lines pending, its results so far, why it
 * stops), and the rules of a line's answer and of a key's share that the runner applies.
 */
import type { Caller } from '../access/index.ts';
import type { BatchRecord, RequestCounts } from '../store/index.ts';
import type { BatchLine } from './jsonl.ts';
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

/** Why a batch stops releasing lines. */
export type Stop = 'cancelled' | 'expired' | 'stopped';

/** A batch this gateway runs. */
export class Active {
  readonly pending: BatchLine[] = [];
  readonly output: string[] = [];
  readonly errors: string[] = [];
  readonly counts: RequestCounts = { total: 0, completed: 0, failed: 0 };
  readonly expiry = new AbortController();
  inFlight = 0;
  /** No line is released before this time (after a busy answer). */
  notBefore = 0;
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

/** The delay before a line answered busy runs again, in ms; undefined when its answer is its result. */
export function retryDelay(answer: LineAnswer): number | undefined {
  if (answer.status !== 429 && answer.status !== 503) return undefined;
  let code: unknown;
  try {
    code = (JSON.parse(answer.body.toString('utf8')) as { error?: { code?: unknown } }).error?.code;
  } catch {
    return undefined;
  }
  if (typeof code !== 'string' || !RETRY_CODES.has(code)) return undefined;
  return RETRY_DELAY_MS;
}
