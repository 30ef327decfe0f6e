/**
 * A runner's membership in one gateway's pool. The runner dials out (nodes sit behind
 * firewalls), registers, then heartbeats its load; when the gateway restarts and forgets it (a
 * 404 to a heartbeat) it registers again at once, so a fleet comes back without touching a node.
 * Failures are retried forever with full-jitter exponential backoff so a fleet does not return
 * in lockstep. The wire is in protocol/.
 */
import { Pool } from 'undici';
import type { BackoffSteps, Logger } from '../placer/kernel/index.ts';
import { checksFor, fullJitterBackoff, rule, silentLogger } from '../placer/kernel/index.ts';
import { RunnerConfigError } from './errors.ts';
import { REGISTER_PATH, heartbeatPath, runnerPath } from './protocol/index.ts';
import { gatewayAnswerKind, parseEngineOrder } from './protocol/index.ts';
import type {
  CacheAnnouncement,
  EngineOrder,
  HeartbeatAnswer,
  HostedEngine,
  RegistrationAccepted,
  ReportedLoad,
  RunnerHeartbeat,
  RunnerRegistration,
  RunnerStatus,
} from './protocol/index.ts';

/** First backoff step after a failure, ms; doubled per failure in a row. */
export const BACKOFF_BASE_MS = 500;
/** Longest backoff step, ms; also the step after a refused token, which no quick retry fixes. */
export const BACKOFF_CAP_MS = 30_000;

/** Timers a registration schedules with; tests inject ones that record delays and fire at once. */
export interface RegistrationTimers {
  setTimeout(callback: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

/** The process's own timers. */
export const systemTimers: RegistrationTimers = Object.freeze({
  setTimeout: (callback: () => void, ms: number): unknown => setTimeout(callback, ms),
  clearTimeout: (handle: unknown): void => clearTimeout(handle as NodeJS.Timeout),
});

/** The registration's backoff: a ceiling doubling from 500 ms up to 30 s, full jitter below it. */
const BACKOFF_STEPS: BackoffSteps = Object.freeze({ base: BACKOFF_BASE_MS, cap: BACKOFF_CAP_MS });

/** How to join one gateway; createRunner builds these from its validated options. */
export interface GatewayRegistrationOptions {
  /** The gateway's base URL; a path prefix is kept. */
  gateway: URL;
  /** Sent as `authorization: Bearer`; never logged. */
  token: string;
  /** Where the gateway should call this runner. */
  url: string;
  /** The runner as it is now; read for every registration and heartbeat. */
  status: () => RunnerStatus;
  /** Heartbeat period when the gateway's registration answer names none, ms. @default see registrationDefaults */
  heartbeatInterval?: number;
  /** Engine load older than this is not reported, ms. @default see registrationDefaults */
  loadStaleAfter?: number;
  /** Called once when a heartbeat answer carries `drain: true`. */
  onDrainRequested?: () => void;
  /**
   * Called with every heartbeat answer that carries `host` (an engine order, or null for none),
   * checked, and the hosted engine the beat it answers reported; a bad order is logged and
   * dropped. Without it, `host` is not read at all: a runner with an engine of its own takes no
   * orders.
   */
  onHostOrder?: (host: EngineOrder | null, answered: HostedEngine | undefined) => void;
  /** Limit on connecting, and on waiting for each answer, ms. @default see registrationDefaults */
  requestTimeout?: number;
  /** @default see registrationDefaults */
  logger?: Logger;
  /** @default see registrationDefaults */
  random?: () => number;
  /** @default see registrationDefaults */
  timers?: RegistrationTimers;
  /** The CA an https gateway's certificate is checked against (the runner's tls.ca). @default the system's CAs */
  ca?: string | Buffer;
  /** How gateways name the engine's cache blocks now; read for every registration and heartbeat. @default none */
  cache?: () => CacheAnnouncement | undefined;
}

/** A registration's defaults, in one place. */
export const registrationDefaults = Object.freeze({
  heartbeatInterval: 1000,
  loadStaleAfter: 3000,
  requestTimeout: 2000,
  logger: silentLogger as Logger,
  random: Math.random as () => number,
  timers: systemTimers,
});

/**
 * The timings come from createRunner's checked options; the logger is checked here, as every
 * module that takes one checks it.
 */
const registrationRules = { logger: rule.logger() };

const check = checksFor(RunnerConfigError);

/** What one request to the gateway came to; `status` 0 when no answer came at all. */
type Answer = { status: number; json?: unknown; error?: unknown };

/** Registers a runner with one gateway and keeps it registered until stopped. */
export class GatewayRegistration {
  readonly #options: Required<Omit<GatewayRegistrationOptions, 'onDrainRequested' | 'onHostOrder' | 'ca' | 'cache'>> &
    Pick<GatewayRegistrationOptions, 'onDrainRequested' | 'onHostOrder' | 'cache'>;
  readonly #pool: Pool;
  readonly #base: string;
  readonly #log: Logger;
  #phase: 'register' | 'heartbeat' = 'register';
  #interval: number;
  #failures = 0;
  /** True while the gateway knows this runner as far as we can tell: a DELETE then means something. */
  #known = false;
  #drainNotified = false;
  #beatSoon = false;
  #started = false;
  #stopped = false;
  #closed = false;
  #timer: unknown;
  #inFlight: Promise<void> | undefined;

  /** @throws {RunnerConfigError} when the logger lacks a method. */
  constructor(options: GatewayRegistrationOptions) {
    this.#options = { ...options, ...check.resolve(registrationDefaults, registrationRules, options) };
    const timeout = this.#options.requestTimeout;
    this.#pool = new Pool(options.gateway.origin, {
      connections: 1,
      connect: { timeout, ...(options.ca === undefined ? {} : { ca: options.ca }) },
      headersTimeout: timeout,
      bodyTimeout: timeout,
    });
    this.#base = options.gateway.pathname.replace(/\/+$/, '');
    this.#interval = this.#options.heartbeatInterval;
    // The origin only: a URL's userinfo or query has no business in a log line.
    this.#log = this.#options.logger.child({ gateway: options.gateway.origin });
  }

