/**
 * A runner reached over HTTP: the gateway's side of the wire in runner/protocol.ts.
 *
 * tryExec sends the buffered call and reads only the status line and headers. Whether the call
 * is committed is decided by what the runner said, never by guesswork about what reached it:
 * - a busy answer (503 with the busy marker) is the runner's word that nothing ran: try elsewhere;
 * - no answer at all (a refused connection, a connection closed before any response, or nothing
 *   within responseTimeout) means the engine never saw the call, because a runner acknowledges
 *   a call (`102 Processing`) before it asks its engine: the call goes elsewhere, and a runner
 *   that stayed silent is marked hung;
 * - once acknowledged the call is committed: silence for responseTimeout before the status line,
 *   or for streamIdleTimeout between body chunks, ends it with GW_RUNNER_STALLED, and any other
 *   failure is a failure after commit, never retried.
 * Every failure counts towards the runner's circuit breaker (outlier ejection); busy answers
 * and calls that ended well count as successes.
 *
 * An offer to a runner that this gateway alone already fills (as many calls in flight there as
 * the slots it last reported) is answered busy at once, without a round trip: a runner never runs
 * more calls than its slots, so the answer could only be busy.
 */
import { Pool } from 'undici';
import type { Dispatcher } from 'undici';
import { EndedCalls, runnerLoad } from './runner-load.ts';
import type { RunnerCall, Runner, RunnerLoad, TryExecResult } from '../placer/types.ts';
import {
  BUSY_HEADER,
  CALL_ID_HEADER,
  CALL_TYPE_HEADER,
  ERROR_TRAILER,
  FUNCTION_HEADER,
  RESPONSE_TIMEOUT_HEADER,
  TIMEOUT_HEADER,
  isConnectError,
} from '../runner/protocol.ts';
import type { ReportedLoad } from '../runner/protocol.ts';
import type { GatewayCall } from './call.ts';
import { CircuitBreaker } from './breaker.ts';
import type { BreakerOptions } from './breaker.ts';
import { CallTimeoutError, RequestNotForwardableError, RunnerFailedError, RunnerStalledError } from './errors.ts';

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
  /** The clock placer deadlines are on. */
  now: () => number;
  /** Most connections kept open to this runner. */
  connections?: number;
  /** Circuit breaker settings; see breaker.ts. */
  breaker: BreakerOptions;
}

/** What the gateway last learned about a runner from its /status and from its calls. */
export interface RunnerHealth {
  /**
   * Models listed at the last status fetch that found the runner's engine ready; undefined
   * until then, or while its engine is starting (the gateway cannot tell yet what it serves).
   */
  models: readonly string[] | undefined;
  /** False after a failed connect or status fetch, true again after a successful one. */
  reachable: boolean;
  /**
   * True once the runner left a call unacknowledged for responseTimeout, or a status probe
   * unanswered: it is passed over until a probe finds it answering again.
   */
  hung: boolean;
  /**
   * Until this time (ms since epoch) offers fail at once without touching the network: the
   * runner refused a connection or a status fetch moments ago.
   */
  downUntil: number;
  /** Message of the last connect or status failure, for logs and /readyz. */
  lastError?: string;
  /** Load from the last /status probe of a static runner, and when. */
  report?: { load: ReportedLoad; at: number };
}

/** How long a runner that refused a connection is passed over before it is tried again, in ms. */
export const DOWN_BACKOFF_MS = 1000;

/** What the gateway knows of a runner that registered itself, from its heartbeats. */
export interface Registration {
  /** `live` while heartbeats arrive; `unreachable` after several are missed (not placed on). */
  state: 'live' | 'unreachable';
  /** When the last registration or heartbeat arrived, ms since the epoch. */
  lastSeen: number;
  /** The runner's engine can take calls. */
  ready: boolean;
  /** The runner is draining (it said so), or an operator asked this gateway to drain it. */
  draining: boolean;
  drainRequested: boolean;
  version: string;
  /** The load the runner last reported, and when. */
  report: { load: ReportedLoad; at: number } | undefined;
}

