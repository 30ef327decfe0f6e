/**
 * Detached calls after placement: the record in the store, the background read of the
 * runner's answer into a stored result, cancel, the lifetime limit, and the callback.
 *
 * A detached call is committed when a runner answers 202; from then on it runs on a background
 * signal (cancel, lifetime), not on the client's connection, which may close at once.
 */
import { createHash } from 'node:crypto';
import { metrics } from '@opentelemetry/api';
import type { MeterProvider } from '@opentelemetry/api';
import type { Logger } from '../placer/log.ts';
import type { Clock } from '../placer/types.ts';
import { ERROR_TRAILER, EXEC_TRAILER, RESULT_STATUS_TRAILER, RESULT_TYPE_TRAILER, parseExecTiming } from '../runner/protocol.ts';
import type { GatewayCall } from './call.ts';
import type { RunnerResponse } from './http-runner.ts';
import { createStoreMetrics } from './metrics.ts';
import type { StoreMetrics } from './metrics.ts';
import { StoreFullError, StoreInvalidRecordError } from './store/errors.ts';
import { RECORD_OVERHEAD_BYTES } from './store/options.ts';
import { FINAL_STATUSES } from './store/types.ts';
import type { CallError, CallFinish, CallRecord, CallStore, StoredResult } from './store/types.ts';

/** How the gateway delivers a finished call to its callback URL; see gateway/callbacks. */
export interface CallbackDelivery {
  /** Resolves when `url` may be called back; rejects with a 4xx SluiceError saying why not. */
  check(url: string): Promise<unknown>;
  /** Delivers `payload`, retrying as it sees fit; never rejects. */
  send(delivery: { id: string; url: string; payload: object }): Promise<unknown>;
}

/** Settings of the detached-call machinery. */
export interface DetachedSettings {
  store: CallStore;
  /** This gateway's id, the owner of the calls it runs. */
  gatewayId: string;
  /** How long finished results (and idempotency keys) are kept, in ms. */
  resultTtl: number;
  /** Largest result stored; a larger one fails the call with GW_RESULT_TOO_LARGE. */
  maxResultBytes: number;
  /** Added to detachedPlacerTimeout + the call's timeout to make its background lifetime, in ms. */
  executionHeadroom: number;
  detachedPlacerTimeout: number;
  callbacks: CallbackDelivery | undefined;
  logger: Logger;
  clock: Clock;
  /** Where the store's instruments are created. @default the global meter provider */
  meterProvider?: MeterProvider;
}

/**
 * Whether the store can take a new detached call: it answers and has room for one more result
 * of the largest size (maxResultBytes), so no runner works on a result that could not be kept.
 */
export type StoreAdmission =
  | { kind: 'open' }
  | { kind: 'unavailable'; reason: string }
  | { kind: 'full'; storedBytes: number; maxStoredBytes: number; needed: number };

/** How a detached call ended, for the agent's counters. */
export interface DetachedOutcome {
  record: CallRecord;
  totalMs: number;
  execMs: number | undefined;
}

/** A call running in the background on this gateway. */
interface Running {
  controller: AbortController;
  done: Promise<DetachedOutcome>;
}

/** Past its lifetime plus this, a running call owned by another gateway is presumed lost. */
export const OWNER_GRACE_MS = 5000;

/** First pause before a store write that failed is tried again; doubled each time up to the cap. */
const WRITE_RETRY_BASE_MS = 250;
const WRITE_RETRY_CAP_MS = 5000;
/** A call that finishes near the end of its lifetime still gets this long to have its end written. */
const MIN_WRITE_WINDOW_MS = 30_000;

/** One way of ending a call: what is written, with the result when there is one. */
interface Ending {
  finish: CallFinish;
  result?: StoredResult | undefined;
}

/** What became of writing a call's end. */
type Written =
  /** The store holds it; `late` when an earlier attempt that timed out had landed after all. */
  | (Ending & { kind: 'stored'; attempts: number; late: boolean })
  /** The call was already final (a cancel won, another gateway failed it) or is gone from the store. */
  | { kind: 'taken'; record: CallRecord | undefined }
  /** The store answered no: the result does not fit, or the record is not one it takes. */
  | { kind: 'refused'; error: StoreFullError | StoreInvalidRecordError }
  /** The store did not answer within the call's lifetime, or the gateway is shutting down. */
  | { kind: 'gave-up'; error: unknown; attempts: number };

