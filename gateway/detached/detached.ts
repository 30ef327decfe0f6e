/**
 * The background side of detached calls (their orchestrator is detached-run.ts): the record
 * written `queued` before placement, the run when a runner commits (the record `running`, the
 * background read of the runner's answer into a stored result), cancel, the lifetime limit, and
 * the callback.
 *
 * The record comes first so that a store failing at the wrong moment can never leave work
 * running that the client was told to retry: a create that fails refuses the call before any
 * runner sees it, and once a runner has it, a store failure no longer stops it.
 *
 * A detached call is committed when a runner answers 202; from then on it runs on a background
 * signal (cancel, lifetime), not on the client's connection, which may close at once.
 */
import { createHash } from 'node:crypto';
import { metrics } from '@opentelemetry/api';
import type { MeterProvider } from '@opentelemetry/api';
import { SluiceError } from '../../placer/kernel/index.ts';
import type { Logger, Clock } from '../../placer/kernel/index.ts';
import { PlacerAbortedError } from '../../placer/errors.ts';
import {
  ERROR_TRAILER,
  EXEC_TRAILER,
  RESULT_STATUS_TRAILER,
  RESULT_TYPE_TRAILER,
  parseExecTiming,
} from '../../runner/protocol/index.ts';
import type { GatewayCall } from '../http/index.ts';
import { committedFailure } from '../fleet/index.ts';
import type { RunnerResponse } from '../fleet/index.ts';
import { asCallError, cancelled, expired, placementError, recordError, shutdown } from './detached-reasons.ts';
import {
  CallCancelledError,
  CallExpiredError,
  EngineErrorStatusError,
  OwnerLostError,
  RecordedError,
  ResultTooLargeError,
  runnerReported,
} from '../errors.ts';
import { EndWriter } from './detached-writes.ts';
import { stripInjectedUsage } from '../access/index.ts';
import type { GatewayConfig } from '../options.ts';
import type { CallbackDelivery } from '../callbacks/index.ts';
import { createStoreMetrics } from '../observe/index.ts';
import type { DetachedCounts } from '../observe/index.ts';
import {
  StoreFullError,
  StoreInvalidRecordError,
  RECORD_OVERHEAD_BYTES,
  FINAL_STATUSES,
  LIVE_STATUSES,
} from '../store/index.ts';
import type { CallError, CallFinish, CallRecord, CallStart, CallStore, StoredResult } from '../store/index.ts';

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
  /** The result the store kept, when it kept one (for the client key's usage and stored bytes). */
  result?: StoredResult;
  /** The engine's answer as it came, when the stored result is not it (the injected usage taken out): its usage. */
  answer?: Buffer;
}

/** A call running in the background on this gateway. */
interface Running {
  controller: AbortController;
  done: Promise<DetachedOutcome>;
  /** The record as this gateway knows it: `running`, whether or not the store heard so. */
  record: CallRecord;
}

/** What a detached call's record is made from, besides the call itself. */
export interface DetachedExtras {
  callbackUrl?: string | undefined;
  idempotencyKey?: string | undefined;
}

/** How a placement that no runner took ended, for its record. */
export type Unplaced = { kind: 'client-left' } | { kind: 'cancelled' } | { kind: 'failed'; error: Error };

/** Past its lifetime plus this, a running call owned by another gateway is presumed lost. */
const OWNER_GRACE_MS = 5000;

/** The digest an Idempotency-Key's payload is compared by: method, path, callback URL and body. */
export function requestFingerprint(call: Pick<GatewayCall, 'method' | 'path' | 'body'>, callbackUrl = ''): string {
  // The callback URL is part of what was asked: a replay naming another one is another request.
  return createHash('sha256')
    .update(`${call.method} ${call.path}\n${callbackUrl}\n`)
    .update(call.body)
    .digest('base64url');
}