/** A runner the gateway calls over HTTP/1.1 keep-alive connections. */
export class HttpRunner implements Runner<RunnerResponse> {
  readonly id: string;
  readonly url: URL;
  readonly health: RunnerHealth = { models: undefined, reachable: true, hung: false, downUntil: 0 };
  /** Set for runners that registered themselves; static runners have none. */
  registration: Registration | undefined;
  /** Calls this gateway has committed to this runner and not yet finished: the immediate load signal. */
  inFlight = 0;
  /** This gateway's recent calls here that ended, to correct the runner's last report; see {@link load}. */
  readonly #ended = new EndedCalls();
  /**
   * Bodies of detached calls being read. Such a body may rightly be silent for as long as the
   * engine works (a non-streamed answer comes whole at its end), so it is bounded by whether the
   * runner is alive, not by its own silence: see {@link cutSilentCalls}.
   */
  readonly #quietBodies = new Set<RunnerResponse['body']>();
  /** When the runner last answered anything: a call, a busy answer, a status probe. */
  #heardAt: number;
  /** Ejects the runner for a while after repeated failures before commit. */
  readonly breaker: CircuitBreaker;
  readonly #pool: Pool;
  readonly #o: HttpRunnerOptions;

  /** `id` defaults to `host:port`, the identity of a runner in a static list. */
  constructor(url: URL, options: HttpRunnerOptions, id: string = url.host) {
    this.url = url;
    this.id = id;
    this.#o = options;
    this.#heardAt = options.now();
    this.breaker = new CircuitBreaker(options.breaker);
    this.#pool = new Pool(url.origin, {
      connectTimeout: options.connectTimeout,
      connections: options.connections ?? null,
      // The runner keeps idle sockets 65 s; closing ours first avoids writing into a closing one.
      keepAliveTimeout: 30_000,
      keepAliveMaxTimeout: 60_000,
      pipelining: 1,
    });
  }

  /** Offers the call. See the file comment for what each outcome means. */
  async tryExec(runnerCall: RunnerCall): Promise<TryExecResult<RunnerResponse>> {
    // Method parameters are bivariant: the gateway's pool only ever hands its own calls here.
    const call = runnerCall as GatewayCall;
    // A down, hung or ejected runner stays in the pool's list, so hashing placers keep their
    // order; it is just passed over without touching the network.
    if (this.health.hung) {
      return { kind: 'failed', error: new Error(`runner ${this.id} is hung: ${this.health.lastError ?? 'it stopped answering'}`) };
    }
    if (Date.now() < this.health.downUntil) {
      return { kind: 'failed', error: new Error(`runner ${this.id} is down: ${this.health.lastError ?? 'unreachable'}`) };
    }
    if (!this.breaker.allows()) {
      return { kind: 'failed', error: new Error(`runner ${this.id} is ejected: its circuit breaker is open`) };
    }
    // While every runner is full, each waiting call re-offers itself to each of them every
    // retryAllDelay; a runner full of this gateway's own calls need not pay a round trip for each.
    // Still a busy to the walk (and to its retry metric): nothing ran, try elsewhere or later.
    // Not a sign of life either, so the breaker and down state are left as they are.
    if (this.fullOfOwnCalls()) return { kind: 'busy' };

    const { responseTimeout, streamIdleTimeout } = this.#o;
    let acknowledged = false;
    // Waiting for an acknowledgement must not outlast the placer deadline. Only an offer made
    // within responseTimeout of the deadline needs its own signal for that.
    let signal = call.signal;
    let deadlineTimer: NodeJS.Timeout | undefined;
    const untilDeadline = call.placerDeadline - this.#o.now();
    if (untilDeadline < responseTimeout) {
      const deadline = new AbortController();
      deadlineTimer = setTimeout(() => acknowledged || deadline.abort(new PlacerDeadlineReached()), Math.max(0, untilDeadline));
      signal = AbortSignal.any([call.signal, deadline.signal]);
    }
    let response: RunnerResponse;
    // Counted from the moment the call is sent: a non-streamed answer's headers come only when
    // the engine is done, and load-aware placers must see the call before that.
    this.inFlight++;
    const sent = Date.now();
    try {
      response = await this.#pool.request({
        method: call.method as Dispatcher.HttpMethod,
        path: call.path,
        headers: {
          ...call.headers,
          [CALL_ID_HEADER]: call.id,
          [CALL_TYPE_HEADER]: call.type,
          [FUNCTION_HEADER]: call.fn,
          [TIMEOUT_HEADER]: String(call.timeout),
          [RESPONSE_TIMEOUT_HEADER]: String(responseTimeout),
        },
        body: call.body,
        signal,
        // undici restarts this on every informational response: the runner's acknowledgements.
        headersTimeout: responseTimeout,
        // A detached call's body is bounded by the runner's liveness instead (cutSilentCalls);
        // this only backs up the runner's own budget.
        bodyTimeout: call.type === 'detached' ? call.timeout + streamIdleTimeout : streamIdleTimeout,
        onInfo: () => {
          acknowledged = true;
        },
      });
    } catch (error) {
      clearTimeout(deadlineTimer);
      this.inFlight--;
      return this.#offerFailed(call, error, acknowledged);
    }
    clearTimeout(deadlineTimer);
    this.markUp();
    if (response.statusCode === 503 && response.headers[BUSY_HEADER] !== undefined) {
      this.inFlight--;
      this.breaker.success();
      // Read the short busy body so the connection goes back to the pool.
      await response.body.dump().catch(() => {});
      return { kind: 'busy' };
    }
    this.#watch(call, response, sent);
    return { kind: 'placed', value: response };
  }

  /**
   * What an offer that threw means: see the file comment. Resolves with a failure before commit,
   * or throws what the client gets for a failure after it.
   */
  #offerFailed(call: GatewayCall, error: unknown, acknowledged: boolean): TryExecResult<RunnerResponse> {
    const code = (error as { code?: unknown }).code;
    if (call.signal.aborted) throw error;
    if (error instanceof PlacerDeadlineReached) return { kind: 'failed', error };
    if (code === 'UND_ERR_INVALID_ARG' || code === 'UND_ERR_NOT_SUPPORTED') {
      // undici refused the request before sending a byte: no runner would take it either.
      throw new RequestNotForwardableError(`the call could not be sent to a runner: ${(error as Error).message}; nothing reached a runner`, { cause: error });
    }
    if (code === 'UND_ERR_CLOSED' || code === 'UND_ERR_DESTROYED') {
      // This runner's connections were closed here (it left the pool, or shutdown): nothing was sent.
      return { kind: 'failed', error: error as Error };
    }
    if (isConnectError(error)) {
      this.markDown(error as Error);
      this.breaker.failure();
      return { kind: 'failed', error: error as Error };
    }
    const silent = code === 'UND_ERR_HEADERS_TIMEOUT';
    this.breaker.failure();
    if (!acknowledged) {
      // The runner acknowledges before it asks its engine, so the engine never saw this call.
      const why = silent ? `no acknowledgement within responseTimeout (${this.#o.responseTimeout} ms)` : `the connection ended before any answer (${(error as Error).message})`;
      if (silent) this.markHung(why);
      else this.markDown(error as Error);
      return { kind: 'failed', error: new Error(`runner ${this.id} did not take the call: ${why}; nothing ran`, { cause: error }) };
    }
    if (silent) this.markHung(`silent for ${this.#o.responseTimeout} ms after acknowledging a call`);
    throw committedFailure(this, error);
  }

  /** Keeps the in-flight count and the breaker told of how a committed call's response ends. */
  #watch(call: GatewayCall, response: RunnerResponse, sent: number): void {
    const body = response.body;
    if (call.type === 'detached') {
      // Only listened to for its end: a 'data' listener here would set the body flowing before
      // its reader (DetachedCalls) is attached, and lose what came in between.
      this.#quietBodies.add(body);
      body.once('close', () => this.#quietBodies.delete(body));
    }
    const failedBeforeAnswer = response.headers[ERROR_TRAILER] !== undefined;
    body.once('end', () => {
      if (failedBeforeAnswer || response.trailers[ERROR_TRAILER] !== undefined) this.breaker.failure();
      else this.breaker.success();
    });
    body.once('error', () => {
      // A client that left, or a cancelled detached call, says nothing about the runner.
      if (!call.signal.aborted) this.breaker.failure();
    });
    body.once('close', () => {
      this.inFlight--;
      this.#ended.record(sent, Date.now());
    });
  }

  /**
   * The runner's load for load-aware placers: this gateway's own in-flight count (immediate),
   * with the runner's last report (heartbeat or status probe) and its time.
   */
  load(): RunnerLoad {
    return runnerLoad(this.inFlight, this.registration?.report ?? this.health.report, this.#ended);
  }

  /**
   * True when this gateway's own in-flight calls on the runner reach the slots it last reported
   * (heartbeat or status probe), so an offer could only be refused; false while its slots are not
   * known as a finite number above 0. Only this gateway's calls count, so a runner filled by
   * other gateways is still asked, and says busy itself.
   */
  fullOfOwnCalls(): boolean {
    const slots = (this.registration?.report ?? this.health.report)?.load.slots;
    return typeof slots === 'number' && Number.isFinite(slots) && slots > 0 && this.inFlight >= slots;
  }

  /** Whether the pool may offer calls to this runner now; static runners always (down ones fail fast). */
  placeable(): boolean {
    const r = this.registration;
    return r === undefined || (r.state === 'live' && r.ready && !r.draining && !r.drainRequested);
  }

  /** Records a failed connect or status fetch: the runner is passed over for a moment. */
  markDown(error: Error): void {
    this.health.reachable = false;
    this.health.lastError = error.message;
    this.health.downUntil = Date.now() + DOWN_BACKOFF_MS;
  }

  /**
   * Records that the runner accepted a connection and then said nothing: passed over until a
   * status probe finds it answering (the pool probes hung runners, registered ones included).
   */
  markHung(why: string): void {
    this.health.reachable = false;
    this.health.hung = true;
    this.health.lastError = why;
  }

  /**
   * When the runner was last heard from, on the placer clock: an answer to a call or a probe, or
   * (registered runners) a heartbeat.
   */
  lastHeard(): number {
    return Math.max(this.#heardAt, this.registration?.lastSeen ?? -Infinity);
  }

  /**
   * Ends the detached calls this runner holds when it has not been heard from for
   * streamIdleTimeout: a runner that is hung or gone would otherwise hold them until their
   * budget ran out. The pool calls this every status interval. Returns how many it ended.
   */
  cutSilentCalls(): number {
    if (this.#quietBodies.size === 0) return 0;
    const silence = this.#o.now() - this.lastHeard();
    if (silence <= this.#o.streamIdleTimeout) return 0;
    const cut = this.#quietBodies.size;
    for (const body of this.#quietBodies) {
      body.destroy(
        new RunnerStalledError(
          `runner ${this.id} was not heard from for ${Math.round(silence)} ms (streamIdleTimeout ${this.#o.streamIdleTimeout} ms) while it held the call; the call was not retried because it may have run`,
        ),
      );
    }
    this.#quietBodies.clear();
    return cut;
  }

  /** Records that the runner answered. */
  markUp(): void {
    this.#heardAt = this.#o.now();
    this.health.reachable = true;
    this.health.hung = false;
    this.health.downUntil = 0;
  }

  /** GETs a path on the runner (status probes); the caller consumes the body. */
  get(path: string, timeout: number): Promise<RunnerResponse> {
    return this.#pool.request({ method: 'GET', path, headersTimeout: timeout, bodyTimeout: timeout });
  }

  /** Closes idle connections; with `force`, aborts calls still streaming too. */
  async close(force = false): Promise<void> {
    if (force) await this.#pool.destroy();
    else await this.#pool.close();
  }
}

/** Thrown into an offer that waited for an acknowledgement until the placer deadline. */
class PlacerDeadlineReached extends Error {
  constructor() {
    super('the placer deadline passed before the runner acknowledged the call; nothing ran');
  }
}

/** Maps an error after the runner acknowledged the call into what the client gets. */
export function committedFailure(runner: { id: string }, error: unknown): Error {
  const code = (error as { code?: unknown }).code;
  if (code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT') {
    const silence =
      code === 'UND_ERR_HEADERS_TIMEOUT'
        ? 'stopped acknowledging the call for longer than the gateway\'s responseTimeout'
        : 'sent nothing for longer than the gateway\'s streamIdleTimeout';
    return new RunnerStalledError(`runner ${runner.id} ${silence} after it took the call; the call was not retried because it may have run`, { cause: error });
  }
  // Already what the client gets: a bound of ours ended the call (cutSilentCalls, say).
  if (error instanceof CallTimeoutError || error instanceof RunnerStalledError) return error;
  if ((error as Error).name === 'AbortError' || code === 'UND_ERR_ABORTED') return error as Error;
  return new RunnerFailedError(
    `runner ${runner.id} failed after it took the call (${(error as Error).message}); the call was not retried because it may have run`,
    { cause: error },
  );
}