  /** The heartbeat period now, ms: the gateway's, once its registration answer named one. */
  get interval(): number {
    return this.#interval;
  }

  /** Sends the first registration now; later attempts follow on their own. Calling it again does nothing. */
  start(): void {
    if (this.#started || this.#stopped) return;
    this.#started = true;
    this.#schedule(0);
  }

  /**
   * Heartbeats now instead of at the next tick, so a change such as the start of a drain
   * reaches the gateway at once. Does nothing while unregistered or backing off.
   */
  beatNow(): void {
    if (this.#stopped || this.#phase !== 'heartbeat' || this.#failures > 0) return;
    if (this.#inFlight) {
      this.#beatSoon = true;
      return;
    }
    this.#options.timers.clearTimeout(this.#timer);
    this.#schedule(0);
  }

  /** Stops the loop; resolves once a request in flight has settled (bounded by the request timeout). */
  async stop(): Promise<void> {
    this.#stopped = true;
    this.#options.timers.clearTimeout(this.#timer);
    this.#timer = undefined;
    await this.#inFlight;
  }

  /**
   * Stops, then leaves the gateway's pool (DELETE, best effort: a gateway that does not answer
   * forgets the runner by silence anyway) and closes the connection. Idempotent.
   */
  async deregister(): Promise<void> {
    await this.stop();
    if (this.#closed) return;
    this.#closed = true;
    try {
      if (!this.#known) return;
      const answer = await this.#send('DELETE', runnerPath(this.#options.status().id));
      const kind = gatewayAnswerKind(answer.status);
      if (kind === 'accepted') this.#log.info('deregistered from gateway', {});
      else if (kind === 'unknown-runner') this.#log.info('gateway had already forgotten this runner', {});
      // Nothing listens there: the gateway stopped (`sluice up` stops it before its runners),
      // and there is no pool left to leave.
      else if ((answer.error as { code?: unknown } | undefined)?.code === 'ECONNREFUSED')
        this.#log.info('gateway not running; nothing to leave', {});
      else
        this.#log.warn('deregistration failed', {
          status: answer.status,
          ...(answer.error ? { error: answer.error } : {}),
        });
    } finally {
      await this.#pool.close().catch(() => {});
    }
  }

  #schedule(ms: number): void {
    if (this.#stopped) return;
    this.#timer = this.#options.timers.setTimeout(() => {
      this.#timer = undefined;
      if (this.#stopped) return;
      this.#inFlight = this.#attempt().finally(() => {
        this.#inFlight = undefined;
      });
    }, ms);
  }

  async #attempt(): Promise<void> {
    const request = this.#phase;
    const heartbeat = request === 'heartbeat';
    const status = this.#options.status();
    const cache = this.#options.cache?.();
    const answer = heartbeat
      ? await this.#send('POST', heartbeatPath(status.id), heartbeatBody(status, this.#options.loadStaleAfter, cache))
      : await this.#send(
          'POST',
          REGISTER_PATH,
          registrationBody(status, this.#options.url, this.#options.loadStaleAfter, cache),
        );
    if (this.#stopped) return;
    const kind = gatewayAnswerKind(answer.status);
    switch (kind) {
      case 'accepted':
        return heartbeat ? this.#beatAnswered(answer, status.hosted) : this.#registered(answer);
      case 'unknown-runner':
        if (heartbeat) return this.#forgotten();
        break;
      case 'token-refused':
      case 'id-refused':
        return this.#refused(answer, kind);
      case 'failed':
        break;
    }
    this.#failed(answer, request);
  }

  #registered(answer: Answer): void {
    const asked = (answer.json as Partial<RegistrationAccepted> | undefined)?.heartbeatInterval;
    this.#interval =
      typeof asked === 'number' && Number.isSafeInteger(asked) && asked > 0 ? asked : this.#options.heartbeatInterval;
    this.#log.info('registered with gateway', {
      heartbeatInterval: this.#interval,
      ...(this.#failures > 0 ? { afterFailures: this.#failures } : {}),
    });
    this.#phase = 'heartbeat';
    this.#known = true;
    this.#failures = 0;
    this.#schedule(this.#interval);
  }

  #beatAnswered(answer: Answer, hosted: HostedEngine | undefined): void {
    if (this.#failures > 0) this.#log.info('gateway answers heartbeats again', { afterFailures: this.#failures });
    this.#failures = 0;
    const said = answer.json as Partial<HeartbeatAnswer> | undefined;
    // Before scheduling: the drain's (or the order's) beatNow() then turns the next beat into an immediate one.
    if (said?.drain === true) this.#drainRequested();
    if (said && typeof said === 'object' && 'host' in said && this.#options.onHostOrder)
      this.#hostOrdered(said.host, hosted);
    this.#schedule(this.#beatSoon ? 0 : this.#interval);
    this.#beatSoon = false;
  }

  /** The gateway restarted or expired us: only a new registration puts us back in its pool. */
  #forgotten(): void {
    this.#log.info('gateway does not know this runner, registering again', {});
    this.#phase = 'register';
    this.#known = false;
    this.#schedule(0);
  }

  /** Retrying sooner cannot help until an operator fixes a token or an id; retry at the cap meanwhile. */
  #refused(answer: Answer, kind: 'token-refused' | 'id-refused'): void {
    this.#failures++;
    const retryInMs = fullJitterBackoff(Number.MAX_SAFE_INTEGER, BACKOFF_STEPS, this.#options.random);
    const message =
      kind === 'token-refused' ? 'gateway refused the runner token' : 'gateway refused this runner id under its token';
    this.#log.error(message, { status: answer.status, attempt: this.#failures, retryInMs });
    this.#schedule(retryInMs);
  }

  #failed(answer: Answer, request: 'register' | 'heartbeat'): void {
    this.#failures++;
    const retryInMs = fullJitterBackoff(this.#failures, BACKOFF_STEPS, this.#options.random);
    const fields = {
      request,
      attempt: this.#failures,
      retryInMs,
      ...(answer.error ? { error: answer.error } : { status: answer.status }),
    };
    // A gateway down for an hour would otherwise log a warning every 30 s per runner.
    if (this.#failures === 1) this.#log.warn('gateway request failed, retrying', fields);
    else this.#log.debug('gateway request failed, retrying', fields);
    this.#schedule(retryInMs);
  }

  #drainRequested(): void {
    if (this.#drainNotified) return;
    this.#drainNotified = true;
    this.#log.info('gateway asked this runner to drain', {});
    try {
      this.#options.onDrainRequested?.();
    } catch (error) {
      this.#log.error('drain callback failed', { error: error as Error });
    }
  }

  /** Checks a `host` and hands it on; only the reconciling gateway sends one, so any that comes is obeyed. */
  #hostOrdered(host: unknown, answered: HostedEngine | undefined): void {
    const parsed = parseEngineOrder(host);
    if (parsed.kind === 'invalid') {
      this.#log.warn('gateway sent an invalid engine order, ignored', { problem: parsed.message });
      return;
    }
    try {
      this.#options.onHostOrder?.(parsed.value, answered);
    } catch (error) {
      this.#log.error('engine order callback failed', { error: error as Error });
    }
  }

  async #send(method: 'POST' | 'DELETE', path: string, body?: unknown): Promise<Answer> {
    try {
      const res = await this.#pool.request({
        method,
        path: this.#base + path,
        headers: {
          authorization: `Bearer ${this.#options.token}`,
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
      const ok = res.statusCode >= 200 && res.statusCode < 300 && res.statusCode !== 204;
      // Always consume the body, or the connection is never reused.
      const json = ok
        ? await res.body.json().catch(() => undefined)
        : await res.body.dump().then(
            () => undefined,
            () => undefined,
          );
      return { status: res.statusCode, json };
    } catch (error) {
      return { status: 0, error };
    }
  }
}