/** Detached calls owned by one gateway, and the status/result/cancel views of all of them. */
export class DetachedCalls {
  readonly #settings: DetachedSettings;
  readonly #running = new Map<string, Running>();
  /** Background signals of calls this gateway is placing (recorded `queued`), for cancels. */
  readonly #placing = new Map<string, AbortController>();
  readonly #writer: EndWriter;
  /** Aborted when the gateway drains: store writes still retrying give up. */
  readonly #stopping = new AbortController();
  /** Whether the last admission found the store full, to log the change and not every refusal. */
  #full = false;
  /** Calls this gateway accepted, and those whose end it wrote, by final status, since it started. */
  readonly #counts = { accepted: 0, succeeded: 0, failed: 0, cancelled: 0, expired: 0 };

  constructor(settings: DetachedSettings) {
    this.#settings = settings;
    const { store, clock, logger } = settings;
    const storeMetrics = createStoreMetrics(settings.meterProvider ?? metrics.getMeterProvider(), () => store.health());
    this.#writer = new EndWriter({ store, clock, logger, metrics: storeMetrics, stopping: this.#stopping.signal });
  }

  /** The detached calls of a gateway with this config, logging to `logger`. */
  static forGateway(config: GatewayConfig, logger: Logger): DetachedCalls {
    return new DetachedCalls({
      store: config.store,
      gatewayId: config.gatewayId,
      resultTtl: config.resultTtl,
      maxResultBytes: config.maxResultBytes,
      executionHeadroom: config.executionHeadroom,
      detachedPlacerTimeout: config.placerConfig.detachedPlacerTimeout,
      callbacks: config.callbacks,
      logger,
      clock: config.clock,
      meterProvider: config.meterProvider,
    });
  }

  /** Subscribes to cancels other gateways route here. */
  async start(): Promise<void> {
    await this.#settings.store.onCancel(this.#settings.gatewayId, (id) => this.#local(id)?.abort(cancelled()));
  }

  /** Calls running in the background on this gateway. */
  get runningCount(): number {
    return this.#running.size;
  }

