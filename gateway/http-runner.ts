/**
 * A runner reached over HTTP: the gateway's side of the wire in runner/protocol.ts.
 *
 * tryExec sends the buffered call and reads only the status line and headers: a busy answer
 * (503 with the busy marker) or a refused connection mean nothing ran and the walk moves on;
 * anything else means the runner has the call, and its body streams back to the client. An offer
 * to a runner that this gateway alone already fills (as many calls in flight there as the slots it
 * last reported) is answered busy at once, without a round trip: a runner never runs more calls
 * than its slots, so the answer could only be busy.
 */
import { Pool } from 'undici';
import type { Dispatcher } from 'undici';
import { EndedCalls } from '../placer/load.ts';
import type { RunnerCall, Runner, RunnerLoad, TryExecResult } from '../placer/types.ts';
import {
  BUSY_HEADER,
  CALL_ID_HEADER,
  CALL_TYPE_HEADER,
  DEADLINE_HEADER,
  FUNCTION_HEADER,
  isConnectError,
} from '../runner/protocol.ts';
import type { ReportedLoad } from '../runner/protocol.ts';
import type { GatewayCall } from './call.ts';
import { CircuitBreaker } from './breaker.ts';
import type { BreakerOptions } from './breaker.ts';
import { CallTimeoutError, RunnerFailedError } from './errors.ts';

/** The runner's response once committed: status, headers, a streaming body, and trailers. */
export type RunnerResponse = Dispatcher.ResponseData;

/** Connection settings for one runner. */
export interface HttpRunnerOptions {
  /** How long connecting may take, in ms; a timeout counts as failed before commit. */
  connectTimeout: number;
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
   * Until this time (ms since epoch) offers fail at once without touching the network: the
   * runner refused a connection or a status fetch moments ago.
   */
  downUntil: number;
  /** Message of the last connect or status failure, for logs and /readyz. */
  lastError?: string;
  /** Load from the last /status probe of a static runner, and when. */
  report?: { load: ReportedLoad; at: number };
}

/** Extra time the gateway gives a runner to report its own deadline before timing it out, in ms. */
const TIMEOUT_GRACE_MS = 1000;

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
  readonly health: RunnerHealth = { models: undefined, reachable: true, downUntil: 0 };
  /** Set for runners that registered themselves; static runners have none. */
  registration: Registration | undefined;
  /** Calls this gateway has committed to this runner and not yet finished: the immediate load signal. */
  inFlight = 0;
  /** This gateway's recent calls here that ended, to correct the runner's last report; see {@link load}. */
  readonly #ended = new EndedCalls();
  /** Ejects the runner for a while after repeated failures before commit. */
  readonly breaker: CircuitBreaker;
  readonly #pool: Pool;

  /** `id` defaults to `host:port`, the identity of a runner in a static list. */
  constructor(url: URL, options: HttpRunnerOptions, id: string = url.host) {
    this.url = url;
    this.id = id;
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
    // A down or ejected runner stays in the pool's list, so hashing placers keep their order;
    // it is just passed over without touching the network.
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
          [DEADLINE_HEADER]: String(Date.now() + call.timeout),
        },
        body: call.body,
        signal: call.signal,
        // The runner enforces the deadline and says so; these only catch a runner gone silent.
        headersTimeout: call.timeout + TIMEOUT_GRACE_MS,
        bodyTimeout: call.timeout + TIMEOUT_GRACE_MS,
      });
    } catch (error) {
      this.inFlight--;
      if (isConnectError(error)) {
        this.markDown(error as Error);
        this.breaker.failure();
        return { kind: 'failed', error: error as Error };
      }
      throw committedFailure(this, error);
    }
    this.markUp();
    this.breaker.success();
    if (response.statusCode === 503 && response.headers[BUSY_HEADER] !== undefined) {
      this.inFlight--;
      // Read the short busy body so the connection goes back to the pool.
      await response.body.dump().catch(() => {});
      return { kind: 'busy' };
    }
    response.body.once('close', () => {
      this.inFlight--;
      this.#ended.record(sent, Date.now());
    });
    return { kind: 'placed', value: response };
  }

  /**
   * The runner's load for load-aware placers: this gateway's own in-flight count (immediate),
   * with the runner's last report (heartbeat or status probe) and its time.
   */
  load(): RunnerLoad {
    const report = this.registration?.report ?? this.health.report;
    if (!report) return { inFlight: this.inFlight };
    const { load, at } = report;
    // Our calls the report counted that have ended since are not running any more (EndedCalls).
    const running = typeof load.slotsInUse === 'number' ? Math.max(0, load.slotsInUse - this.#ended.since(at)) : load.slotsInUse;
    return {
      inFlight: this.inFlight,
      slots: load.slots,
      reported: { running, waiting: load.queue, ...(load.kvCacheUsage === undefined ? {} : { kvCacheUsage: load.kvCacheUsage }), at },
    };
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

  /** Records that the runner answered. */
  markUp(): void {
    this.health.reachable = true;
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

/** Maps an error after the call may have reached the runner into what the client gets. */
export function committedFailure(runner: { id: string }, error: unknown): Error {
  const code = (error as { code?: unknown }).code;
  if (code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT') {
    return new CallTimeoutError(`runner ${runner.id} did not finish the call within its timeout`, { cause: error });
  }
  if ((error as Error).name === 'AbortError' || code === 'UND_ERR_ABORTED') return error as Error;
  return new RunnerFailedError(
    `runner ${runner.id} failed after it took the call (${(error as Error).message}); the call was not retried because it may have run`,
    { cause: error },
  );
}
