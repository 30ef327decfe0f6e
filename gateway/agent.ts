/**
 * The LB agent: Fn's call lifecycle over a pool of runners.
 *
 * front gate -> buffer the body (bounded, under the upload budget) -> maxInFlight -> parse
 * what placement needs -> overrider and before-call listeners -> startedAt -> the placement
 * walk -> relay the committed runner's response -> after-call listeners, counters and the net
 * latency.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { context, propagation, trace, SpanKind, SpanStatusCode } from '@opentelemetry/api';
import { SluiceError } from '../placer/kernel/index.ts';
import { PlacerAbortedError, PlacerTimeoutError } from '../placer/errors.ts';
import type { Runner } from '../placer/types.ts';
import { placeCall } from '../placer/walk.ts';
import { CALL_ID_HEADER } from '../runner/protocol.ts';
import { clientKey, UploadBudget } from './admission.ts';
import type { UploadAdmission } from './admission.ts';
import { readBody } from './body.ts';
import { affinityKey, parseInferenceBody, routedPath, uuidv7 } from './call.ts';
import type { CallRoute, GatewayCall } from './call.ts';
import {
  CallTimeoutError,
  InternalError,
  ListenerFailedError,
  InvalidPriorityError,
  OverloadedError,
  QueueFullError,
  ShuttingDownError,
  TooManyUploadsError,
  UnknownModelError,
  UploadsFullError,
  sendError,
} from './errors.ts';
import { clientRequestId } from './front.ts';
import { FLOW_HEADER, INVOKE_TYPE_HEADER, PRIORITY_HEADER, REQUEST_ID_HEADER, SESSION_HEADER, forwardable } from './headers.ts';
import { createGatewayMetrics } from './metrics.ts';
import type { DetachedCalls } from './detached.ts';
import { DetachedFlow, DetachedSignal, detachedResult } from './detached-flow.ts';
import type { DetachedReply } from './detached-flow.ts';
import type { RunnerResponse } from './http-runner.ts';
import type { CallResult, GatewayConfig } from './options.ts';
import { parsePreference } from './prefer.ts';
import type { CallPreference } from './prefer.ts';
import type { GatewayPool } from './pool.ts';
import { relay } from './relay.ts';
import { PRIORITIES, WaitQueue, isPriority } from './wait-queue.ts';
import type { Priority, Waiter } from './wait-queue.ts';

type MutableCall = { -readonly [K in keyof GatewayCall]: GatewayCall[K] };

/** How the placement walk ended: a runner committed, or the call ended and its client was answered. */
type Placed = { kind: 'placed'; response: RunnerResponse; runner: Runner<RunnerResponse> } | { kind: 'ended'; result: CallResult };

/** Where a call waits when every runner is busy: its priority class and its flow. */
interface Turn {
  readonly priority: Priority;
  readonly flow: string;
}

/** Longest flow key kept from a header or a body's `user`; longer ones are cut. */
const MAX_FLOW_LENGTH = 256;

/** Runs calls through their lifecycle; one per gateway. */
export class LbAgent {
  readonly #config: GatewayConfig;
  readonly #pool: GatewayPool;
  readonly #metrics;
  readonly #detached: DetachedCalls;
  readonly #detachedFlow: DetachedFlow;
  readonly #tracer = trace.getTracer('sluice-gateway');
  readonly #uploads: UploadBudget;
  readonly #queue: WaitQueue;
  #inFlight = 0;
  #closing = false;
  #drained: (() => void) | undefined;

