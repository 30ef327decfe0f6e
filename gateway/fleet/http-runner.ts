/**
 * A runner reached over HTTP: the gateway's side of the wire in runner/protocol/, as a
 * transport plus its in-flight count. What the runner's answers say about its health (down,
 * hung, the breaker) is told to the {@link RunnerSignals} given with each offer; the pool's
 * RunnerEntry (runner-entry.ts) keeps that state and decides whether an offer is made at all.
 *
 * send() sends the buffered call and reads only the status line and headers. Whether the call
 * is committed is decided by what the runner said, never by guesswork about what reached it:
 * - a busy answer (503 with the busy marker) is the runner's word that nothing ran: try elsewhere;
 * - no answer at all (a refused connection, a connection closed before any response, or nothing
 *   within responseTimeout) means the engine never saw the call, because a runner acknowledges
 *   a call (`102 Processing`) before it asks its engine: the call goes elsewhere, and a runner
 *   that stayed silent is reported hung;
 * - once acknowledged the call is committed: silence for responseTimeout before the status line,
 *   or for streamIdleTimeout between body chunks, ends it with GW_RUNNER_STALLED, and any other
 *   failure is a failure after commit, never retried.
 * Every failure is reported as one (the breaker counts it); busy answers and calls that ended
 * well as successes.
 */
import { Pool } from 'undici';
import type { Dispatcher } from 'undici';
import type { AbortWatch, Clock } from '../../placer/kernel/index.ts';
import { EndedCalls, runnerLoad } from './runner-load.ts';
import type { StampedReport } from './runner-load.ts';
import type { RunnerLoad, TryExecResult } from '../../placer/types.ts';
import {
  BODY_DIGEST_HEADER,
  BUSY_HEADER,
  CALL_ID_HEADER,
  CALL_TYPE_HEADER,
  DEADLINE_HEADER,
  ERROR_TRAILER,
  FUNCTION_HEADER,
  RESPONSE_TIMEOUT_HEADER,
  SIGNATURE_HEADER,
  TIMEOUT_HEADER,
} from '../../runner/protocol/index.ts';
import type { GatewayCall } from '../http/index.ts';
import { failSpan, traceOfCall } from '../observe/index.ts';
import type { CallSigner, TlsMaterial } from './data-plane.ts';
import { isSilence, transportFailure } from './transport-failure.ts';
import { CallTimeoutError, RequestNotForwardableError, RunnerFailedError, RunnerStalledError } from '../errors.ts';

/** The runner's response once committed: status, headers, a streaming body, and trailers. */
export type RunnerResponse = Dispatcher.ResponseData;

/** Connection settings for one runner. */
export interface HttpRunnerOptions {
  /** How long connecting may take, in ms; a timeout counts as failed before commit. */
  connectTimeout: number;
  /**
   * The response bound, in ms: no response at all within it and the call was never taken (the
   * runner is hung); after the acknowledgement, the longest silence before the status line.
   */
  responseTimeout: number;
  /** The longest silence between body chunks of a committed call, in ms. */
  streamIdleTimeout: number;
  /** The gateway's clock: placer deadlines, and the send and end times of calls, are on it. */
  clock: Clock;
  /** Most connections kept open to this runner. */
  connections?: number;
  /** Signs every call sent (the call secret's signature); absent, calls go unsigned. */
  signer?: CallSigner;
  /** The client certificate, key and CA of mutual TLS with an https runner. */
  tls?: TlsMaterial;
}

/**
 * What an offer's answer, or its absence, says about the runner, told as it happens. The pool's
 * RunnerEntry implements it; a failure or success is the breaker's business.
 */
export interface RunnerSignals {
  /** The runner answered something (a status line, a busy answer). */
  answered(): void;
  /** A connection was refused, or ended before any answer. */
  down(error: Error): void;
  /** The runner took a connection and then said nothing for responseTimeout. */
  hung(why: string): void;
  /** A failure: before commit, or a committed call that ended badly. */
  failed(): void;
  /** A sign of life: a busy answer, or a committed call that ended well. */
  succeeded(): void;
  /** A committed call of this gateway's ended, well or not: one of its slots is free again. */
  released?(): void;
}

