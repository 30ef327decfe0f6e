/**
 * The LB agent: Fn's call lifecycle over a pool of runners.
 *
 * front gate -> buffer the body (bounded, under the upload budget) -> maxInFlight -> parse
 * what placement needs -> overrider and before-call listeners -> startedAt -> the placement
 * walk, waiting in the queue while every runner is busy (placement.ts) -> relay the committed runner's response -> after-call listeners, counters and the net
 * latency.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { SluiceError, onCutShort } from '../../placer/kernel/index.ts';
import { CALL_ID_HEADER } from '../../runner/protocol/index.ts';
import { ANONYMOUS, invokeRefusal, KeyCalls, modelRefusal } from '../access/index.ts';
import type { Caller, KeyCall } from '../access/index.ts';
import { UploadBudget } from './admission.ts';
import { clientKey, affinityKey, parseInferenceBody, routedPath, uuidv7 } from '../http/index.ts';
import type { UploadAdmission } from './admission.ts';
import {
  clientRequestId,
  forwardable,
  INVOKE_TYPE_HEADER,
  readBody,
  REQUEST_ID_HEADER,
  SESSION_HEADER,
} from '../http/index.ts';
import type { CallRoute, GatewayCall, CallResult } from '../http/index.ts';
import {
  InternalError,
  ListenerFailedError,
  OverloadedError,
  ShuttingDownError,
  TooManyUploadsError,
  UnknownModelError,
  UploadsFullError,
  sendError,
} from '../errors.ts';
import { AnswerWatch, InferenceRecorder } from './inference.ts';
import {
  createGatewayMetrics,
  readStats,
  startCallTrace,
  StatsWindow,
  traceOfResponse,
} from '../observe/index.ts';
import type { CallTrace, GatewayStats } from '../observe/index.ts';
import { DetachedFlow, detachedResult, DetachedSignal, parsePreference } from '../detached/index.ts';
import type { CallPreference, DetachedCalls, DetachedReply } from '../detached/index.ts';
import type { GatewayConfig } from '../options.ts';
import type { GatewayPool, RunnerResponse } from '../fleet/index.ts';
import { relay } from './relay.ts';
import { RECORD_OVERHEAD_BYTES } from '../detached/store/index.ts';
import type { WaitQueue } from './wait-queue.ts';
import { CallPlacement, endedResult, turnOf, waitQueueFor } from './placement.ts';
import type { Turn } from './placement.ts';

type MutableCall = { -readonly [K in keyof GatewayCall]: GatewayCall[K] };

/** What a call admitted at the front gate carries into its body's read and on. */
interface Started {
  createdAt: number;
  id: string;
  requestId: string;
  upload: { release(): void };
  keyCall: KeyCall | undefined;
  callTrace: CallTrace | undefined;
  /** Aborted when the client is gone (gateway/calls/agent.ts, serve). */
  clientGone: AbortSignal;
}

/** Runs calls through their lifecycle; one per gateway. */
export class LbAgent {
  readonly #config: GatewayConfig;
  readonly #pool: GatewayPool;
  readonly #metrics;
  readonly #detached: DetachedCalls;
  readonly #detachedFlow: DetachedFlow;
  readonly #uploads: UploadBudget;
  readonly #placement: CallPlacement;
  readonly #keyCalls: KeyCalls;
  readonly #queue: WaitQueue;
  /** Calls per second and TTFT per model for GET /v1/stats. */
  readonly #window: StatsWindow;
  readonly #inference: InferenceRecorder;
  /** Errors answered through #refuse, counted in `rejected` already: not counted again in `failed`. */
  readonly #refused = new WeakSet<Error>();
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
    this.#metrics = createGatewayMetrics(config.meterProvider);
    this.#queue = queue ?? waitQueueFor(config);
    this.#window = new StatsWindow({ clock: config.clock });
    this.#inference = new InferenceRecorder(this.#metrics.inference, this.#window);
    this.#placement = new CallPlacement(config, pool, this.#queue, this.#metrics, (out, error, headers) => this.#refuse(out, error, headers));
    this.#uploads = new UploadBudget({ max: config.maxUploads, perClient: config.maxUploadsPerClient });
    this.#keyCalls = new KeyCalls({ limiter: config.limiter, logger: config.logger });
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