  /**
   * `queue` is where calls wait while every runner is busy; the gateway shares it with its pool,
   * whose runners wake it. Without one, the agent keeps its own, woken by its fallback alone.
   */
  constructor(config: GatewayConfig, pool: GatewayPool, detached: DetachedCalls, queue?: WaitQueue) {
    this.#config = config;
    this.#pool = pool;
    this.#queue = queue ?? LbAgent.queueFor(config);
    this.#metrics = createGatewayMetrics(config.meterProvider);
    this.#uploads = new UploadBudget({ max: config.maxUploads, perClient: config.maxUploadsPerClient });
    this.#detached = detached;
    this.#detachedFlow = new DetachedFlow({
      calls: detached,
      store: config.store,
      callbacks: config.callbacks,
      clock: config.clock,
      resultTtl: config.resultTtl,
      retryAfter: config.retryAfter,
    });
  }

  /** A wait queue with the gateway's bounds and fallback. */
  static queueFor(config: GatewayConfig): WaitQueue {
    const { maxQueued, maxQueuedPerFlow, placerConfig, clock } = config;
    return new WaitQueue({ maxQueued, maxQueuedPerFlow, retryAllDelay: placerConfig.retryAllDelay, clock });
  }

  /** Calls waiting for a runner, for GET /v1/queue. */
  get queue(): WaitQueue {
    return this.#queue;
  }

  /** Calls placed or relayed: their body is buffered. Counted against maxInFlight. */
  get inFlight(): number {
    return this.#inFlight;
  }

  /** Request bodies being received. Counted against maxUploads, not maxInFlight. */
  get uploads(): number {
    return this.#uploads.size;
  }

  /** True while a new call would be refused with GW_UPLOADS_FULL, whoever sent it. */
  get uploadsFull(): boolean {
    return this.#uploads.full;
  }

  /** True once shutdown began: the front gate refuses new calls. */
  get closing(): boolean {
    return this.#closing;
  }

  /**
   * Closes the front gate; resolves when in-flight calls and the uploads admitted before are
   * done, or `timeout` ms passed.
   */
  drain(timeout: number): Promise<boolean> {
    this.#closing = true;
    if (this.#idle) return Promise.resolve(true);
    return new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => resolve(false), timeout);
      this.#drained = () => {
        clearTimeout(timer);
        resolve(true);
      };
    });
  }

  /**
   * Answers a request the HTTP front refused before it reached a route (a connection past its
   * client's limit), counted with the agent's own refusals.
   */
  refuse(out: ServerResponse, error: SluiceError, headers: Record<string, string> = {}): void {
    this.#refuse(out, error, headers);
  }

  /** Serves one call on `route`; `fn` is the /invoke path parameter. Never rejects. */
  async serve(route: CallRoute, fn: string | undefined, incoming: IncomingMessage, out: ServerResponse): Promise<void> {
    const { clock, maxInFlight, retryAfter } = this.#config;
    const createdAt = clock.now();
    const id = uuidv7(createdAt);
    // Every answer to this call names it, refusals included: the client's own id when it sent
    // a sane one (it is also what the runner and engine get, to match their logs), else the call id.
    const requestId = clientRequestId(incoming.headers[REQUEST_ID_HEADER]) ?? id;
    out.setHeader(REQUEST_ID_HEADER, requestId);
    if (this.#closing) return this.#refuse(out, new ShuttingDownError());
    // Past this, calls would queue in the event loop and every one would get slower: refuse
    // early, before reading a body that could not be served, and let the client (or another
    // gateway) retry.
    if (this.#inFlight >= maxInFlight) return this.#refuse(out, new OverloadedError(maxInFlight, retryAfter));
    const upload = this.#admitUpload(incoming, out);
    if (!upload) return;
    let body: Buffer | undefined;
    try {
      body = await readBody(incoming, { maxBytes: this.#config.maxBodyBytes, timeout: this.#config.bodyReadTimeout, idleTimeout: this.#config.bodyIdleTimeout });
    } catch (error) {
      // The rest of the body is still on the socket; close it rather than read garbage as a request.
      if (error instanceof SluiceError) this.#refuse(out, error, { connection: 'close' });
    }
    // Nothing awaits from this release to the count below: a drain never finds the call in
    // neither count and ends early.
    upload.release();
    this.#metrics.uploads.add(-1);
    if (body !== undefined && this.#inFlight >= maxInFlight) {
      // Calls whose bodies came first took the room while this one was on its way.
      this.#refuse(out, new OverloadedError(maxInFlight, retryAfter));
      body = undefined;
    }
    if (body === undefined) return this.#settle();
    this.#inFlight++;
    try {
      await this.#serve(route, fn, incoming, out, { createdAt, id, requestId }, body);
    } catch (error) {
      this.#config.logger.error('call failed unexpectedly', { error: error as Error });
      if (!out.headersSent) sendError(out, new InternalError());
      else out.destroy();
    } finally {
      this.#inFlight--;
      this.#settle();
    }
  }

  /**
   * Counts a body about to be read against the upload budget, or refuses the call: a client
   * address at its own share gets 429, anyone else 503 while the whole budget is taken. Either
   * way the body is left unread and the connection closed.
   */
  #admitUpload(incoming: IncomingMessage, out: ServerResponse): Extract<UploadAdmission, { kind: 'admitted' }> | undefined {
    const { maxUploads, maxUploadsPerClient, retryAfter } = this.#config;
    const admission = this.#uploads.admit(clientKey(incoming.socket?.remoteAddress));
    if (admission.kind === 'client-full') return void this.#refuse(out, new TooManyUploadsError(maxUploadsPerClient, retryAfter));
    if (admission.kind === 'full') return void this.#refuse(out, new UploadsFullError(maxUploads, retryAfter));
    this.#metrics.uploads.add(1);
    return admission;
  }

  /** True when nothing is uploading or in flight. */
  get #idle(): boolean {
    return this.#inFlight === 0 && this.#uploads.size === 0;
  }

  /** Ends a drain once the last call or upload is done. */
  #settle(): void {
    if (this.#idle && this.#drained) this.#drained();
  }

  async #serve(
    route: CallRoute,
    fnParam: string | undefined,
    incoming: IncomingMessage,
    out: ServerResponse,
    { createdAt, id, requestId }: { createdAt: number; id: string; requestId: string },
    body: Buffer,
  ): Promise<void> {
    const { clock, logger, placerConfig } = this.#config;
    const client = new AbortController();
    out.once('close', () => {
      if (!out.writableFinished) client.abort(new Error('client closed the connection'));
    });

    let fn: string;
    let user: string | undefined;
    let prompt: string | undefined;
    let preference: CallPreference;
    let turn: Turn;
    try {
      if (route === 'invoke') fn = fnParam ?? '';
      else {
        ({ model: fn, user, prompt } = parseInferenceBody(body, route));
        if (this.#pool.serves(fn) === 'no') {
          throw new UnknownModelError(`model "${fn}" is not served by any runner; GET /v1/models lists the models`);
        }
      }
      preference = parsePreference(incoming.headers.prefer, incoming.headers[INVOKE_TYPE_HEADER]);
      turn = this.#turn(incoming, user);
    } catch (error) {
      return this.#refuse(out, error as SluiceError);
    }

    // A sync call runs on its client's connection; a detached one on a signal of its own.
    const detached = preference.detached ? new DetachedSignal(client.signal) : undefined;
    const session = incoming.headers[SESSION_HEADER];
    const call: MutableCall = {
      id,
      fn,
      key: affinityKey(Array.isArray(session) ? session[0] : session, user, fn),
      type: preference.detached ? 'detached' : 'sync',
      ...(prompt === undefined ? {} : { prompt }),
      route,
      method: incoming.method ?? 'POST',
      // What the router matched, never the raw target: see gateway/front.ts.
      path: routedPath(route, fnParam, incoming.url ?? '/'),
      headers: forwardable(incoming.headers, { [REQUEST_ID_HEADER]: requestId }),
      body,
      createdAt,
      startedAt: createdAt,
      placerDeadline: createdAt,
      timeout: this.#config.callTimeout,
      signal: detached?.signal ?? client.signal,
    };
    // Also set on `out` above, but the relay copies the runner's headers over it: an engine
    // echoing an id of its own must not replace ours.
    const callHeaders = { [CALL_ID_HEADER]: call.id, [REQUEST_ID_HEADER]: requestId };

    try {
      const override = await this.#config.overrideCall?.(call);
      if (override) Object.assign(call, override);
      for (const listener of this.#config.listeners) await listener.beforeCall?.(call);
    } catch (error) {
      const refusal =
        error instanceof SluiceError ? error : new ListenerFailedError(`a before-call hook failed: ${(error as Error).message}`, { cause: error });
      return this.#refuse(out, refusal, callHeaders);
    }

    // startedAt excludes the client's upload: that time is the client's, not the platform's.
    call.startedAt = clock.now();
    call.placerDeadline = call.startedAt + (call.type === 'sync' ? placerConfig.placerTimeout : placerConfig.detachedPlacerTimeout);
    const m = this.#metrics;
    // Built only when something is logged: most calls log nothing.
    const log = () => logger.child({ call: call.id, fn: call.fn });
    m.calls.add(1, route);
    m.queued.add(1);

    const parent = propagation.extract(context.active(), incoming.headers);
    const span = this.#tracer.startSpan('sluice.call', { kind: SpanKind.SERVER, attributes: { 'sluice.fn': call.fn, 'sluice.call_id': call.id } }, parent);
    const headers: Record<string, string | string[]> = { ...call.headers };
    propagation.inject(trace.setSpan(parent, span), headers);
    call.headers = headers;

    const result = detached
      ? await this.#runDetached(call, incoming.headers, { out, headers: callHeaders, preference }, detached, turn)
      : await this.#placeAndRelay(call, out, callHeaders, turn);
    m.outcomes[result.outcome].add(1);
    if (result.execMs !== undefined) m.execTime.record(result.execMs, m.outcomeAttributes[result.outcome]);
    if (result.execMs !== undefined && result.execMs > result.totalMs) {
      // Clocks disagree (or a runner lies): a negative latency would poison the histogram.
      log().warn('runner reported more execution time than the call took', { execMs: result.execMs, totalMs: result.totalMs, runner: result.runner });
    } else {
      m.latency.record(result.latencyMs, m.outcomeAttributes[result.outcome]);
    }
    if (result.error && result.outcome !== 'cancelled') {
      span.setStatus({ code: SpanStatusCode.ERROR, message: result.error.message });
      log().warn('call failed', { outcome: result.outcome, runner: result.runner, error: result.error });
    }
    span.end();
    for (const listener of this.#config.listeners) {
      try {
        await listener.afterCall?.(call, result);
      } catch (error) {
        log().warn('after-call hook failed', { error: error as Error });
      }
    }
  }

  /**
   * The call's priority class (the `sluice-priority` header, else defaultPriority) and flow (the
   * `sluice-flow` header, else the body's `user`, else the client address).
   * @throws InvalidPriorityError when the header names no class.
   */
  #turn(incoming: IncomingMessage, user: string | undefined): Turn {
    const asked = first(incoming.headers[PRIORITY_HEADER])?.trim().toLowerCase();
    if (asked !== undefined && !isPriority(asked)) {
      throw new InvalidPriorityError(`${PRIORITY_HEADER} must be one of ${PRIORITIES.join(', ')}, got ${JSON.stringify(asked.slice(0, 64))}`);
    }
    const named = first(incoming.headers[FLOW_HEADER])?.trim() || user;
    const flow = named ? named.slice(0, MAX_FLOW_LENGTH) : clientKey(incoming.socket?.remoteAddress);
    return { priority: asked ?? this.#config.defaultPriority, flow };
  }

  /** The sync path: the walk, then the relay of whichever runner committed. */
  async #placeAndRelay(call: GatewayCall, out: ServerResponse, headers: Record<string, string>, turn: Turn): Promise<CallResult> {
    const placed = await this.#place(call, out, headers, turn);
    if (placed.kind === 'ended') return placed.result;
    const m = this.#metrics;
    m.running.add(1);
    const relayed = await relay(placed.response, out, headers, placed.runner, call.signal);
    m.running.add(-1);
    const totalMs = this.#config.clock.now() - call.startedAt;
    const { outcome, status, execMs, error } = relayed;
    return { outcome, status, execMs, ...(error ? { error } : {}), runner: placed.runner.id, totalMs, latencyMs: totalMs - (execMs ?? 0) };
  }

  /**
   * The detached path: the flow's checks and the `queued` record, the walk, then the runner's
   * commit, the client's 202 (or result), and the background run to its end.
   */
  async #runDetached(call: GatewayCall, request: IncomingMessage['headers'], reply: DetachedReply, run: DetachedSignal, turn: Turn): Promise<CallResult> {
    const m = this.#metrics;
    const flow = this.#detachedFlow;
    const prepared = await flow.prepare(call, request, run);
    if (prepared.kind === 'refused') {
      m.queued.add(-1);
      this.#refuse(reply.out, prepared.error, reply.headers);
      return this.#ended(call, 'errors', prepared.error.status, prepared.error);
    }
    if (prepared.kind === 'replay') {
      m.queued.add(-1);
      const { id } = prepared.record;
      await flow.answer(prepared.record, { ...reply, headers: { ...reply.headers, [CALL_ID_HEADER]: id, 'idempotent-replayed': 'true' } });
      return this.#ended(call, 'completed', 202);
    }
    const placed = await this.#place(call, reply.out, reply.headers, turn);
    if (placed.kind === 'ended') {
      await flow.unplaced(prepared.record, run, placed.result.error, reply);
      return placed.result;
    }
    run.commit();
    const accepted = await this.#detached.accept(prepared.record, call, placed.response, placed.runner.id, run.controller);
    m.running.add(1);
    await flow.answer(accepted.record, reply, accepted.done);
    const outcome = await accepted.done;
    m.running.add(-1);
    return detachedResult(outcome, placed.runner.id);
  }

  /**
   * The placement walk with its metrics. Resolves with the runner that committed, or, when none
   * did, with how the call ended after answering the client. Between passes that found every
   * runner busy the call waits its turn in the queue (see docs/placers.md), not a fixed pause.
   */
  async #place(call: GatewayCall, out: ServerResponse, headers: Record<string, string>, turn: Turn): Promise<Placed> {
    const m = this.#metrics;
    const { clock, placerConfig } = this.#config;
    const queue = this.#queue;
    // The pool's candidate key: calls for one model share one line.
    const model = call.route === 'invoke' ? '' : call.fn;
    const waiter = queue.waiter({ model, priority: turn.priority, flow: turn.flow }, call.signal, call.placerDeadline);
    const waitForCapacity = (): Promise<void> => this.#waitTurn(waiter, call);
    // The last answer of each runner offered the call, to explain a 503.
    const offers = new Map<string, 'busy' | 'error'>();
    try {
      // Calls already waiting for this model came first: a new one lines up behind them rather
      // than take the slot freed for their head. An abort or the deadline is the walk's to report.
      if (queue.aheadFor(model) > 0) {
        await waitForCapacity().catch((error: unknown) => {
          if (error instanceof QueueFullError) throw error;
        });
      }
      const placement = await placeCall(call, this.#pool, this.#config.placer, {
        retryAllDelay: placerConfig.retryAllDelay,
        clock,
        onRetry: (runner, reason) => {
          m.placerRetries.add(1, reason);
          offers.set(runner.id, reason);
        },
        waitForCapacity,
      });
      m.placerAttempts.record(placement.attempts);
      // A waiter placed: the room it found may hold more, so the next in line walks too (one
      // that finds nothing goes back to the head); the fallback's wakes depend on it.
      if (waiter.joined) queue.wake(1, [model]);
      return { kind: 'placed', response: placement.value, runner: placement.runner };
    } catch (error) {
      m.placerAttempts.record((error as { attempts?: number }).attempts ?? 0);
      return { kind: 'ended', result: this.#unplaced(call, error as Error, out, headers, offers) };
    } finally {
      m.queued.add(-1);
      if (waiter.joined) m.queueTime.record(clock.now() - waiter.joinedAt, { priority: turn.priority });
      waiter.leave();
    }
  }

  /**
   * One wait in the queue, for the walk's waitForCapacity: resolves when woken or at the
   * deadline (the walk then ends the call), rejects when the call aborted or the queue is full.
   */
  async #waitTurn(waiter: Waiter, call: GatewayCall): Promise<void> {
    const m = this.#metrics;
    const attributes = { model: waiter.key.model, priority: waiter.key.priority };
    m.queueDepth.add(1, attributes);
    const end = await waiter.wait();
    m.queueDepth.add(-1, attributes);
    if (typeof end === 'object') {
      m.queueRefused.add(1, { scope: end.scope });
      throw new QueueFullError(end.scope, end.limit, this.#config.retryAfter);
    }
    if (end === 'aborted') throw call.signal.reason ?? new Error('the call was aborted');
  }

  /** How a call that never reached a runner ended. */
  #ended(call: GatewayCall, outcome: CallResult['outcome'], status: number, error?: Error): CallResult {
    const totalMs = this.#config.clock.now() - call.startedAt;
    return { outcome, status, totalMs, latencyMs: totalMs, ...(error ? { error } : {}) };
  }

  /** Answers a request refused before placement, and counts it by code. */
  #refuse(out: ServerResponse, error: SluiceError, headers: Record<string, string> = {}): void {
    this.#metrics.rejected.add(1, error.code);
    sendError(out, error, headers);
  }

  /** Answers a call no runner took (or whose committed runner failed before answering). */
  #unplaced(call: GatewayCall, error: Error, out: ServerResponse, headers: Record<string, string>, offers?: ReadonlyMap<string, 'busy' | 'error'>): CallResult {
    if (error instanceof PlacerAbortedError || call.signal.aborted) return this.#ended(call, 'cancelled', 0, error);
    if (error instanceof QueueFullError) {
      // Refused at once rather than queued past the bound: counted with the other refusals.
      this.#refuse(out, error, headers);
      return this.#ended(call, 'server_busy', error.status, error);
    }
    if (error instanceof PlacerTimeoutError) {
      // A control plane should say why nothing ran: one reason per runner.
      const runners = this.#pool.explain?.(call, offers ?? new Map());
      sendError(out, error, { ...headers, 'retry-after': String(this.#config.retryAfter) }, runners ? { runners } : undefined);
      return this.#ended(call, 'server_busy', error.status, error);
    }
    if (!(error instanceof SluiceError)) this.#config.logger.error('placement failed unexpectedly', { call: call.id, error });
    // A custom placer's or pool's own message may say more than a client should see.
    const failure = error instanceof SluiceError ? error : new InternalError({ cause: error });
    sendError(out, failure, headers);
    return this.#ended(call, failure instanceof CallTimeoutError ? 'timeouts' : 'errors', failure.status, error);
  }
}

/** A header's first value. */
function first(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}