  /**
   * This gateway's detached calls by status: being placed and running now, and since it started,
   * accepted and ended by final status (the ends it wrote: its own calls', and the cancels and
   * presumed-lost owners it settled). Other gateways' calls on a shared store are theirs to count.
   */
  counts(): DetachedCounts {
    return { queued: this.#placing.size, running: this.#running.size, ...this.#counts };
  }

  /**
   * Whether a new detached call may start, from the store's health check (cached by the store
   * for about a second): refusing here, at once, spares the client a wait for a store that does
   * not answer and the runner work on a result that could not be kept.
   */
  async admission(): Promise<StoreAdmission> {
    // health() never rejects by contract; a custom store that breaks it counts as not answering.
    const health = await this.#settings.store
      .health()
      .catch((error: unknown) => ({ ok: false as const, reason: String((error as Error)?.message ?? error) }));
    if (!health.ok) return { kind: 'unavailable', reason: health.reason };
    const { storedBytes, maxStoredBytes } = health;
    const needed = this.#settings.maxResultBytes + RECORD_OVERHEAD_BYTES;
    const full = maxStoredBytes - storedBytes < needed;
    if (full !== this.#full) {
      this.#full = full;
      if (full)
        this.#settings.logger.warn('detached-call store full, refusing new detached calls', {
          storedBytes,
          maxStoredBytes,
          needed,
        });
      else this.#settings.logger.info('detached-call store has room again', { storedBytes, maxStoredBytes });
    }
    return full ? { kind: 'full', storedBytes, maxStoredBytes, needed } : { kind: 'open' };
  }

  /** The most a detached call's result takes in the store: the largest result with its record. */
  get resultRoom(): number {
    return this.#settings.maxResultBytes + RECORD_OVERHEAD_BYTES;
  }

  /** The end of `call`'s background lifetime, ms since the epoch: its record's expiresAt. */
  lifetimeEnd(call: Pick<GatewayCall, 'createdAt' | 'timeout'>): number {
    return call.createdAt + this.#settings.detachedPlacerTimeout + call.timeout + this.#settings.executionHeadroom;
  }

  /**
   * Records a call about to be placed, `queued`, with no runner yet. `controller` is the call's
   * background signal, aborted by a cancel while the call waits for a runner. Rejects with the
   * store's error (StoreFullError when the room for its result cannot be reserved), and then
   * nothing may be placed: the client is told to retry.
   */
  async queue(
    call: GatewayCall,
    controller: AbortController,
    { callbackUrl, idempotencyKey }: DetachedExtras = {},
  ): Promise<CallRecord> {
    const record: CallRecord = {
      id: call.id,
      fn: call.fn,
      status: 'queued',
      createdAt: call.createdAt,
      owner: this.#settings.gatewayId,
      expiresAt: this.lifetimeEnd(call),
      ...(call.client === undefined ? {} : { client: call.client }),
      ...(callbackUrl ? { callbackUrl } : {}),
      ...(idempotencyKey ? { idempotencyKey } : {}),
    };
    // Reachable by cancels from the moment the record may exist.
    this.#placing.set(call.id, controller);
    try {
      // With room for its largest result reserved in the store's bound, taken only if it fits,
      // so parallel calls cannot all be admitted against the same free bytes.
      await this.#settings.store.create(record, this.resultRoom);
      this.#counts.accepted++;
    } catch (error) {
      this.#placing.delete(call.id);
      // The record may be there all the same (its answer was lost); a taken id is another
      // call's, and a reservation refused for space wrote nothing.
      if (!(error instanceof StoreInvalidRecordError) && !(error instanceof StoreFullError)) {
        this.#writer
          .repair(record, error)
          .catch((failure: unknown) =>
            this.#settings.logger.error('detached record repair failed', { call: call.id, error: failure as Error }),
          );
      }
      throw error;
    }
    return record;
  }

  /**
   * Ends the record of a queued call no runner took: `cancelled` when its client left before
   * one did (PLACER_ABORTED) or a cancel stopped it, else `failed` with the placement's code.
   * The client has its answer already; the write is retried in the background while the store
   * does not answer, and its failure only logged. A cancel's own write, there first, stands.
   */
  unplaced(record: CallRecord, how: Unplaced): void {
    this.#placing.delete(record.id);
    const completedAt = this.#settings.clock.now();
    const error: CallError =
      how.kind === 'client-left'
        ? recordError(new PlacerAbortedError('the client went away before a runner took the call', 0))
        : how.kind === 'cancelled'
          ? recordError(cancelled())
          : placementError(how.error);
    const finish: CallFinish = { status: how.kind === 'failed' ? 'failed' : 'cancelled', completedAt, error };
    this.#writer
      .settle(record, { finish })
      .then((written) => {
        if (written.kind === 'stored') this.#counts[finish.status]++;
      })
      .catch((error: unknown) =>
        this.#settings.logger.error('detached record not ended', { call: record.id, error: error as Error }),
      );
  }

  /**
   * Runs a queued call a runner has just committed to (its 202 arrived): the call's signal is
   * committed (the client leaving no longer stops it), the record moves to `running`, and the
   * runner's answer is read in the background. A store that does not take the start does not
   * stop the call: it runs on, and its end, written when the store answers again, carries the start.
   */
  async run(
    queued: CallRecord,
    call: GatewayCall,
    response: RunnerResponse,
    runner: string,
    signal: { readonly controller: AbortController; commit(): void },
    { stripUsage = false }: { stripUsage?: boolean } = {},
  ): Promise<{ record: CallRecord; done: Promise<DetachedOutcome> }> {
    signal.commit();
    const { controller } = signal;
    const { clock, store, logger } = this.#settings;
    const now = clock.now();
    const start: CallStart = { runner, startedAt: now, delayMs: now - call.createdAt };
    const record: CallRecord = { ...queued, status: 'running', ...start };
    let confirmed = false;
    // What the client is shown: the record, or the final one a cancel that won the race wrote.
    let shown = record;
    try {
      confirmed = await store.start(call.id, start);
      if (!confirmed) shown = (await this.#notQueued(record, controller)) ?? record;
    } catch (error) {
      logger.warn('detached call start not recorded, running on', { call: call.id, runner, error: error as Error });
    }
    const { expiresAt } = record;
    const lifetime = setTimeout(() => controller.abort(expired(expiresAt)), Math.max(0, expiresAt - now));
    lifetime.unref();
    const done = this.#consume(call, record, response, controller, confirmed ? undefined : start, stripUsage).finally(
      () => {
        clearTimeout(lifetime);
        this.#running.delete(call.id);
      },
    );
    // In one step, so a cancel finds the call's signal in one map or the other.
    this.#placing.delete(call.id);
    this.#running.set(call.id, { controller, done, record });
    return { record: shown, done };
  }

  /**
   * A start the store refused: the record is no longer queued. A cancel that won the race
   * stops the call here, in case it found the signal too late, and the final record is
   * returned; a record gone from the store (Redis lost its data) leaves the call running, as
   * when the store does not answer.
   */
  async #notQueued(record: CallRecord, controller: AbortController): Promise<CallRecord | undefined> {
    const current = await this.#settings.store.get(record.id).catch(() => undefined);
    if (current && FINAL_STATUSES.has(current.status)) {
      controller.abort(
        current.error
          ? new RecordedError(current.error)
          : new CallCancelledError(`the call was ${current.status} before it started`),
      );
      return current;
    }
    this.#settings.logger.warn('detached call not queued in the store at its start, running on', {
      call: record.id,
      runner: record.runner,
      status: current?.status ?? 'gone',
    });
    return undefined;
  }

  /** The background signal of a call this gateway places or runs. */
  #local(id: string): AbortController | undefined {
    return this.#running.get(id)?.controller ?? this.#placing.get(id);
  }

  /**
   * The call's record, after marking a call whose owner vanished as failed. A call running here
   * whose start the store missed reads as this gateway knows it: `running`, with its runner.
   */
  async status(id: string): Promise<CallRecord | undefined> {
    const record = await this.#settings.store.get(id);
    if (!record || !LIVE_STATUSES.has(record.status)) return record;
    const local = this.#running.get(id);
    if (local) return record.status === 'queued' ? { ...local.record } : record;
    const now = this.#settings.clock.now();
    if (this.#placing.has(id) || now <= record.expiresAt + OWNER_GRACE_MS) return record;
    const doing = record.status === 'queued' ? 'placing' : 'running';
    const finish: CallFinish = {
      status: 'failed',
      completedAt: now,
      error: recordError(
        new OwnerLostError(
          `gateway ${record.owner} was ${doing} this call and did not finish it within its lifetime; it is presumed gone`,
        ),
      ),
    };
    if (await this.#settings.store.finish(id, finish)) this.#notify({ ...record, ...finish }, undefined);
    return (await this.#settings.store.get(id)) ?? record;
  }

  /**
   * Cancels a queued or running call wherever it is placed or runs; resolves with the record
   * after, or undefined when unknown.
   */
  async cancel(id: string): Promise<CallRecord | undefined> {
    const record = await this.status(id);
    if (!record || FINAL_STATUSES.has(record.status)) return record;
    const { store, clock } = this.#settings;
    const reason = cancelled();
    const finish: CallFinish = { status: 'cancelled', completedAt: clock.now(), error: recordError(reason) };
    // Whoever ends the call tells the callback: here the cancel did, so the owner will not.
    if (await store.finish(id, finish)) this.#notify({ ...record, ...finish }, undefined);
    const local = this.#local(id);
    if (local) local.abort(reason);
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
    if (record.status !== 'queued' && record.status !== 'running') this.#counts[record.status]++;
    if (record.callbackUrl && this.#settings.callbacks) {
      void this.#settings.callbacks.send({
        id: record.id,
        url: record.callbackUrl,
        payload: callbackPayload(record, result),
      });
    }
  }

  /** Reads the runner's answer and writes the call's end; `start` goes with it when the store missed it. */
  async #consume(
    call: GatewayCall,
    record: CallRecord,
    response: RunnerResponse,
    controller: AbortController,
    start: CallStart | undefined,
    stripUsage: boolean,
  ): Promise<DetachedOutcome> {
    const { clock, maxResultBytes } = this.#settings;
    const chunks: Buffer[] = [];
    let size = 0;
    let failure: CallError | undefined;
    let status: CallFinish['status'] = 'failed';
    try {
      for await (const chunk of response.body as AsyncIterable<Buffer>) {
        size += chunk.length;
        if (size > maxResultBytes) {
          failure = recordError(new ResultTooLargeError(maxResultBytes));
          controller.abort(new Error(failure.message));
          break;
        }
        chunks.push(chunk);
      }
    } catch (error) {
      // A stop of the gateway's own (cancel, lifetime, shutdown, a record ended elsewhere) is a
      // SluiceError carrying the record's code; anything else is the runner's failure.
      const reason: unknown = controller.signal.aborted ? controller.signal.reason : undefined;
      failure =
        reason instanceof SluiceError
          ? recordError(reason)
          : asCallError(committedFailure({ id: record.runner ?? 'unknown' }, error));
      if (reason instanceof CallExpiredError) status = 'expired';
    }
    const trailers = response.trailers;
    const execMs = parseExecTiming(trailers[EXEC_TRAILER]);
    let result: StoredResult | undefined;
    let answer: Buffer | undefined;
    if (!failure) {
      const resultStatus = Number(trailers[RESULT_STATUS_TRAILER]) || 502;
      const contentType = String(trailers[RESULT_TYPE_TRAILER] ?? 'application/octet-stream');
      answer = Buffer.concat(chunks, size);
      // The usage the gateway asked for on its own account is not the client's to read.
      const body = stripUsage && contentType.startsWith('text/event-stream') ? stripInjectedUsage(answer) : answer;
      result = { status: resultStatus, contentType, body };
      if (body === answer) answer = undefined;
      // A header when the runner refused the call outright (RUNNER_UNAUTHORIZED), before any 202.
      const reported = trailers[ERROR_TRAILER] ?? response.headers[ERROR_TRAILER];
      if (reported !== undefined) {
        // The call failed with the runner's own code, and what arrived is kept as its result:
        // the runner's error answer, or the part of the engine's body that came before the
        // failure, under the engine's status (docs/api.md: a 200 with a cut body is possible).
        failure = runnerReported(String(reported), record.runner).record;
      } else if (resultStatus >= 400) failure = recordError(new EngineErrorStatusError(resultStatus));
      else status = 'succeeded';
    }
    const completedAt = clock.now();
    const finish: CallFinish = {
      status,
      completedAt,
      ...(execMs === undefined ? {} : { executionMs: execMs }),
      ...(failure ? { error: failure } : {}),
      ...(start ? { start } : {}),
    };
    const written = await this.#writer.settle(record, { finish, result });
    const totalMs = completedAt - call.startedAt;
    if (written.kind === 'stored') {
      const final = { ...record, ...written.finish };
      this.#notify(final, written.result);
      return {
        record: final,
        totalMs,
        execMs,
        ...(written.result ? { result: written.result } : {}),
        ...(answer && written.result ? { answer } : {}),
      };
    }
    return {
      record: (written.kind === 'taken' ? written.record : undefined) ?? { ...record, ...finish },
      totalMs,
      execMs,
    };
  }
}

/** What a callback receiver gets: the call's status and its result, text as text. */
function callbackPayload(record: CallRecord, result: StoredResult | undefined): object {
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
