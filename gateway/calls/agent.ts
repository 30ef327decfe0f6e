/**
 * The LB agent: Fn's call lifecycle over a pool of runners.
 *
 * front gate -> upload budget (the call's ledger opens, ledger.ts) -> a key's limits -> buffer
 * the body -> maxInFlight -> what the call asks (model, preference, turn) -> a key's tokens ->
 * overrider and before-call listeners -> startedAt -> placement (placement.ts), waiting in the
 * queue while every runner is busy -> a sync call's relay (sync-path.ts), or a detached call
 * handed whole to its orchestrator (detached-path.ts) -> counters and the net latency
 * (outcomes.ts) -> the call's span ends -> after-call listeners -> the ledger closes. Every
 * refusal on the way is written by the responder (responder.ts).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { LazyAbort, SluiceError, onCutShort } from '../../placer/kernel/index.ts';
import { CALL_ID_HEADER } from '../../runner/protocol/index.ts';
import { ANONYMOUS, KeyCalls, withUsageAsked } from '../access/index.ts';
import type { Caller, KeyCall } from '../access/index.ts';
import { UploadBudget } from './admission.ts';
import { clientKey, routedPath, uuidv7 } from '../http/index.ts';
import { bodyReader, clientRequestId, REQUEST_ID_HEADER } from '../http/index.ts';
import type { BodyReader } from '../http/index.ts';
import type { CallRoute, GatewayCall, CallResult } from '../http/index.ts';
import { askOf, makeCall } from './intake.ts';
import type { Asked, MutableCall } from './intake.ts';
import {
  InternalError,
  ListenerFailedError,
  OverloadedError,
  ShuttingDownError,
  TooManyUploadsError,
  UploadsFullError,
} from '../errors.ts';
import { AnswerRecords } from './answers.ts';
import { CacheChecks } from './cache-checks.ts';
import { DetachedPath } from './detached-path.ts';
import { InferenceRecorder } from './inference.ts';
import { CallBooks } from './ledger.ts';
import type { CallLedger } from './ledger.ts';
import { CallResponder } from './responder.ts';
import { CallOutcomes } from './outcomes.ts';
import { createGatewayMetrics, readStats, startCallTrace, StatsWindow } from '../observe/index.ts';
import type { CallTrace, GatewayStats } from '../observe/index.ts';
import { DetachedRuns, DetachedSignal } from '../detached/index.ts';
import type { DetachedCalls } from '../detached/index.ts';
import type { GatewayConfig } from '../options.ts';
import type { GatewayPool } from '../fleet/index.ts';
import type { WaitQueue } from './wait-queue.ts';
import type { ColdStarts } from '../control/index.ts';
import { CallPlacement, waitQueueFor } from './placement.ts';
import { SyncPath } from './sync-path.ts';

/** What a call admitted at the front gate carries into its body's read and on. */
interface Started {
  createdAt: number;
  id: string;
  requestId: string;
  ledger: CallLedger;
  keyCall: KeyCall | undefined;
  callTrace: CallTrace | undefined;
  /** Aborted when the client is gone (gateway/calls/agent.ts, serve). */
  clientGone: LazyAbort;
  /** The id of the caller's client key, when it has one. */
  client: string | undefined;
}

/** Runs calls through their lifecycle; one per gateway. */
export class LbAgent {
  readonly #config: GatewayConfig;
  /** Reads a call's body under the configured bounds. */
  readonly #readBody: BodyReader;
  readonly #metrics;
  readonly #detached: DetachedCalls;
  readonly #uploads: UploadBudget;
  readonly #books: CallBooks;
  readonly #responder: CallResponder;
  /** Each call's cache view, its pending blocks, and its prediction against the engine's report. */
  readonly #cacheChecks: CacheChecks;
  readonly #keyCalls: KeyCalls;
  readonly #queue: WaitQueue;
  /** Calls per second and TTFT per model for GET /v1/stats. */
  readonly #window: StatsWindow;
  readonly #sync: SyncPath;
  readonly #detachedPath: DetachedPath;
  readonly #outcomes: CallOutcomes;
  /** Whether a model can be served: a runner serves it, or it is deployed and may get a replica. */
  readonly #known: (model: string) => boolean;
  #closing = false;
  #drained: (() => void) | undefined;