  /** The snapshot GET /v1/stats answers (gateway/observe/stats.ts). */
  stats(): GatewayStats {
    return readStats({ metrics: this.#metrics, window: this.#window, queue: this.#queue.snapshot(), detached: this.#detached.counts(), clock: this.#config.clock });
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

  /**
   * Serves one call on `route` for `caller` (admitted to the client scope by the server); `fn`
   * is the /invoke path parameter. Never rejects.
   */
  async serve(route: CallRoute, fn: string | undefined, incoming: IncomingMessage, out: ServerResponse, caller: Caller = ANONYMOUS): Promise<void> {
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
    // The client leaving at any step from here on (the body's upload, the wait for a runner, the
    // answer) aborts the call: the body's read, the walk, the runner's offer and the relay.
    const clientGone = new AbortController();
    onCutShort(out, () => clientGone.abort(new Error('client closed the connection')));
    // A client key's requests per minute and concurrent calls, before its body is read. The
    // upload counts meanwhile, so a drain waits for this call.
    const keyCall = caller.kind === 'client' ? await this.#keyCalls.open(caller.key) : undefined;
    if (keyCall instanceof SluiceError) {
      upload.release();
      this.#metrics.uploads.add(-1);
      this.#refuse(out, keyCall, { connection: 'close' });
      return this.#settle();
    }
    if (keyCall) {
      const headers = keyCall.headers;
      for (const name in headers) out.setHeader(name, headers[name]!);
    }
    // The call's span starts with its body: refusals before it are the front gate's, untraced.
    const callTrace = startCallTrace(incoming, out, routedPath(route, fn, incoming.url ?? '/'));
    try {
      await this.#serveBuffered(route, fn, incoming, out, caller, { createdAt, id, requestId, upload, keyCall, callTrace, clientGone: clientGone.signal });
    } finally {
      callTrace?.end(out);
    }
  }

  /** {@link serve} from the body's buffering on, with the call's trace when it is recorded. */
  async #serveBuffered(
    route: CallRoute,
    fn: string | undefined,
    incoming: IncomingMessage,
    out: ServerResponse,
    caller: Caller,
    { createdAt, id, requestId, upload, keyCall, callTrace, clientGone }: Started,
  ): Promise<void> {
    const { maxInFlight, retryAfter } = this.#config;
    let body: Buffer | undefined;
    try {
      const limits = { maxBytes: this.#config.maxBodyBytes, timeout: this.#config.bodyReadTimeout, idleTimeout: this.#config.bodyIdleTimeout };
      const reading = readBody(incoming, limits, clientGone);
      body = await (callTrace ? callTrace.body(reading) : reading);
    } catch (error) {
      // The rest of the body is still on the socket; close it rather than read garbage as a request.
      if (error instanceof SluiceError) this.#refuse(out, error, { connection: 'close', ...(await keyCall?.refusalTokenHeaders()) });
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
    if (body === undefined) {
      keyCall?.close();
      return this.#settle();
    }
    this.#inFlight++;
    try {
      await this.#serve(route, fn, incoming, out, { createdAt, id, requestId, client: caller.kind === 'client' ? caller.key.id : undefined, keyCall, callTrace, clientGone }, body);
    } catch (error) {
      this.#config.logger.error('call failed unexpectedly', { error: error as Error });
      if (!out.headersSent) sendError(out, new InternalError());
      else out.destroy();
    } finally {
      keyCall?.close();
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
    { createdAt, id, requestId, client, keyCall, callTrace, clientGone }: Omit<Started, 'upload'> & { client: string | undefined },
    body: Buffer,
  ): Promise<void> {
    const { clock, logger, placerConfig } = this.#config;

    let fn: string;
    let user: string | undefined;
    let prompt: string | undefined;
    let preference: CallPreference;
    let turn: Turn;
    try {
      // A key's model list is checked before whether the model exists, so that a model it may
      // not call is refused alike whether it exists or not.
      if (route === 'invoke') {
        fn = fnParam ?? '';
        const refusal = invokeRefusal(keyCall?.key, fn, body);
        if (refusal) throw refusal;
      } else {
        ({ model: fn, user, prompt } = parseInferenceBody(body, route));
        const refusal = modelRefusal(keyCall?.key, fn);
        if (refusal) throw refusal;
        // A deployed model may have no runner yet: its call waits for a replica (placement.ts).
        if (this.#pool.serves(fn) === 'no' && !this.#placement.awaitsReplica(fn)) {
          throw new UnknownModelError(`model "${fn}" is not served by any runner; GET /v1/models lists the models`);
        }
      }
      preference = parsePreference(incoming.headers.prefer, incoming.headers[INVOKE_TYPE_HEADER]);
      turn = turnOf(incoming, user, this.#config.defaultPriority, client);
    } catch (error) {
      // Every answer to a key with limits says where it stands, this refusal's too.
      return this.#refuse(out, error as SluiceError, await keyCall?.refusalTokenHeaders());
    }
    // The body the runner gets: the client's, or one the key's token budget added to.
    let sent = body;
    let stripUsage = false;
    if (keyCall) {
      // Tokens once the body is known: the call's worst case (a quarter of its bytes for the
      // prompt, its max_tokens × n for the output) until the engine reports usage. A detached
      // call's room among the key's stored results is reserved by the detached flow, once it
      // knows the call is not a replay, which needs none.
      const budget = keyCall.budget(route, body);
      if (budget) ({ body: sent, stripUsage } = budget);
      const refusal = await keyCall.tokens(body.length, budget?.outputTokens);
      // The requests' headers were set at admission; the tokens' join them now.
      const tokenHeaders = keyCall.tokenHeaders;
      for (const name in tokenHeaders) out.setHeader(name, tokenHeaders[name]!);
      if (refusal) return this.#refuse(out, refusal);
    }

    // A sync call runs on its client's connection; a detached one on a signal of its own.
    const detached = preference.detached ? new DetachedSignal(clientGone) : undefined;
    const session = incoming.headers[SESSION_HEADER];
    const call: MutableCall = {
      id,
      fn,
      key: affinityKey(Array.isArray(session) ? session[0] : session, user, fn),
      type: preference.detached ? 'detached' : 'sync',
      ...(prompt === undefined ? {} : { prompt }),
      route,
      method: incoming.method ?? 'POST',
      // What the router matched, never the raw target: see gateway/http/front.ts.
      path: routedPath(route, fnParam, incoming.url ?? '/'),
      headers: forwardable(incoming.headers, { [REQUEST_ID_HEADER]: requestId }),
      body: sent,
      createdAt,
      startedAt: createdAt,
      placerDeadline: createdAt,
      timeout: this.#config.callTimeout,
      signal: detached?.signal ?? clientGone,
      ...(client === undefined ? {} : { client }),
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
    this.#window.called();
    m.queued.add(1);

    if (callTrace) {
      callTrace.bind(call);
      callTrace.placer(this.#config.placer.name);
    }

    const result = detached
      ? await this.#runDetached(call, incoming.headers, { out, headers: callHeaders, preference }, detached, turn, keyCall, stripUsage)
      : await this.#placeAndRelay(call, out, callHeaders, turn, keyCall, stripUsage);
    m.outcomes[result.outcome].add(1);
    if (result.error && result.outcome !== 'completed' && result.outcome !== 'cancelled' && !this.#refused.has(result.error)) {
      m.failed.add(1, (result.error as Partial<SluiceError>).code ?? 'GW_INTERNAL');
    }
    if (result.execMs !== undefined) m.execTime.record(result.execMs, m.outcomeAttributes[result.outcome]);
    if (result.execMs !== undefined && result.execMs > result.totalMs) {
      // Clocks disagree (or a runner lies): a negative latency would poison the histogram.
      log().warn('runner reported more execution time than the call took', { execMs: result.execMs, totalMs: result.totalMs, runner: result.runner });
    } else {
      m.latency.record(result.latencyMs, m.outcomeAttributes[result.outcome]);
    }
    if (result.error && result.outcome !== 'cancelled') {
      callTrace?.fail(result.error);
      log().warn('call failed', { outcome: result.outcome, runner: result.runner, error: result.error });
    }
    callTrace?.end(out);
    for (const listener of this.#config.listeners) {
      try {
        await listener.afterCall?.(call, result);
      } catch (error) {
        log().warn('after-call hook failed', { error: error as Error });
      }
    }
  }

  /** The sync path: the walk, then the relay of whichever runner committed. */
  async #placeAndRelay(call: GatewayCall, out: ServerResponse, headers: Record<string, string>, turn: Turn, keyCall: KeyCall | undefined, stripUsage: boolean): Promise<CallResult> {
    const placed = await this.#placement.place(call, out, headers, turn);
    if (placed.kind === 'ended') return placed.result;
    const m = this.#metrics;
    m.running.add(1);
    const relaying = relay(placed.response, out, headers, placed.runner, call.signal, { stripUsage });
    // Beside the relay's own reader, attached in the same tick: the answer's end holds its usage.
    keyCall?.watch(placed.response.body);
    const watch = call.route === 'invoke' ? undefined : this.#watch(call, placed.response);
    const relayed = await relaying;
    // A client that left is not the relay's failure.
    traceOfResponse(out)?.relayEnded(relayed.status, relayed.outcome === 'cancelled' ? undefined : relayed.error);
    m.running.add(-1);
    const totalMs = this.#config.clock.now() - call.startedAt;
    const { outcome, status, execMs, error } = relayed;
    if (watch) {
      const ok = outcome === 'completed' && status >= 200 && status < 300;
      this.#inference.record({ model: call.fn, runner: placed.runner.id, durationMs: totalMs, queueWaitMs: placed.queuedMs, ok, reading: watch.finish() });
    }
    return { outcome, status, execMs, ...(error ? { error } : {}), runner: placed.runner.id, totalMs, latencyMs: totalMs - (execMs ?? 0) };
  }

  /**
   * The detached path: the flow's checks and the `queued` record, the walk, then the runner's
   * commit, the client's 202 (or result), and the background run to its end.
   */
  async #runDetached(
    call: GatewayCall,
    request: IncomingMessage['headers'],
    reply: DetachedReply,
    run: DetachedSignal,
    turn: Turn,
    keyCall: KeyCall | undefined,
    stripUsage: boolean,
  ): Promise<CallResult> {
    const m = this.#metrics;
    const flow = this.#detachedFlow;
    const prepared = await flow.prepare(call, request, run, keyCall ? (bytes, until) => keyCall.storedRoom(call.id, bytes, until) : undefined);
    if (prepared.kind === 'refused') {
      m.queued.add(-1);
      this.#refuse(reply.out, prepared.error, reply.headers);
      return endedResult(call, this.#config.clock, 'errors', prepared.error.status, prepared.error);
    }
    if (prepared.kind === 'replay') {
      m.queued.add(-1);
      const { id } = prepared.record;
      await flow.answer(prepared.record, { ...reply, headers: { ...reply.headers, [CALL_ID_HEADER]: id, 'idempotent-replayed': 'true' } });
      return endedResult(call, this.#config.clock, 'completed', 202);
    }
    const placed = await this.#placement.place(call, reply.out, reply.headers, turn);
    if (placed.kind === 'ended') {
      await flow.unplaced(prepared.record, run, placed.result.error, reply);
      return placed.result;
    }
    run.commit();
    const accepted = await this.#detached.accept(prepared.record, call, placed.response, placed.runner.id, run.controller, { stripUsage });
    m.running.add(1);
    await flow.answer(accepted.record, reply, accepted.done);
    const outcome = await accepted.done;
    traceOfResponse(reply.out)?.relayEnded(outcome.result?.status ?? 0);
    m.running.add(-1);
    if (keyCall && outcome.result) {
      // The stored result: its usage settles the tokens, its bytes count until it expires.
      keyCall.answered(outcome.answer ?? outcome.result.body);
      keyCall.stored(call.id, RECORD_OVERHEAD_BYTES + outcome.result.body.length, (outcome.record.completedAt ?? this.#config.clock.now()) + this.#config.resultTtl);
    }
    if (call.route !== 'invoke') {
      // A detached answer is read whole from the store: its duration and usage, no first token.
      const watch = new AnswerWatch({ sse: false, json: true, startedAt: call.startedAt, now: () => this.#config.clock.now() });
      if (outcome.result) watch.chunk(outcome.answer ?? outcome.result.body);
      const ok = outcome.record.status === 'succeeded' && outcome.result !== undefined && outcome.result.status >= 200 && outcome.result.status < 300;
      this.#inference.record({ model: call.fn, runner: placed.runner.id, durationMs: outcome.totalMs, queueWaitMs: placed.queuedMs, ok, reading: watch.finish() });
    }
    return detachedResult(outcome, placed.runner.id);
  }

  /**
   * Watches a committed runner's answer for its timings and usage, beside the relay's own reader
   * (attached in the same tick, so no chunk is missed).
   */
  #watch(call: GatewayCall, response: RunnerResponse): AnswerWatch {
    const type = String(response.headers['content-type'] ?? '');
    const clock = this.#config.clock;
    const watch = new AnswerWatch({ sse: type.startsWith('text/event-stream'), json: type.startsWith('application/json'), startedAt: call.startedAt, now: () => clock.now() });
    response.body.on('data', (chunk: Buffer) => watch.chunk(chunk));
    return watch;
  }

  /** Answers a request refused before placement, and counts it by code. */
  #refuse(out: ServerResponse, error: SluiceError, headers: Record<string, string> = {}): void {
    this.#metrics.rejected.add(1, error.code);
    traceOfResponse(out)?.fail(error);
    this.#refused.add(error);
    sendError(out, error, headers);
  }
}
