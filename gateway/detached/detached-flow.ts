/**
 * The client's side of a detached call, in the steps its orchestrator (detached-run.ts) takes it
 * through: the intake before placement ({@link DetachedFlow.prepare}: callback and
 * Idempotency-Key checks, the store's admission, the record written `queued`), the end of a call
 * no runner took ({@link DetachedFlow.unplaced}), and the answer ({@link DetachedFlow.answer}:
 * 202, or the whole result for `Prefer: wait=N`). The background side lives in detached.ts.
 */
import type { IncomingHttpHeaders, ServerResponse } from 'node:http';
import type { SluiceError } from '../../placer/kernel/index.ts';
import type { AbortWatch, Clock } from '../../placer/kernel/index.ts';
import type { CallOutcome, GatewayCall, CallResult } from '../http/index.ts';
import type { CallbackDelivery } from '../callbacks/index.ts';
import type { DetachedCalls, DetachedOutcome } from './detached.ts';
import { requestFingerprint } from './detached.ts';
import {
  CallbacksDisabledError,
  DetachedStoreFullError,
  DetachedStoreUnavailableError,
  IdempotencyInProgressError,
  IdempotencyKeyReusedError,
  InvalidIdempotencyKeyError,
  RecordedError,
  storeFailure,
} from '../errors.ts';
import { CALLBACK_URL_HEADER, IDEMPOTENCY_KEY_HEADER } from '../http/index.ts';
import type { CallPreference } from './prefer.ts';
import { StoreFullError, StoreInvalidRecordError, LIVE_STATUSES, scopedIdempotencyKey } from '../store/index.ts';
import type { CallRecord, CallStatus, CallStore, KeyClaim } from '../store/index.ts';

/** What the flow works with: the detached calls, the store and the gateway settings it reads. */
export interface DetachedFlowSettings {
  calls: DetachedCalls;
  store: CallStore;
  /** Absent when callbacks are off: a callback URL is then refused. */
  callbacks: CallbackDelivery | undefined;
  clock: Clock;
  /** How long an Idempotency-Key is held, in ms (the results' TTL). */
  resultTtl: number;
  /** Retry-After of the store's refusals, in seconds. */
  retryAfter: number;
}

/** Where and how a detached call's client is answered. */
export interface DetachedReply {
  out: ServerResponse;
  /** Added to the answer (the call and request ids). */
  headers: Record<string, string>;
  preference: CallPreference;
}

/** How a detached call stands after {@link DetachedFlow.prepare}. */
export type Prepared =
  /** Refused before anything was recorded; the client gets `error`. */
  | { kind: 'refused'; error: SluiceError }
  /** An Idempotency-Key replay of an earlier call, which the client gets instead. */
  | { kind: 'replay'; record: CallRecord }
  /** Recorded `queued`: to be placed. */
  | { kind: 'queued'; record: CallRecord };

/**
 * The signal a detached call runs on, made by the agent when it builds the call. Before a
 * runner commits, a client that leaves takes the call with it; after, the call is the gateway's
 * to finish, whatever the client does. A cancel or the call's lifetime aborts it at any time.
 */
export class DetachedSignal {
  /** Aborted by a cancel, the lifetime, a drain, or the client leaving before commit. */
  readonly controller = new AbortController();
  /** The client's connection: aborted when it closes before its answer is finished. */
  readonly clientGone: AbortWatch;
  #committed = false;

  constructor(clientGone: AbortWatch) {
    this.clientGone = clientGone;
    clientGone.addEventListener('abort', () => this.#committed || this.controller.abort(clientGone.reason), {
      once: true,
    });
  }

  /** The call's signal. */
  get signal(): AbortSignal {
    return this.controller.signal;
  }

  /** A runner committed: from now on the client leaving does not stop the call. */
  commit(): void {
    this.#committed = true;
  }
}

