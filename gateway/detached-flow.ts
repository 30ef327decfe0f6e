/**
 * The client's side of a detached call: callback and Idempotency-Key checks, the record written
 * `queued`, placement under the detached deadline, then 202 (or the whole result, for
 * `Prefer: wait=N`) once a runner commits. The background half lives in detached.ts.
 */
import type { IncomingHttpHeaders, ServerResponse } from 'node:http';
import { SluiceError } from '../placer/kernel/index.ts';
import type { Placement } from '../placer/walk.ts';
import type { CallOutcome, GatewayCall } from './call.ts';
import type { DetachedCalls, DetachedOutcome } from './detached.ts';
import { requestFingerprint } from './detached.ts';
import { DetachedStoreFullError, DetachedStoreUnavailableError, GatewayError } from './errors.ts';
import type { RunnerResponse } from './http-runner.ts';
import type { GatewayMetrics } from './metrics.ts';
import type { CallResult, GatewayConfig } from './options.ts';
import type { CallPreference } from './prefer.ts';
import { StoreInvalidRecordError } from './store/errors.ts';
import { LIVE_STATUSES } from './store/types.ts';
import type { CallRecord, CallStatus } from './store/types.ts';

/** Header naming where to POST the result when the call finishes. */
export const CALLBACK_URL_HEADER = 'sluice-callback-url';
/** The IETF draft's header: the same key and payload return the first call. */
export const IDEMPOTENCY_KEY_HEADER = 'idempotency-key';

/** What the flow borrows from the agent. */
export interface DetachedFlowHost {
  config: GatewayConfig;
  metrics: GatewayMetrics;
  calls: DetachedCalls;
  place(call: GatewayCall, out: ServerResponse, headers: Record<string, string>): Promise<Placement<RunnerResponse> | CallResult>;
  refuse(out: ServerResponse, error: SluiceError, headers?: Record<string, string>): void;
}

const OUTCOMES: Record<CallStatus, CallOutcome> = {
  queued: 'completed',
  running: 'completed',
  succeeded: 'completed',
  failed: 'errors',
  cancelled: 'canceled',
  expired: 'timeouts',
};

/** The URLs of a call's status monitor, result and cancel. */
export function callUrls(id: string): { status: string; result: string; cancel: string } {
  return { status: `/v1/calls/${id}`, result: `/v1/calls/${id}/result`, cancel: `/v1/calls/${id}/cancel` };
}

/** Runs detached calls up to their 202. */
export class DetachedFlow {
  readonly #h: DetachedFlowHost;

  constructor(host: DetachedFlowHost) {
    this.#h = host;
  }

  /**
   * Serves one detached call; resolves with how it ended, which for a committed call is when
   * its background work is over (long after the client got its 202).
   */
  async run(
    call: GatewayCall,
    request: IncomingHttpHeaders,
    out: ServerResponse,
    headers: Record<string, string>,
    preference: CallPreference,
    clientGone: AbortSignal,
  ): Promise<CallResult> {
    const { config, calls } = this.#h;
    const ended = (outcome: CallOutcome, status: number, error?: Error): CallResult => {
      const totalMs = config.clock.now() - call.startedAt;
      return { outcome, status, totalMs, latencyMs: totalMs, ...(error ? { error } : {}) };
    };
    const refuse = (error: SluiceError): CallResult => {
      this.#h.metrics.queued.add(-1);
      this.#h.refuse(out, error, headers);
      return ended('errors', error.status, error);
    };

    const callbackUrl = single(request[CALLBACK_URL_HEADER]);
    if (callbackUrl !== undefined) {
      if (!config.callbacks) return refuse(new GatewayError('GW_CALLBACKS_DISABLED', 400, 'invalid_request_error', `${CALLBACK_URL_HEADER} was given but callbacks are not configured on this gateway (set --callback-secret and --callback-allow)`));
      try {
        await config.callbacks.check(callbackUrl);
      } catch (error) {
        return refuse(asSluiceError(error));
      }
    }

    const key = single(request[IDEMPOTENCY_KEY_HEADER]);
    if (key !== undefined && !/^[\x21-\x7e]{1,255}$/.test(key)) {
      return refuse(new GatewayError('GW_INVALID_IDEMPOTENCY_KEY', 400, 'invalid_request_error', 'Idempotency-Key must be 1 to 255 visible ASCII characters'));
    }

    // Before the store is asked anything: one that does not answer would hold this client for
    // its command timeout, and a runner would work on a result nobody could keep.
    const admission = await calls.admission();
    if (admission.kind === 'unavailable') {
      return refuse(new DetachedStoreUnavailableError('the detached-call store is not answering; retry later', { retryAfter: config.retryAfter }));
    }

    if (key !== undefined) {
      const fingerprint = requestFingerprint(call, callbackUrl);
      let claim;
      try {
        claim = await config.store.claimKey(key, { callId: call.id, fingerprint }, config.resultTtl);
      } catch (error) {
        return refuse(asSluiceError(error));
      }
      if (claim) {
        if (claim.fingerprint !== fingerprint) {
          return refuse(new GatewayError('GW_IDEMPOTENCY_KEY_REUSED', 422, 'invalid_request_error', `Idempotency-Key ${JSON.stringify(key)} was already used with a different request`));
        }
        const first = await calls.status(claim.callId).catch(() => undefined);
        // Claimed and not yet recorded, or recorded and waiting for a runner: either way being placed.
        if (!first || first.status === 'queued') {
          return refuse(new GatewayError('GW_IDEMPOTENCY_IN_PROGRESS', 409, 'invalid_request_error', `the first call with Idempotency-Key ${JSON.stringify(key)} is still being placed; retry shortly`, { headers: { 'retry-after': '1' } }));
        }
        this.#h.metrics.queued.add(-1);
        await this.#answer(out, first, { ...headers, 'sluice-call-id': first.id, 'idempotent-replayed': 'true' }, preference, undefined);
        return ended('completed', 202);
      }
    }

    // A replay needs no room; a new call does, for its result.
    if (admission.kind === 'full') {
      if (key !== undefined) await config.store.releaseKey(key, call.id).catch(() => {});
      return refuse(
        new DetachedStoreFullError(
          `the detached-call store is full (${admission.storedBytes} of maxStoredBytes ${admission.maxStoredBytes} bytes hold results until their TTL ends; a new call needs room for ${admission.needed}); retry later`,
          config.retryAfter,
        ),
      );
    }

    // Before a runner commits, a client that leaves takes the call with it; after, the call is
    // the gateway's to finish, whatever the client does. A cancel aborts it too, at any time.
    const background = new AbortController();
    let committed = false;
    clientGone.addEventListener('abort', () => committed || background.abort(clientGone.reason), { once: true });
    (call as { signal: AbortSignal }).signal = background.signal;

    // The record before any runner sees the call: a store that cannot take it refuses the call
    // while nothing has run, so a client that retries never runs it twice.
    let queued: CallRecord;
    try {
      queued = await calls.queue(call, background, { callbackUrl, idempotencyKey: key });
    } catch (error) {
      if (key !== undefined) await config.store.releaseKey(key, call.id).catch(() => {});
      return refuse(
        error instanceof StoreInvalidRecordError
          ? error
          : new DetachedStoreUnavailableError('the detached-call store did not take the call; nothing ran; retry later', { cause: error, retryAfter: config.retryAfter }),
      );
    }

    const placed = await this.#h.place(call, out, headers);
    if (!('value' in placed)) {
      if (key !== undefined) await config.store.releaseKey(key, call.id).catch(() => {});
      const cancelled = background.signal.aborted && !clientGone.aborted;
      calls.unplaced(
        queued,
        clientGone.aborted ? { kind: 'client-left' } : cancelled ? { kind: 'cancelled' } : { kind: 'failed', error: placed.error ?? new Error('not placed') },
      );
      // A cancel stopped the placement while the client still waits: it gets the record, cancelled.
      if (cancelled) {
        const record = await calls.status(call.id).catch(() => undefined);
        await this.#answer(out, record ?? queued, headers, preference, undefined);
      }
      return placed;
    }
    committed = true;
    const accepted = await calls.accept(queued, call, placed.value, placed.runner.id, background);
    this.#h.metrics.running.add(1);
    await this.#answer(out, accepted.record, headers, preference, accepted.done);
    const outcome = await accepted.done;
    this.#h.metrics.running.add(-1);
    return this.#result(outcome, placed.runner.id);
  }