/** The digest an Idempotency-Key's payload is compared by: method, path, callback URL and body. */
export function requestFingerprint(call: Pick<GatewayCall, 'method' | 'path' | 'body'>, callbackUrl = ''): string {
  // The callback URL is part of what was asked: a replay naming another one is another request.
  return createHash('sha256').update(`${call.method} ${call.path}\n${callbackUrl}\n`).update(call.body).digest('base64url');
}

/** Detached calls owned by one gateway, and the status/result/cancel views of all of them. */
export class DetachedCalls {
  readonly #s: DetachedSettings;
  readonly #running = new Map<string, Running>();
  readonly #metrics: StoreMetrics;
  /** Aborted when the gateway drains: store writes still retrying give up. */
  readonly #stopping = new AbortController();
  /** Whether the last admission found the store full, to log the change and not every refusal. */
  #full = false;

  constructor(settings: DetachedSettings) {
    this.#s = settings;
    this.#metrics = createStoreMetrics(settings.meterProvider ?? metrics.getMeterProvider(), () => settings.store.health());
  }

  /** Subscribes to cancels other gateways route here. */
  async start(): Promise<void> {
    await this.#s.store.onCancel(this.#s.gatewayId, (id) => this.#running.get(id)?.controller.abort(cancelled()));
  }

  /** Calls running in the background on this gateway. */
  get runningCount(): number {
    return this.#running.size;
  }

  /**
   * Whether a new detached call may start, from the store's health check (cached by the store
   * for about a second): refusing here, at once, spares the client a wait for a store that does
   * not answer and the runner work on a result that could not be kept.
   */
  async admission(): Promise<StoreAdmission> {
    // health() never rejects by contract; a custom store that breaks it counts as not answering.
    const health = await this.#s.store.health().catch((error: unknown) => ({ ok: false as const, reason: String((error as Error)?.message ?? error) }));
    if (!health.ok) return { kind: 'unavailable', reason: health.reason };
    const { storedBytes, maxStoredBytes } = health;
    const needed = this.#s.maxResultBytes + RECORD_OVERHEAD_BYTES;
    const full = maxStoredBytes - storedBytes < needed;
    if (full !== this.#full) {
      this.#full = full;
      if (full) this.#s.logger.warn('detached-call store full, refusing new detached calls', { storedBytes, maxStoredBytes, needed });
      else this.#s.logger.info('detached-call store has room again', { storedBytes, maxStoredBytes });
    }
    return full ? { kind: 'full', storedBytes, maxStoredBytes, needed } : { kind: 'open' };
  }