const OUTCOMES: Record<CallStatus, CallOutcome> = {
  queued: 'completed',
  running: 'completed',
  succeeded: 'completed',
  failed: 'errors',
  cancelled: 'cancelled',
  expired: 'timeouts',
};

/** The URLs of a call's status monitor, result and cancel. */
export function callUrls(id: string): { status: string; result: string; cancel: string } {
  return { status: `/v1/calls/${id}`, result: `/v1/calls/${id}/result`, cancel: `/v1/calls/${id}/cancel` };
}

/** The client's side of detached calls, up to their 202. */
export class DetachedFlow {
  readonly #settings: DetachedFlowSettings;

  constructor(settings: DetachedFlowSettings) {
    this.#settings = settings;
  }

  /**
   * Everything before placement: the callback URL and Idempotency-Key checks, the store's
   * admission, and the record written `queued` (a store that cannot take it refuses the call
   * while nothing has run, so a client that retries never runs it twice).
   */
  async prepare(
    call: GatewayCall,
    request: IncomingHttpHeaders,
    run: DetachedSignal,
    room?: (bytes: number, until: number) => Promise<SluiceError | undefined>,
  ): Promise<Prepared> {
    const { calls, store, callbacks, resultTtl, retryAfter } = this.#settings;
    const refuse = (error: SluiceError): Prepared => ({ kind: 'refused', error });

    const callbackUrl = single(request[CALLBACK_URL_HEADER]);
    if (callbackUrl !== undefined) {
      if (!callbacks) {
        return refuse(
          new CallbacksDisabledError(
            `${CALLBACK_URL_HEADER} was given but callbacks are not configured on this gateway (set --callback-secret and --callback-allow)`,
          ),
        );
      }
      try {
        await callbacks.check(callbackUrl);
      } catch (error) {
        return refuse(storeFailure(error));
      }
    }

    const given = single(request[IDEMPOTENCY_KEY_HEADER]);
    if (given !== undefined && !/^[\x21-\x7e]{1,255}$/.test(given)) {
      return refuse(new InvalidIdempotencyKeyError('Idempotency-Key must be 1 to 255 visible ASCII characters'));
    }
    // Claimed, released and recorded in the client's own namespace; messages name the key as sent.
    const key = given === undefined ? undefined : scopedIdempotencyKey(call.client, given);

    // Before the store is asked anything: one that does not answer would hold this client for
    // its command timeout, and a runner would work on a result nobody could keep.
    const admission = await calls.admission();
    if (admission.kind === 'unavailable') {
      return refuse(
        new DetachedStoreUnavailableError('the detached-call store is not answering; retry later', { retryAfter }),
      );
    }

    if (key !== undefined) {
      const fingerprint = requestFingerprint(call, callbackUrl);
      let claim: KeyClaim | undefined;
      try {
        claim = await store.claimKey(key, { callId: call.id, fingerprint }, resultTtl);
      } catch (error) {
        return refuse(storeFailure(error));
      }
      if (claim) {
        if (claim.fingerprint !== fingerprint) {
          return refuse(
            new IdempotencyKeyReusedError(
              `Idempotency-Key ${JSON.stringify(given)} was already used with a different request`,
            ),
          );
        }
        const first = await calls.status(claim.callId).catch(() => undefined);
        // Claimed and not yet recorded, or recorded and waiting for a runner: either way being placed.
        if (!first || first.status === 'queued') {
          return refuse(
            new IdempotencyInProgressError(
              `the first call with Idempotency-Key ${JSON.stringify(given)} is still being placed; retry shortly`,
            ),
          );
        }
        return { kind: 'replay', record: first };
      }
    }

    // A replay needs no room; a new call does, for its result: in its client key's storedBytes
    // (`room`, reserved until the call's lifetime end, which the key's call gives back or settles
    // at its end), and in the store (reserved with the record).
    const keyRefusal = await room?.(calls.resultRoom, calls.lifetimeEnd(call));
    if (keyRefusal) {
      if (key !== undefined) await store.releaseKey(key, call.id).catch(() => {});
      return refuse(keyRefusal);
    }
    if (admission.kind === 'full') {
      if (key !== undefined) await store.releaseKey(key, call.id).catch(() => {});
      return refuse(storeFullRefusal(admission.storedBytes, admission.maxStoredBytes, admission.needed, retryAfter));
    }

    try {
      return { kind: 'queued', record: await calls.queue(call, run.controller, { callbackUrl, idempotencyKey: key }) };
    } catch (error) {
      if (key !== undefined) await store.releaseKey(key, call.id).catch(() => {});
      if (error instanceof StoreFullError)
        return refuse(storeFullRefusal(error.storedBytes, error.maxStoredBytes, error.bytes, retryAfter));
      return refuse(
        error instanceof StoreInvalidRecordError
          ? error
          : new DetachedStoreUnavailableError(
              'the detached-call store did not take the call; nothing ran; retry later',
              { cause: error, retryAfter },
            ),
      );
    }
  }