  /** 202 with the status monitor, or the whole result when it arrives within wait=N. */
  async #answer(out: ServerResponse, record: CallRecord, headers: Record<string, string>, preference: CallPreference, done: Promise<DetachedOutcome> | undefined): Promise<void> {
    let current = record;
    if (preference.waitSeconds !== undefined && preference.waitSeconds > 0 && LIVE_STATUSES.has(current.status)) {
      const waited = done ?? this.#poll(record.id, preference.waitSeconds * 1000);
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<undefined>((resolve) => {
        timer = setTimeout(() => resolve(undefined), preference.waitSeconds! * 1000);
      });
      const outcome = await Promise.race([waited, late]);
      clearTimeout(timer);
      if (outcome && 'record' in outcome) current = outcome.record;
      else if (outcome) current = outcome;
    }
    if (out.destroyed || out.headersSent) return;
    if (!LIVE_STATUSES.has(current.status) && preference.waitSeconds !== undefined) {
      const result = await this.#h.config.store.getResult(current.id).catch(() => undefined);
      if (result) {
        out.writeHead(result.status, { ...headers, 'content-type': result.contentType, 'preference-applied': `wait=${preference.waitSeconds}` });
        out.end(result.body);
        return;
      }
    }
    out.writeHead(202, {
      ...headers,
      'content-type': 'application/json',
      location: callUrls(current.id).status,
      'preference-applied': 'respond-async',
    });
    out.end(JSON.stringify({ id: current.id, status: current.status, urls: callUrls(current.id) }));
  }

  /** For an idempotent replay owned by this or another gateway: watch the store until final. */
  async #poll(id: string, timeout: number): Promise<CallRecord | undefined> {
    const until = this.#h.config.clock.now() + timeout;
    for (;;) {
      const record = await this.#h.calls.status(id).catch(() => undefined);
      if (!record || !LIVE_STATUSES.has(record.status) || this.#h.config.clock.now() >= until) return record;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }

  #result(outcome: DetachedOutcome, runner: string): CallResult {
    const { record, totalMs, execMs } = outcome;
    const result: CallResult = {
      outcome: OUTCOMES[record.status],
      status: 202,
      runner,
      totalMs,
      latencyMs: totalMs - (execMs ?? 0),
      ...(execMs === undefined ? {} : { execMs }),
    };
    if (record.error && record.status !== 'succeeded') result.error = new GatewayError(record.error.code, 502, 'server_error', record.error.message);
    if (execMs !== undefined) this.#h.metrics.execTime.record(execMs, { outcome: result.outcome });
    return result;
  }
}

function single(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}

function asSluiceError(error: unknown): SluiceError {
  if (error instanceof SluiceError) return error;
  return new DetachedStoreUnavailableError('the detached-call store is unavailable; retry later', { cause: error });
}