/**
 * The load a runner reports: its own slots, plus each engine's queue, batch and KV-cache use
 * when its metrics are fresher than `staleAfter` ms (a stale figure misleads placement more
 * than none). One engine runs all its models in one batch, so its running and waiting counts
 * are the load of each of its models; without fresh metrics, running falls back to the calls
 * the runner has at that engine.
 */
export function reportedLoad(status: RunnerStatus, staleAfter: number): ReportedLoad {
  const models: ReportedLoad['models'] = {};
  let queue = 0;
  let kv: number | undefined;
  for (const engine of status.engines) {
    const fresh = engine.load !== undefined && (engine.loadAgeMs ?? Infinity) <= staleAfter ? engine.load : undefined;
    queue += fresh?.waiting ?? 0;
    if (fresh?.kvCacheUsage !== undefined) kv = Math.max(kv ?? 0, fresh.kvCacheUsage);
    for (const model of engine.models)
      models[model] = { running: fresh?.running ?? engine.slots.inUse, waiting: fresh?.waiting ?? 0 };
  }
  return {
    slotsInUse: status.slots.inUse,
    slots: status.slots.total,
    queue,
    ...(kv === undefined ? {} : { kvCacheUsage: kv }),
    models,
  };
}

/**
 * What a registration and a heartbeat both say of the runner now: its load, what it could host,
 * the engine it hosts and its cache's naming.
 */