  /**
   * Records a call a runner has just committed to (its 202 arrived) and starts reading the
   * runner's answer in the background. `controller` is the call's background signal.
   */
  async accept(
    call: GatewayCall,
    response: RunnerResponse,
    runner: string,
    controller: AbortController,
    { callbackUrl, idempotencyKey }: { callbackUrl?: string | undefined; idempotencyKey?: string | undefined } = {},
  ): Promise<{ record: CallRecord; done: Promise<DetachedOutcome> }> {
    const { clock, store } = this.#s;
    const now = clock.now();
    const expiresAt = call.createdAt + this.#s.detachedPlacerTimeout + call.timeout + this.#s.executionHeadroom;
    const record: CallRecord = {
      id: call.id,
      fn: call.fn,
      status: 'running',
      createdAt: call.createdAt,
      startedAt: now,
      runner,
      delayMs: now - call.createdAt,
      owner: this.#s.gatewayId,
      expiresAt,
      ...(callbackUrl ? { callbackUrl } : {}),
      ...(idempotencyKey ? { idempotencyKey } : {}),
    };
    try {
      await store.create(record);
    } catch (error) {
      // The runner has the call but we cannot keep its result: stop it rather than run it blind.
      controller.abort(error);
      await response.body.dump().catch(() => {});
      // The record may be there all the same (its answer was lost); a taken id is another call's.
      if (!(error instanceof StoreInvalidRecordError)) {
        this.#repair(record, error).catch((failure: unknown) => this.#s.logger.error('detached record repair failed', { call: call.id, error: failure as Error }));
      }
      throw error;
    }
    const lifetime = setTimeout(() => controller.abort(expired(expiresAt)), Math.max(0, expiresAt - now));
    lifetime.unref();
    const done = this.#consume(call, record, response, controller).finally(() => {
      clearTimeout(lifetime);
      this.#running.delete(call.id);
    });
    this.#running.set(call.id, { controller, done });
    return { record, done };
  }

  /** The call's record, after marking a call whose owner vanished as failed. */
  async status(id: string): Promise<CallRecord | undefined> {
    const record = await this.#s.store.get(id);
    if (!record || record.status !== 'running') return record;
    const now = this.#s.clock.now();
    if (this.#running.has(id) || now <= record.expiresAt + OWNER_GRACE_MS) return record;
    const finish: CallFinish = {
      status: 'failed',
      completedAt: now,
      error: {
        code: 'GW_OWNER_LOST',
        message: `gateway ${record.owner} was running this call and did not finish it within its lifetime; it is presumed gone`,
      },
    };
    if (await this.#s.store.finish(id, finish)) this.#notify({ ...record, ...finish }, undefined);
    return (await this.#s.store.get(id)) ?? record;
  }

  /** Cancels a running call wherever it runs; resolves with the record after, or undefined when unknown. */
  async cancel(id: string): Promise<CallRecord | undefined> {
    const record = await this.status(id);
    if (!record || FINAL_STATUSES.has(record.status)) return record;
    const { store, clock } = this.#s;
    const reason = cancelled();
    const finish: CallFinish = { status: 'cancelled', completedAt: clock.now(), error: { code: reason.code, message: reason.message } };
    // Whoever ends the call tells the callback: here the cancel did, so the owner will not.
    if (await store.finish(id, finish)) this.#notify({ ...record, ...finish }, undefined);
    const local = this.#running.get(id);
    if (local) local.controller.abort(reason);
    else await store.requestCancel(id, record.owner);
    return store.get(id);
  }

  /**
   * Waits up to `timeout` ms for calls running here to finish; then aborts the rest, and stops
   * retrying store writes (the store closes next).
   */
  async drain(timeout: number): Promise<void> {
    const all = [...this.#running.values()];
    if (all.length === 0) return this.#stopping.abort();
    let timer: NodeJS.Timeout | undefined;
    const finished = Promise.allSettled(all.map((r) => r.done));
    const late = new Promise<'late'>((resolve) => (timer = setTimeout(() => resolve('late'), timeout)));
    if ((await Promise.race([finished, late])) === 'late') {
      for (const r of this.#running.values()) r.controller.abort(shutdown());
      this.#stopping.abort();
      await finished;
    }
    clearTimeout(timer);
    this.#stopping.abort();
  }

  /** POSTs a finished call to its callback URL, when it has one and callbacks are configured. */
  #notify(record: CallRecord, result: StoredResult | undefined): void {
    if (record.callbackUrl && this.#s.callbacks) {
      void this.#s.callbacks.send({ id: record.id, url: record.callbackUrl, payload: callbackPayload(record, result) });
    }
  }

  async #consume(call: GatewayCall, record: CallRecord, response: RunnerResponse, controller: AbortController): Promise<DetachedOutcome> {
    const { clock, maxResultBytes } = this.#s;
    const chunks: Buffer[] = [];
    let size = 0;
    let failure: CallError | undefined;
    let status: CallFinish['status'] = 'failed';
    try {
      for await (const chunk of response.body as AsyncIterable<Buffer>) {
        size += chunk.length;
        if (size > maxResultBytes) {
          failure = { code: 'GW_RESULT_TOO_LARGE', message: `the result is larger than maxResultBytes (${maxResultBytes} bytes); it was not kept` };
          controller.abort(new Error(failure.message));
          break;
        }
        chunks.push(chunk);
      }
    } catch (error) {
      const reason = controller.signal.reason as { code?: string; message?: string } | undefined;
      failure = controller.signal.aborted && reason?.code
        ? { code: reason.code, message: reason.message ?? '' }
        : { code: 'GW_RUNNER_FAILED_AFTER_COMMIT', message: `runner ${record.runner} failed after it took the call: ${(error as Error).message}` };
      if (reason?.code === 'GW_CALL_EXPIRED') status = 'expired';
    }
    const trailers = response.trailers;
    const execMs = parseExecTiming(trailers[EXEC_TRAILER]);
    let result: StoredResult | undefined;
    if (!failure) {
      const resultStatus = Number(trailers[RESULT_STATUS_TRAILER]) || 502;
      result = { status: resultStatus, contentType: String(trailers[RESULT_TYPE_TRAILER] ?? 'application/octet-stream'), body: Buffer.concat(chunks, size) };
      const reported = trailers[ERROR_TRAILER];
      if (reported !== undefined) {
        failure = reportedFailure(String(reported), record.runner);
        if (String(reported) === 'RUNNER_ENGINE_TIMEOUT') status = 'expired';
        // A body cut short under a success status is not a result: keep only the runner's own
        // error answers (status >= 400), which explain the failure.
        if (resultStatus < 400) result = undefined;
      } else if (resultStatus >= 400) failure = { code: 'GW_ENGINE_ERROR', message: `the engine answered ${resultStatus}` };
      else status = 'succeeded';
    }
    const completedAt = clock.now();
    const finish: CallFinish = { status, completedAt, ...(execMs === undefined ? {} : { executionMs: execMs }), ...(failure ? { error: failure } : {}) };
    const written = await this.#settle(record, { finish, result });
    const totalMs = completedAt - call.startedAt;
    if (written.kind === 'stored') {
      const final = { ...record, ...written.finish };
      this.#notify(final, written.result);
      return { record: final, totalMs, execMs };
    }
    return { record: (written.kind === 'taken' ? written.record : undefined) ?? { ...record, ...finish }, totalMs, execMs };
  }

  /**
   * Writes how a call ended and logs what really became of it. A result the store refuses (no
   * room) is replaced by the reason, so the call still ends with one; a write the store did not
   * answer is retried until the call's lifetime ends (#write).
   */
  async #settle(record: CallRecord, ending: Ending): Promise<Written> {
    const log = this.#s.logger.child({ call: record.id });
    const deadline = Math.max(record.expiresAt, ending.finish.completedAt + MIN_WRITE_WINDOW_MS);
    const uncertain: Ending[] = [];
    let written = await this.#write(record.id, ending, deadline, uncertain);
    if (written.kind === 'refused') {
      const { error } = written;
      let reason: CallError;
      if (error instanceof StoreFullError) {
        this.#metrics.resultsRefused.add(1);
        log.warn('detached result refused, store full', { bytes: error.bytes, storedBytes: error.storedBytes, maxStoredBytes: error.maxStoredBytes });
        reason = {
          code: 'GW_STORE_FULL',
          message: `the call finished but its result (${error.bytes} bytes with its record) did not fit in the detached-call store (${error.storedBytes} of maxStoredBytes ${error.maxStoredBytes} in use until results expire); it was not kept`,
        };
      } else {
        log.error('detached result refused by the store', { error });
        reason = { code: 'GW_RESULT_NOT_STORED', message: `the store refused the result: ${error.message}` };
      }
      const { executionMs, completedAt } = ending.finish;
      const failed: CallFinish = { status: 'failed', completedAt, ...(executionMs === undefined ? {} : { executionMs }), error: reason };
      written = await this.#write(record.id, { finish: failed }, deadline, uncertain);
    }
    if (written.kind === 'stored' && written.late) log.info('detached result stored by an earlier attempt that timed out', { status: written.finish.status });
    else if (written.kind === 'stored' && written.attempts > 1) log.info('detached result stored after retrying', { status: written.finish.status, attempts: written.attempts });
    else if (written.kind === 'taken' && !written.record) log.warn('detached call gone from the store, its end not recorded', { status: ending.finish.status });
    else if (written.kind === 'refused' || written.kind === 'gave-up') {
      log.error('detached result not stored', { status: ending.finish.status, error: written.error as Error, ...(written.kind === 'gave-up' ? { attempts: written.attempts } : {}) });
    }
    return written;
  }

  /**
   * Fails the record of a call whose create failed, in case it is there all the same: its answer
   * was lost, or it reached the store after we gave up on it. Once the store answers again the
   * compare-and-set finish changes a record only while it is still `running`, and finds nothing
   * when the write never landed, which is the usual case.
   */
  async #repair(record: CallRecord, cause: unknown): Promise<void> {
    const finish: CallFinish = {
      status: 'failed',
      completedAt: this.#s.clock.now(),
      error: {
        code: 'GW_STORE_UNAVAILABLE',
        message: `the store did not confirm this call's record in time (${(cause as Error).message}); the client was answered 503 and the runner's work was stopped`,
      },
    };
    const deadline = Math.max(record.expiresAt, finish.completedAt + MIN_WRITE_WINDOW_MS);
    const written = await this.#write(record.id, { finish }, deadline, []);
    const log = this.#s.logger.child({ call: record.id });
    if (written.kind === 'stored') log.warn('detached record written after its call was refused, now failed', {});
    else if (written.kind !== 'taken') log.warn('detached record not repaired', { error: written.error as Error });
  }

  /**
   * Writes a call's end. A store that does not answer is asked again, with backoff and only
   * once its health check passes (another write would only queue behind the last), until
   * `deadline` or shutdown. An attempt that failed may still have landed, so a later "already
   * final" is checked against `uncertain`: it may be our own write.
   */
  async #write(id: string, ending: Ending, deadline: number, uncertain: Ending[]): Promise<Written> {
    const { clock, store } = this.#s;
    for (let attempts = 1; ; attempts++) {
      try {
        if (await store.finish(id, ending.finish, ending.result)) return { kind: 'stored', ...ending, attempts, late: false };
        const current = await store.get(id);
        const landed = current && uncertain.find(({ finish }) => sameEnd(current, finish));
        return landed ? { kind: 'stored', ...landed, attempts, late: true } : { kind: 'taken', record: current };
      } catch (error) {
        if (error instanceof StoreFullError || error instanceof StoreInvalidRecordError) return { kind: 'refused', error };
        if (!uncertain.includes(ending)) uncertain.push(ending);
        if (attempts === 1) this.#s.logger.warn('store write failed, retrying', { call: id, status: ending.finish.status, error: error as Error });
        if (this.#stopping.signal.aborted || clock.now() >= deadline) return { kind: 'gave-up', error, attempts };
        await this.#pause(attempts, deadline);
      }
    }
  }

  /** Backs off after failed attempt `attempt`, then waits for the store to pass a health check. */
  async #pause(attempt: number, deadline: number): Promise<void> {
    const { clock, store } = this.#s;
    for (let i = attempt; ; i++) {
      const pause = Math.min(WRITE_RETRY_BASE_MS * 2 ** Math.min(i - 1, 16), WRITE_RETRY_CAP_MS, Math.max(0, deadline - clock.now()));
      try {
        await clock.sleep(pause, this.#stopping.signal);
      } catch {
        return; // shutting down: one last attempt, then give up
      }
      // A custom store whose health() breaks its contract and rejects does not hold writes up.
      if (clock.now() >= deadline || (await store.health().catch(() => ({ ok: true }))).ok) return;
    }
  }
}