  /**
   * `queue` is where calls wait while every runner is busy; the gateway shares it with its pool,
   * whose runners wake it. Without one, the agent keeps its own, woken by its fallback alone.
   * `coldStarts` is whoever starts replicas (the gateway's control plane): without it a model
   * no runner serves is unknown.
   */
  constructor(
    config: GatewayConfig,
    pool: GatewayPool,
    detached: DetachedCalls,
    queue?: WaitQueue,
    coldStarts: ColdStarts | undefined = config.coldStarts,
  ) {
    this.#config = config;
    this.#readBody = bodyReader({
      maxBytes: config.maxBodyBytes,
      timeout: config.bodyReadTimeout,
      idleTimeout: config.bodyIdleTimeout,
    });
    this.#uploads = new UploadBudget({ max: config.maxUploads, perClient: config.maxUploadsPerClient });
    const uploads = this.#uploads;
    this.#metrics = createGatewayMetrics(config.meterProvider, { uploads: () => uploads.size });
    this.#books = new CallBooks(this.#metrics, uploads);
    this.#books.onRelease = () => this.#settle();
    this.#responder = new CallResponder(this.#metrics);
    this.#queue = queue ?? waitQueueFor(config);
    this.#window = new StatsWindow({ clock: config.clock });
    const placement = new CallPlacement(config, pool, this.#queue, this.#metrics, coldStarts);
    const cacheChecks = new CacheChecks({ pool, placer: config.placer, logger: config.logger });
    this.#cacheChecks = cacheChecks;
    // A deployed model may have no runner yet: its call waits for a replica (placement.ts).
    this.#known = (model) => pool.serves(model) !== 'no' || placement.awaitsReplica(model);
    this.#keyCalls = new KeyCalls({ limiter: config.limiter, logger: config.logger });
    this.#detached = detached;
    const { clock, resultTtl } = config;
    const inference = new InferenceRecorder(this.#metrics.inference, this.#window);
    const answers = new AnswerRecords(inference, cacheChecks, clock);
    const responder = this.#responder;
    this.#sync = new SyncPath({ placement, responder, cacheChecks, answers, clock });
    const runs = new DetachedRuns({
      calls: detached,
      store: config.store,
      callbacks: config.callbacks,
      clock,
      resultTtl,
      retryAfter: config.retryAfter,
    });
    this.#detachedPath = new DetachedPath({ runs, placement, responder, cacheChecks, answers, clock, resultTtl });
    this.#outcomes = new CallOutcomes(this.#metrics, responder, config);
  }

  /** Calls placed or relayed: their body is buffered. Counted against maxInFlight. */
  get inFlight(): number {
    return this.#books.inFlight;
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
    return readStats({
      metrics: this.#metrics,
      window: this.#window,
      queue: this.#queue.snapshot(),
      detached: this.#detached.counts(),
      clock: this.#config.clock,
    });
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
    if (this.#books.idle) return Promise.resolve(true);
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
    this.#responder.refuse(out, error, headers);
  }

  /**
   * Serves one call on `route` for `caller` (admitted to the client scope by the server); `fn`
   * is the /invoke path parameter. Never rejects.
   */
  async serve(
    route: CallRoute,
    fn: string | undefined,
    incoming: IncomingMessage,
    out: ServerResponse,
    caller: Caller = ANONYMOUS,
  ): Promise<void> {
    const { clock, maxInFlight, retryAfter } = this.#config;
    const createdAt = clock.now();
    const id = uuidv7(createdAt);
    // Every answer to this call names it, refusals included: the client's own id when it sent
    // a sane one (it is also what the runner and engine get, to match their logs), else the call id.
    const requestId = clientRequestId(incoming.headers[REQUEST_ID_HEADER]) ?? id;
    out.setHeader(REQUEST_ID_HEADER, requestId);
    const responder = this.#responder;
    if (this.#closing) return responder.refuse(out, new ShuttingDownError());
    // Past this, calls would queue in the event loop and every one would get slower: refuse
    // early, before reading a body that could not be served, and let the client (or another
    // gateway) retry.
    if (this.#books.inFlight >= maxInFlight) return responder.refuse(out, new OverloadedError(maxInFlight, retryAfter));
    const ledger = this.#admitUpload(incoming, out);
    if (!ledger) return;
    // The client leaving at any step from here on (the body's upload, the wait for a runner, the
    // answer) aborts the call: the body's read, the walk, the runner's offer and the relay.
    const clientGone = new LazyAbort();
    onCutShort(out, () => clientGone.abort(new Error('client closed the connection')));
    // A client key's requests per minute and concurrent calls, before its body is read. The
    // upload counts meanwhile, so a drain waits for this call.
    const keyCall = caller.kind === 'client' ? await this.#keyCalls.open(caller.key) : undefined;
    if (keyCall instanceof SluiceError) {
      responder.refuse(out, keyCall, { connection: 'close' });
      return ledger.close();
    }
    if (keyCall) {
      const headers = keyCall.headers;
      for (const name in headers) out.setHeader(name, headers[name]!);
    }
    // The call's span starts with its body: refusals before it are the front gate's, untraced.
    const callTrace = startCallTrace(incoming, out, routedPath(route, fn, incoming.url ?? '/'), route);
    let served: Served | undefined;
    try {
      const client = caller.kind === 'client' ? caller.key.id : undefined;
      served = await this.#serveBuffered(route, fn, incoming, out, {
        createdAt,
        id,
        requestId,
        ledger,
        keyCall,
        callTrace,
        clientGone,
        client,
      });
    } finally {
      // The call's one end: its span ends as its answer did, before the after-call listeners.
      callTrace?.end(out);
    }
    try {
      if (served && this.#config.listeners.length > 0) await this.#outcomes.afterCall(served.call, served.result);
    } finally {
      keyCall?.close();
      ledger.close();
    }
  }

  /** {@link serve} from the body's buffering on; resolves with the call and how it ended once it was made. */
  async #serveBuffered(
    route: CallRoute,
    fn: string | undefined,
    incoming: IncomingMessage,
    out: ServerResponse,
    started: Started,
  ): Promise<Served | undefined> {
    const { maxInFlight, retryAfter } = this.#config;
    const { ledger, keyCall, callTrace, clientGone } = started;
    let body: Buffer | undefined;
    try {
      const reading = this.#readBody(incoming, clientGone);
      body = await (callTrace ? callTrace.body(reading) : reading);
    } catch (error) {
      // The rest of the body is still on the socket; close it rather than read garbage as a request.
      if (error instanceof SluiceError)
        this.#responder.refuse(out, error, { connection: 'close', ...(await keyCall?.refusalTokenHeaders()) });
    }
    // Nothing awaits from this release to the count below: a drain never finds the call in
    // neither count and ends early.
    ledger.bodyRead();
    if (body !== undefined && this.#books.inFlight >= maxInFlight) {
      // Calls whose bodies came first took the room while this one was on its way.
      this.#responder.refuse(out, new OverloadedError(maxInFlight, retryAfter));
      body = undefined;
    }
    if (body === undefined) return undefined;
    ledger.admit();
    try {
      return await this.#serve(route, fn, incoming, out, started, body);
    } catch (error) {
      this.#config.logger.error('call failed unexpectedly', { error: error as Error });
      if (!out.headersSent) this.#responder.answer(out, { kind: 'failed', error: new InternalError() }, {});
      else out.destroy();
      return undefined;
    }
  }

  /**
   * Counts a body about to be read against the upload budget and opens the call's ledger, or
   * refuses the call: a client address at its own share gets 429, anyone else 503 while the
   * whole budget is taken. Either way the body is left unread and the connection closed.
   */
  #admitUpload(incoming: IncomingMessage, out: ServerResponse): CallLedger | undefined {
    const { maxUploads, maxUploadsPerClient, retryAfter } = this.#config;
    const admission = this.#uploads.admit(clientKey(incoming.socket?.remoteAddress));
    if (admission.kind === 'client-full')
      return void this.#responder.refuse(out, new TooManyUploadsError(maxUploadsPerClient, retryAfter));
    if (admission.kind === 'full')
      return void this.#responder.refuse(out, new UploadsFullError(maxUploads, retryAfter));
    return this.#books.open(admission);
  }

  /** Ends a drain once the last call or upload is done. */
  #settle(): void {
    if (this.#books.idle && this.#drained) this.#drained();
  }

  /** Makes the call of a buffered body and serves it: a sync call's relay, or a detached call's 202 and run. */
  async #serve(
    route: CallRoute,
    fnParam: string | undefined,
    incoming: IncomingMessage,
    out: ServerResponse,
    started: Started,
    body: Buffer,
  ): Promise<Served | undefined> {
    const { keyCall, ledger } = started;
    let asked: Asked;
    try {
      asked = askOf(route, fnParam, incoming, body, {
        key: keyCall?.key,
        client: started.client,
        known: this.#known,
        defaultPriority: this.#config.defaultPriority,
      });
    } catch (error) {
      // Every answer to a key with limits says where it stands, this refusal's too.
      this.#responder.refuse(out, error as SluiceError, await keyCall?.refusalTokenHeaders());
      return undefined;
    }
    // Without a key, the client's body as it came: no await on the way.
    let budgeted = keyCall ? await this.#budget(route, body, out, keyCall) : { body, stripUsage: false };
    if (budgeted === undefined) return undefined;
    if (asked.usageUnasked && !budgeted.stripUsage && this.#cacheChecks.checks(route))
      budgeted = { body: withUsageAsked(budgeted.body, asked.usageUnasked), stripUsage: true };
    const detached = asked.preference.detached ? new DetachedSignal(started.clientGone) : undefined;
    const { id, requestId, createdAt, client, clientGone } = started;
    const call = makeCall(route, fnParam, incoming, asked, {
      id,
      requestId,
      createdAt,
      client,
      body: budgeted.body,
      timeout: this.#config.callTimeout,
      abort: detached?.signal ?? clientGone,
    });
    this.#cacheChecks.attach(call, asked.promptParts);
    // Also set on `out` above, but the relay copies the runner's headers over it: an engine
    // echoing an id of its own must not replace ours.
    const callHeaders = { [CALL_ID_HEADER]: call.id, [REQUEST_ID_HEADER]: started.requestId };
    try {
      const override = await this.#config.overrideCall?.(call);
      if (override) Object.assign(call, override);
      for (const listener of this.#config.listeners) await listener.beforeCall?.(call);
    } catch (error) {
      const refusal =
        error instanceof SluiceError
          ? error
          : new ListenerFailedError(`a before-call hook failed: ${(error as Error).message}`, { cause: error });
      this.#responder.refuse(out, refusal, callHeaders);
      return undefined;
    }
    this.#start(call, started);
    const result = detached
      ? await this.#detachedPath.run(
          call,
          incoming,
          { out, headers: callHeaders, preference: asked.preference },
          detached,
          asked.turn,
          keyCall,
          budgeted.stripUsage,
          ledger,
        )
      : await this.#sync.run(call, out, callHeaders, asked.turn, keyCall, budgeted.stripUsage, ledger);
    this.#outcomes.record(call, result, started.callTrace);
    return { call, result };
  }

  /**
   * A client key's tokens once the body is known: the call's worst case (a quarter of its bytes
   * for the prompt, its max_tokens × n for the output) until the engine reports usage. Resolves
   * with the body the runner gets (the client's, or one the key's token budget added to), or
   * undefined when the key's tokens refused the call. A detached call's room among the key's
   * stored results is reserved by the detached flow, once it knows the call is not a replay.
   */
  async #budget(
    route: CallRoute,
    body: Buffer,
    out: ServerResponse,
    keyCall: KeyCall,
  ): Promise<{ body: Buffer; stripUsage: boolean } | undefined> {
    const budget = keyCall.budget(route, body);
    const refusal = await keyCall.tokens(body.length, budget?.outputTokens);
    // The requests' headers were set at admission; the tokens' join them now.
    const tokenHeaders = keyCall.tokenHeaders;
    for (const name in tokenHeaders) out.setHeader(name, tokenHeaders[name]!);
    if (refusal) return void this.#responder.refuse(out, refusal);
    return budget ? { body: budget.body, stripUsage: budget.stripUsage } : { body, stripUsage: false };
  }

  /** Stamps the call's start and deadline, and counts it. */
  #start(call: MutableCall, { callTrace }: Started): void {
    const { clock, placerConfig } = this.#config;
    // startedAt excludes the client's upload: that time is the client's, not the platform's.
    call.startedAt = clock.now();
    call.placerDeadline =
      call.startedAt + (call.type === 'sync' ? placerConfig.placerTimeout : placerConfig.detachedPlacerTimeout);
    this.#metrics.calls.add(1, call.route);
    this.#window.called();
    if (callTrace) {
      callTrace.bind(call);
      callTrace.placer(this.#config.placer.name);
    }
  }
}

/** A call that was made, with how it ended: what the after-call listeners get. */
interface Served {
  call: GatewayCall;
  result: CallResult;
}
