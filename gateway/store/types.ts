/**
 * The detached-call store contract. Two implementations: in memory (one gateway) and Redis
 * (several gateways sharing the work). The gateway's detached-call logic is written against
 * this interface only, and one contract suite runs against both.
 */

/** Where a detached call stands. */
export type CallStatus = 'queued' | 'running' | 'succeeded' | 'failed' | 'cancelled' | 'expired';

/** Statuses a call never leaves. */
export const FINAL_STATUSES: ReadonlySet<CallStatus> = new Set(['succeeded', 'failed', 'cancelled', 'expired']);

/** Why a call failed, was cancelled or expired. */
export interface CallError {
  code: string;
  message: string;
}

/** Statuses of a call not yet final: being placed (`queued`) or on a runner (`running`). */
export const LIVE_STATUSES: ReadonlySet<CallStatus> = new Set(['queued', 'running']);

/** What the store keeps about one detached call. Times are ms since the epoch. */
export interface CallRecord {
  id: string;
  /** The function: model or `:fn`. */
  fn: string;
  status: CallStatus;
  createdAt: number;
  /** When a runner committed; absent while `queued`. */
  startedAt?: number;
  completedAt?: number;
  /** Id of the runner that committed. */
  runner?: string;
  /** From createdAt to commit, ms. */
  delayMs?: number;
  /** Execution time the runner reported, ms. */
  executionMs?: number;
  /** Id of the gateway running the call in the background; cancels are routed to it. */
  owner: string;
  /** End of the call's background lifetime; a call still running after it is failed by anyone. */
  expiresAt: number;
  error?: CallError;
  /** Where to POST the result when the call finishes. */
  callbackUrl?: string;
  /**
   * The Idempotency-Key the call was created with, in its client's namespace
   * ({@link scopedIdempotencyKey}).
   */
  idempotencyKey?: string;
  /** The id of the client key that created the call; absent for a call made without one. */
  client?: string;
}

/**
 * An Idempotency-Key as the store holds it: in the namespace of the client key that sent it
 * (`-` for calls without one), so two clients using the same key string never meet. A key id
 * holds no `/`, so no client can name a key in another's namespace.
 */
export function scopedIdempotencyKey(client: string | undefined, key: string): string {
  return `${client ?? '-'}/${key}`;
}

/** A finished call's response, as the runner's engine gave it. */
export interface StoredResult {
  status: number;
  contentType: string;
  body: Buffer;
}

/** What `start` writes when a runner commits to a queued call. */
export interface CallStart {
  /** Id of the runner that committed. */
  runner: string;
  startedAt: number;
  /** From createdAt to commit, ms. */
  delayMs: number;
}

/** The final state written when a call ends. */
export interface CallFinish {
  status: 'succeeded' | 'failed' | 'cancelled' | 'expired';
  completedAt: number;
  executionMs?: number;
  error?: CallError;
  /**
   * The start of a call whose `start` write the gateway could not confirm (the store did not
   * answer): written with the end, so the final record names its runner all the same.
   */
  start?: CallStart;
}

/** An Idempotency-Key already taken, and by which call with which payload. */
export interface KeyClaim {
  callId: string;
  /** A digest of the first request's method, path and body. */
  fingerprint: string;
}

/**
 * What a store's cheap health check saw: it answered, with the bytes its finished calls and
 * results take against its bound, or it did not, and why (safe to log: no credentials).
 */
export type StoreHealth = { ok: true; storedBytes: number; maxStoredBytes: number } | { ok: false; reason: string };

/** Storage for detached calls. Every method but `health` may reject on a storage failure. */
export interface CallStore {
  /**
   * Records a new call: `queued`, before it is placed (the gateway's way), or `running`. Rejects
   * within a few seconds when the store does not answer, and a write given up on that way must
   * not land later (the Redis store bounds it by Redis's own clock), so a refused call, which
   * nothing ran, leaves no live ghost.
   *
   * `reserve` bytes, when given, are held against maxStoredBytes for the call's result from now
   * until its `finish` (or, for a call nobody finishes, its `expiresAt`), atomically with the
   * create: one that does not fit beside what is stored and reserved already is refused with
   * StoreFullError (STORE_FULL) and nothing is written. Reservations count in `health`.
   */
  create(record: CallRecord, reserve?: number): Promise<void>;
  /**
   * Moves a `queued` call to `running` with the runner that committed to it, atomically:
   * resolves false and changes nothing when the call is not `queued` (a cancel won the race, it
   * already started) or gone. Rejects within a few seconds when the store does not answer; a
   * start that lands later does no harm (it is true, and a final record refuses it).
   */
  start(id: string, start: CallStart): Promise<boolean>;
  /** The record, or undefined when unknown or expired from the store. */
  get(id: string): Promise<CallRecord | undefined>;
  /**
   * Moves a `queued` or `running` call to a final status, storing `result` with it, atomically:
   * resolves false and changes nothing when the call is already final (a cancel won the race) or
   * gone.
   * Finished records and results are kept for the store's result TTL, and leave only then:
   * each counts RECORD_OVERHEAD_BYTES (options.ts) plus its body against the store's
   * maxStoredBytes, and a `result` that does not fit is refused with StoreFullError (STORE_FULL), changing
   * nothing, rather than evicting another call's; the call's own reservation (see `create`)
   * counts as room for it, and a finish that is written gives the reservation back. A finish without a result is never refused
   * for space, so a call can always be ended with its reason.
   */
  finish(id: string, finish: CallFinish, result?: StoredResult): Promise<boolean>;
  /** The stored response of a finished call, or undefined. */
  getResult(id: string): Promise<StoredResult | undefined>;
  /**
   * Claims an Idempotency-Key for `callId`. Resolves undefined when the key was free and is now
   * taken, else the existing claim (whatever its payload) without changing it.
   */
  claimKey(key: string, claim: KeyClaim, ttlMs: number): Promise<KeyClaim | undefined>;
  /** Frees a key whose call never started (no runner took it), so a retry can place it. */
  releaseKey(key: string, callId: string): Promise<void>;
  /** Asks the gateway `owner` to cancel call `id` (delivered to its onCancel handler). */
  requestCancel(id: string, owner: string): Promise<void>;
  /** Receives cancel requests addressed to `owner` (this gateway). One handler per store. */
  onCancel(owner: string, handler: (id: string) => void): Promise<void>;
  /**
   * A cheap check that the store answers (a ping with a short timeout for Redis), with its byte
   * count. Never rejects, answers within about a second, and may repeat an answer for about a
   * second, so readiness probes and admission can call it on every request.
   */
  health(): Promise<StoreHealth>;
  /** Closes connections; idempotent. */
  close(): Promise<void>;
}