function stateBody(
  status: RunnerStatus,
  staleAfter: number,
  cache: CacheAnnouncement | undefined,
): Pick<RunnerHeartbeat, 'load' | 'capacity' | 'hosted' | 'cache'> {
  return {
    load: reportedLoad(status, staleAfter),
    capacity: status.capacity,
    ...(status.hosted ? { hosted: status.hosted } : {}),
    ...(cache ? { cache } : {}),
  };
}

/**
 * What a runner sends when it registers: who it is, where to call it, what it serves, its load,
 * and how its engine's cache blocks are named when gateways can follow them.
 */
export function registrationBody(
  status: RunnerStatus,
  url: string,
  staleAfter: number,
  cache?: CacheAnnouncement,
): RunnerRegistration {
  return {
    id: status.id,
    url,
    version: status.version,
    engines: status.engines.map((e) => ({ kind: e.kind, url: e.url, models: e.models, state: e.state })),
    models: status.models,
    slots: status.slots.total,
    gpus: status.gpus,
    ready: status.ready,
    ...stateBody(status, staleAfter, cache),
  };
}

/** What a runner sends every heartbeat: the cheap facts that change, what it could host, its cache's naming. */
export function heartbeatBody(status: RunnerStatus, staleAfter: number, cache?: CacheAnnouncement): RunnerHeartbeat {
  // Capacity and the hosted engine ride every beat: free GPUs change as engines start and stop.
  return {
    ready: status.ready,
    state: status.state,
    models: status.models,
    ...stateBody(status, staleAfter, cache),
  };
}