  /**
   * A queued call no runner took (the agent answered its client already, unless a cancel
   * stopped it): frees its Idempotency-Key and ends its record. A cancel stopped the placement
   * while the client still waits: it gets the record, cancelled.
   */
  async unplaced(
    queued: CallRecord,
    run: DetachedSignal,
    error: Error | undefined,
    reply: DetachedReply,
  ): Promise<void> {
    const { calls, store } = this.#settings;
    if (queued.idempotencyKey !== undefined) await store.releaseKey(queued.idempotencyKey, queued.id).catch(() => {});
    const { clientGone } = run;
    const cancelled = run.signal.aborted && !clientGone.aborted;
    calls.unplaced(
      queued,
      clientGone.aborted
        ? { kind: 'client-left' }
        : cancelled
          ? { kind: 'cancelled' }
          : { kind: 'failed', error: error ?? new Error('not placed') },
    );
    if (cancelled) {
      const record = await calls.status(queued.id).catch(() => undefined);
      await this.answer(record ?? queued, reply);
    }
  }

  /**
   * Answers the client: 202 with the status monitor, or the whole result when it arrives within
   * wait=N. `done` is the call's end when it runs here; without it (a replay) the store is polled.
   */
  async answer(record: CallRecord, reply: DetachedReply, done?: Promise<DetachedOutcome>): Promise<void> {
    const { out, headers, preference } = reply;
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
      const result = await this.#settings.store.getResult(current.id).catch(() => undefined);
      if (result) {
        out.writeHead(result.status, {
          ...headers,
          'content-type': result.contentType,
          'preference-applied': `wait=${preference.waitSeconds}`,
        });
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
    const { calls, clock } = this.#settings;
    const until = clock.now() + timeout;
    for (;;) {
      const record = await calls.status(id).catch(() => undefined);
      if (!record || !LIVE_STATUSES.has(record.status) || clock.now() >= until) return record;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
}

/** How a detached call that `runner` committed to ended, for the agent's counters and after-call listeners. */
export function detachedResult(outcome: DetachedOutcome, runner: string): CallResult {
  const { record, totalMs, execMs } = outcome;
  return {
    outcome: OUTCOMES[record.status],
    status: 202,
    runner,
    totalMs,
    latencyMs: totalMs - (execMs ?? 0),
    ...(execMs === undefined ? {} : { execMs }),
    ...(record.error && record.status !== 'succeeded' ? { error: new RecordedError(record.error) } : {}),
  };
}

/** The refusal of a new detached call for want of room for its result in the store. */
function storeFullRefusal(
  storedBytes: number,
  maxStoredBytes: number,
  needed: number,
  retryAfter: number,
): DetachedStoreFullError {
  return new DetachedStoreFullError(
    `the detached-call store is full (${storedBytes} of maxStoredBytes ${maxStoredBytes} bytes hold results until their TTL ends, or are reserved for calls running; a new call needs room for ${needed}); retry later`,
    retryAfter,
  );
}

function single(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}