/** The error a detached call's record gets for a code its runner reported; the same codes a sync client sees. */
function reportedFailure(code: string, runner: string | undefined): CallError {
  if (code === 'RUNNER_ENGINE_TIMEOUT') return { code: 'GW_CALL_TIMEOUT', message: `runner ${runner} stopped the call at its deadline (${code})` };
  return { code: 'GW_RUNNER_FAILED_AFTER_COMMIT', message: `runner ${runner} reported ${code} after it took the call; it was not retried because it may have run` };
}

/** Whether `record` ended as `finish` says: the same status, time and reason. */
function sameEnd(record: CallRecord, finish: CallFinish): boolean {
  return record.status === finish.status && record.completedAt === finish.completedAt && record.error?.code === finish.error?.code;
}

/** What a callback receiver gets: the call's status and its result, text as text. */
export function callbackPayload(record: CallRecord, result: StoredResult | undefined): object {
  const textual = result && /^(text\/[^;]*|application\/(json|[^;]*\+json))\s*(;|$)/.test(result.contentType);
  return {
    id: record.id,
    fn: record.fn,
    status: record.status,
    createdAt: record.createdAt,
    completedAt: record.completedAt,
    ...(record.error ? { error: record.error } : {}),
    ...(result
      ? {
          result: {
            status: result.status,
            contentType: result.contentType,
            ...(textual ? { body: result.body.toString('utf8') } : { bodyBase64: result.body.toString('base64') }),
          },
        }
      : {}),
  };
}

/** An abort reason carrying the code the call's record gets. */
class CallStop extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

const cancelled = () => new CallStop('GW_CALL_CANCELLED', 'the call was cancelled');
const expired = (at: number) => new CallStop('GW_CALL_EXPIRED', `the call outlived its lifetime (until ${new Date(at).toISOString()})`);
const shutdown = () => new CallStop('GW_SHUTTING_DOWN', 'the gateway shut down before the call finished');