/** How a runner's connections are closed. */
export interface CloseOptions {
  /** Aborts calls still streaming instead of letting them end first. @default false */
  abortCalls?: boolean;
}

/** A runner the gateway calls over HTTP/1.1 keep-alive connections. */
export class HttpRunner {
  readonly url: URL;
  #inFlight = 0;
  /** This gateway's recent calls here that ended, to correct the runner's last report; see {@link load}. */
  readonly #ended = new EndedCalls();
  /**
   * Bodies of detached calls being read. Such a body may rightly be silent for as long as the
   * engine works (a non-streamed answer comes whole at its end), so it is bounded by whether the
   * runner is alive, not by its own silence: see {@link cutQuietBodies}.
   */
  readonly #quietBodies = new Set<RunnerResponse['body']>();
  readonly #pool: Pool;
  readonly #options: HttpRunnerOptions;
  /** responseTimeout as the wire header spells it, made once. */
  readonly #responseTimeoutText: string;

  constructor(url: URL, options: HttpRunnerOptions) {
    this.url = url;
    this.#options = options;
    this.#responseTimeoutText = String(options.responseTimeout);
    const { tls } = options;
    this.#pool = new Pool(url.origin, {
      connectTimeout: options.connectTimeout,
      ...(tls ? { connect: { cert: tls.cert, key: tls.key, ca: tls.ca } } : {}),
      connections: options.connections ?? null,
      // The runner keeps idle sockets 65 s; closing ours first avoids writing into a closing one.
      keepAliveTimeout: 30_000,
      keepAliveMaxTimeout: 60_000,
      pipelining: 1,
    });
  }

  /** Calls this gateway has committed to this runner and not yet finished: the immediate load signal. */
  get inFlight(): number {
    return this.#inFlight;
  }

  /**
   * Sends the call and waits for its status line. See the file comment for what each outcome
   * means; `signals` is told what the runner's answer says of its health. `id` names the runner
   * in error messages.
   */
  async send(call: GatewayCall, id: string, signals: RunnerSignals): Promise<TryExecResult<RunnerResponse>> {
    const { responseTimeout, streamIdleTimeout, clock } = this.#options;
    let acknowledged = false;
    // Waiting for an acknowledgement must not outlast the placer deadline. Only an offer made
    // within responseTimeout of the deadline needs its own signal for that.
    let signal: AbortWatch = call.abort;
    let deadlineTimer: NodeJS.Timeout | undefined;
    const untilDeadline = call.placerDeadline - clock.now();
    if (untilDeadline < responseTimeout) {
      const deadline = new AbortController();
      deadlineTimer = setTimeout(
        () => acknowledged || deadline.abort(new PlacerDeadlineReached()),
        Math.max(0, untilDeadline),
      );
      signal = AbortSignal.any([call.signal, deadline.signal]);
    }
    let response: RunnerResponse;
    // Counted from the moment the call is sent: a non-streamed answer's headers come only when
    // the engine is done, and load-aware placers must see the call before that.
    this.#inFlight++;
    const sent = clock.now();
    // The offer's CLIENT span, when the call is traced: its context is the runner's parent.
    const callTrace = traceOfCall(call);
    const offer = callTrace?.offer(id, this.url, call.method);
    try {
      response = await this.#pool.request({
        method: call.method as Dispatcher.HttpMethod,
        path: call.path,
        headers: this.#wireHeaders(call, offer?.headers),
        body: call.body,
        // undici takes any object with `aborted`, `reason` and the two listener methods.
        signal: signal as AbortSignal,
        // undici restarts this on every informational response: the runner's acknowledgements.
        headersTimeout: responseTimeout,
        // A detached call's body is bounded by the runner's liveness instead (cutQuietBodies);
        // this only backs up the runner's own budget.
        bodyTimeout: call.type === 'detached' ? call.timeout + streamIdleTimeout : streamIdleTimeout,
        onInfo: () => {
          acknowledged = true;
        },
      });
    } catch (error) {
      clearTimeout(deadlineTimer);
      this.#inFlight--;
      if (offer) {
        failSpan(offer.span, error as Error);
        offer.span.end();
      }
      return this.#offerFailed(call, id, signals, error, acknowledged);
    }
    offer?.span.setAttribute('http.response.status_code', response.statusCode);
    clearTimeout(deadlineTimer);
    signals.answered();
    if (response.statusCode === 503 && response.headers[BUSY_HEADER] !== undefined) {
      this.#inFlight--;
      signals.succeeded();
      // Read the short busy body so the connection goes back to the pool.
      await response.body.dump().catch(() => {});
      offer?.span.setAttribute('sluice.offer.answer', 'busy');
      offer?.span.end();
      return { kind: 'busy' };
    }
    if (offer) callTrace!.committed(offer.span);
    this.#watch(call, response, sent, signals);
    return { kind: 'placed', value: response };
  }

  /**
   * The call's headers as this runner gets them, flat (name, value, ...) as undici takes them
   * without copying an object: the client's forwardable ones, then the wire's own. A client's
   * header spelled like one of the wire's is left out, never sent beside the gateway's.
   */
  #wireHeaders(call: GatewayCall, trace?: Record<string, string>): string[] {
    const flat: string[] = [];
    for (const name in call.headers) {
      const value = call.headers[name];
      if (value === undefined || WIRE_HEADERS.has(name) || (trace && TRACE_HEADERS.has(name))) continue;
      if (typeof value === 'string') flat.push(name, value);
      else for (const one of value) flat.push(name, one);
    }
    flat.push(
      CALL_ID_HEADER,
      call.id,
      CALL_TYPE_HEADER,
      call.type,
      FUNCTION_HEADER,
      call.fn,
      TIMEOUT_HEADER,
      String(call.timeout),
      RESPONSE_TIMEOUT_HEADER,
      this.#responseTimeoutText,
    );
    // The offer's trace context replaces the client's: the runner's span is the offer's child.
    if (trace) for (const name in trace) flat.push(name, trace[name]!);
    this.#options.signer?.sign(call, flat);
    return flat;
  }

  /**
   * What an offer that threw means: see the file comment. Resolves with a failure before commit,
   * or throws what the client gets for a failure after it.
   */
  #offerFailed(
    call: GatewayCall,
    id: string,
    signals: RunnerSignals,
    error: unknown,
    acknowledged: boolean,
  ): TryExecResult<RunnerResponse> {
    if (call.abort.aborted) throw error;
    if (error instanceof PlacerDeadlineReached) return { kind: 'failed', error };
    const failure = transportFailure(error);
    switch (failure) {
      case 'unsendable':
        throw new RequestNotForwardableError(
          `the call could not be sent to a runner: ${(error as Error).message}; nothing reached a runner`,
          { cause: error },
        );
      case 'closed-here':
        return { kind: 'failed', error: error as Error };
      case 'unconnected':
        signals.down(error as Error);
        signals.failed();
        return { kind: 'failed', error: error as Error };
    }
    const silent = failure === 'no-answer';
    signals.failed();
    if (!acknowledged) {
      // The runner acknowledges before it asks its engine, so the engine never saw this call.
      const why = silent
        ? `no acknowledgement within responseTimeout (${this.#options.responseTimeout} ms)`
        : `the connection ended before any answer (${(error as Error).message})`;
      if (silent) signals.hung(why);
      else signals.down(error as Error);
      return {
        kind: 'failed',
        error: new Error(`runner ${id} did not take the call: ${why}; nothing ran`, { cause: error }),
      };
    }
    if (silent) signals.hung(`silent for ${this.#options.responseTimeout} ms after acknowledging a call`);
    throw committedFailure({ id }, error);
  }

  /** Keeps the in-flight count and the signals told of how a committed call's response ends. */
  #watch(call: GatewayCall, response: RunnerResponse, sent: number, signals: RunnerSignals): void {
    const body = response.body;
    if (call.type === 'detached') {
      // Only listened to for its end: a 'data' listener here would set the body flowing before
      // its reader (DetachedCalls) is attached, and lose what came in between.
      this.#quietBodies.add(body);
      body.once('close', () => this.#quietBodies.delete(body));
    }
    const failedBeforeAnswer = response.headers[ERROR_TRAILER] !== undefined;
    body.once('end', () => {
      if (failedBeforeAnswer || response.trailers[ERROR_TRAILER] !== undefined) signals.failed();
      else signals.succeeded();
    });
    body.once('error', () => {
      // A client that left, or a cancelled detached call, says nothing about the runner.
      if (!call.abort.aborted) signals.failed();
    });
    body.once('close', () => {
      this.#inFlight--;
      this.#ended.record(sent, this.#options.clock.now());
      signals.released?.();
    });
  }

  /**
   * The runner's load for load-aware placers: this gateway's own in-flight count (immediate),
   * with the runner's last report (heartbeat or status probe) corrected by our calls that ended since.
   */
  load(report: StampedReport | undefined): RunnerLoad {
    return runnerLoad(this.#inFlight, report, this.#ended);
  }

  /** How many detached calls' bodies are being read from this runner. */
  get quietCalls(): number {
    return this.#quietBodies.size;
  }

  /**
   * Ends every detached call this runner holds with `error`: the runner's owner found it silent
   * for too long (see RunnerEntry.cutSilentCalls). Returns how many it ended.
   */
  cutQuietBodies(error: Error): number {
    const cut = this.#quietBodies.size;
    for (const body of this.#quietBodies) body.destroy(error);
    this.#quietBodies.clear();
    return cut;
  }

  /** GETs a path on the runner (status probes); the caller consumes the body. */
  get(path: string, timeout: number): Promise<RunnerResponse> {
    return this.#pool.request({ method: 'GET', path, headersTimeout: timeout, bodyTimeout: timeout });
  }

  /** Closes the connections: at once when idle, and each busy one when its call ends, unless `abortCalls`. */
  async close(options: CloseOptions = {}): Promise<void> {
    if (options.abortCalls) await this.#pool.destroy();
    else await this.#pool.close();
  }
}

/** The W3C trace context headers, replaced by an offer's own when the call is traced. */
const TRACE_HEADERS: ReadonlySet<string> = new Set(['traceparent', 'tracestate']);

/** The headers the gateway sets on every call it sends: a client's own of these names never passes. */
const WIRE_HEADERS: ReadonlySet<string> = new Set([
  CALL_ID_HEADER,
  CALL_TYPE_HEADER,
  FUNCTION_HEADER,
  TIMEOUT_HEADER,
  RESPONSE_TIMEOUT_HEADER,
  DEADLINE_HEADER,
  SIGNATURE_HEADER,
  BODY_DIGEST_HEADER,
]);

/** Thrown into an offer that waited for an acknowledgement until the placer deadline. */
class PlacerDeadlineReached extends Error {
  constructor() {
    super('the placer deadline passed before the runner acknowledged the call; nothing ran');
  }
}

/** Maps an error after the runner acknowledged the call into what the client gets. */
export function committedFailure(runner: { id: string }, error: unknown): Error {
  const failure = transportFailure(error);
  if (isSilence(failure)) {
    const silence =
      failure === 'no-answer'
        ? "stopped acknowledging the call for longer than the gateway's responseTimeout"
        : "sent nothing for longer than the gateway's streamIdleTimeout";
    return new RunnerStalledError(
      `runner ${runner.id} ${silence} after it took the call; the call was not retried because it may have run`,
      { cause: error },
    );
  }
  // Already what the client gets: a bound of ours ended the call (cutSilentCalls, say).
  if (error instanceof CallTimeoutError || error instanceof RunnerStalledError) return error;
  if (failure === 'aborted') return error as Error;
  return new RunnerFailedError(
    `runner ${runner.id} failed after it took the call (${(error as Error).message}); the call was not retried because it may have run`,
    { cause: error },
  );
}
