/**
 * Gateway options, their defaults, and validation with one message per bad option.
 */
import { metrics } from '@opentelemetry/api';
import type { MeterProvider } from '@opentelemetry/api';
import { resolvePlacerConfig } from '../placer/options.ts';
import type { PlacerOptions } from '../placer/options.ts';
import type { Logger } from '../placer/kernel/index.ts';
import { silentLogger } from '../placer/kernel/index.ts';
import type { Clock } from '../placer/kernel/index.ts';
import type { Placer, PlacerConfig } from '../placer/types.ts';
import { systemClock } from '../placer/kernel/index.ts';
import { createRoundRobinPlacer } from '../placer/round-robin/index.ts';
import type { CallOutcome, CallOverride, GatewayCall } from './call.ts';
import { randomBytes } from 'node:crypto';
import { checkInteger, checkMs, show } from '../placer/kernel/index.ts';
import { BREAKER_DEFAULTS } from './breaker.ts';
import type { CallbackDelivery } from './detached.ts';
import { createMemoryStore } from './store/memory.ts';
import { RECORD_OVERHEAD_BYTES, storeDefaults } from './store/options.ts';
import type { CallStore } from './store/types.ts';
import { GatewayConfigError } from './errors.ts';
import type { GatewayPool } from './pool.ts';
import { WIRE_ID_PATTERN, WIRE_ID_RULE } from '../runner/protocol.ts';

/** How a finished call went, for after-call listeners. */
export interface CallResult {
  outcome: CallOutcome;
  /** HTTP status the client got (0 when the client was gone before any). */
  status: number;
  /** Runner that committed to the call, when one did. */
  runner?: string;
  /** Execution time the runner reported, in ms. */
  execMs?: number;
  /** End of the response minus startedAt, in ms. */
  totalMs: number;
  /** What the platform added, in ms: totalMs minus execMs. */
  latencyMs: number;
  error?: Error;
}

/**
 * Hooks around each call, as Fn's LB agent had them. beforeCall runs after the body is
 * buffered and before placement; throwing a SluiceError answers the client with its status
 * (to refuse a call, say). afterCall runs once the response is finished; what it throws is
 * logged and never reaches the client.
 */
export interface CallListener {
  beforeCall?(call: GatewayCall): void | Promise<void>;
  afterCall?(call: GatewayCall, result: CallResult): void | Promise<void>;
}

/** How a gateway is set up. Give `runners` or `pool`. */
export interface GatewayOptions extends PlacerOptions {
  /** Static runner URLs, e.g. `['http://127.0.0.1:9001']`. */
  runners?: readonly string[];
  /** A pool of your own instead of the static list. */
  pool?: GatewayPool;
  /** Orders runners for each call. @default round-robin */
  placer?: Placer;
  /** Execution limit of a call after a runner takes it, in ms. @default 600000 */
  callTimeout?: number;
  /** Largest request body accepted, in bytes. @default 16777216 (16 MiB) */
  maxBodyBytes?: number;
  /** Longest time a request body may take to arrive, in ms. @default 30000 */
  bodyReadTimeout?: number;
  /**
   * Longest silence before a request body's first chunk or between two of its chunks, in ms:
   * a trickling upload is cut here rather than at bodyReadTimeout. @default 10000
   */
  bodyIdleTimeout?: number;
  /** How long shutdown waits for in-flight calls, in ms. @default 30000 */
  drainTimeout?: number;
  /** How long connecting to a runner may take, in ms. @default 2000 */
  runnerConnectTimeout?: number;
  /**
   * How long a runner may take to acknowledge a call, in ms. A runner answers at once (busy, or
   * `102 Processing` before it asks its engine), so one that says nothing this long is hung: the
   * call goes to another runner and this one is passed over until a status probe finds it
   * answering. After the acknowledgement, the longest silence before the response's status line.
   * @default 5000
   */
  runnerResponseTimeout?: number;
  /**
   * The longest silence between body chunks of a call a runner took, in ms; past it the call ends
   * with GW_RUNNER_STALLED (a stream that stopped moving, a runner stopped mid-answer).
   * @default 60000
   */
  streamIdleTimeout?: number;
  /** How often static runners' /status is fetched, in ms. @default 2000 */
  statusInterval?: number;
  /**
   * Calls placed or running at once, once their body is buffered; more are refused with 503
   * GW_OVERLOADED. @default 10000
   */
  maxInFlight?: number;
  /**
   * Request bodies being received at once, apart from maxInFlight, so that stalled uploads
   * cannot take the calls' room; more are refused with 503 GW_UPLOADS_FULL. @default 1000
   */
  maxUploads?: number;
  /**
   * Request bodies being received at once from one client address (an IPv6 /64); more are
   * refused with 429 GW_TOO_MANY_UPLOADS. @default 256
   */
  maxUploadsPerClient?: number;
  /**
   * Connections one client address (an IPv6 /64) may hold open; the first request on one more
   * is answered 429 GW_TOO_MANY_CONNECTIONS and that connection closed. @default 4096
   */
  maxConnectionsPerClient?: number;
  /** Seconds sent in Retry-After when no runner took a call. @default 1 */
  retryAfter?: number;
  /** Changes a call's function, key or timeout before placement. */
  overrideCall?: (call: GatewayCall) => CallOverride | void | Promise<CallOverride | void>;
  /** Before/after call hooks, run in order. */
  listeners?: readonly CallListener[];
  /**
   * Where detached calls and their results are kept. Pass a Redis store to share them between
   * gateways. @default an in-memory store bounded by resultTtl and maxStoredBytes
   */
  store?: CallStore;
  /** This gateway's id: the owner of the detached calls it runs. @default `gw-` and 6 random hex digits */
  gatewayId?: string;
  /** How long finished detached results and Idempotency-Keys are kept, in ms. @default 3600000 */
  resultTtl?: number;
  /** Largest detached result kept, in bytes; a larger one fails its call. @default 10485760 (10 MiB) */
  maxResultBytes?: number;
  /**
   * Bound on the bytes of finished detached calls and results the default store keeps (pass
   * the same to a store of your own). Results leave only by TTL: one that does not fit fails its
   * call with GW_STORE_FULL, and new detached calls are refused while one more result of
   * maxResultBytes would not fit. At least maxResultBytes + 1024. @default 268435456 (256 MiB)
   */
  maxStoredBytes?: number;
  /**
   * Added to detachedPlacerTimeout and callTimeout to make a detached call's background
   * lifetime, in ms (Fn's execution headroom). @default 360000
   */
  executionHeadroom?: number;
  /**
   * Shared secret runners present to register and heartbeat (`--runner-token`); without it
   * registration is off and only `runners` are used.
   */
  runnerToken?: string;
  /** How often registered runners heartbeat, in ms. @default 1000 */
  heartbeatInterval?: number;
  /** Missed heartbeats after which a runner is unreachable and not placed on. @default 3 */
  unreachableAfterMissed?: number;
  /** Silence after which an unreachable runner is forgotten, in ms. @default 30000 */
  lostAfter?: number;
  /**
   * Circuit breaker per runner: opens after `threshold` failures before commit in a row, passes
   * the runner over for `openFor` ms, closes after `closeAfter` successes.
   * @default { threshold: 5, openFor: 30000, closeAfter: 2 }
   */
  breaker?: { threshold?: number; openFor?: number; closeAfter?: number };
  /** Checks and delivers detached-call callbacks; without it a sluice-callback-url is refused. */
  callbacks?: CallbackDelivery;
  /** Where instruments are created. @default the global meter provider (a no-op until an SDK is wired) */
  meterProvider?: MeterProvider;
  /** Renders /metrics; without it /metrics answers 404. */
  renderMetrics?: () => Promise<string>;
  /** @default a logger that drops everything */
  logger?: Logger;
  /** Time for placement and deadlines; tests inject a fake. @default the system clock */
  clock?: Clock;
}

/** Options after defaults and validation; frozen. */
export interface GatewayConfig {
  readonly runners: readonly URL[];
  readonly pool: GatewayPool | undefined;
  readonly placer: Placer;
  readonly placerConfig: PlacerConfig;
  readonly callTimeout: number;
  readonly maxBodyBytes: number;
  readonly bodyReadTimeout: number;
  readonly bodyIdleTimeout: number;
  readonly drainTimeout: number;
  readonly runnerConnectTimeout: number;
  readonly runnerResponseTimeout: number;
  readonly streamIdleTimeout: number;
  readonly statusInterval: number;
  readonly retryAfter: number;
  readonly maxInFlight: number;
  readonly maxUploads: number;
  readonly maxUploadsPerClient: number;
  readonly maxConnectionsPerClient: number;
  readonly overrideCall: GatewayOptions['overrideCall'];
  readonly listeners: readonly CallListener[];
  readonly store: CallStore;
  readonly gatewayId: string;
  readonly resultTtl: number;
  readonly maxResultBytes: number;
  readonly executionHeadroom: number;
  readonly callbacks: CallbackDelivery | undefined;
  readonly runnerToken: string | undefined;
  readonly breaker: { readonly threshold: number; readonly openFor: number; readonly closeAfter: number };
  readonly heartbeatInterval: number;
  readonly unreachableAfterMissed: number;
  readonly lostAfter: number;
  readonly meterProvider: MeterProvider;
  readonly renderMetrics: (() => Promise<string>) | undefined;
  readonly logger: Logger;
  readonly clock: Clock;
}

/** A fresh gateway id: `gw-` and 6 random hex digits. */
export function newGatewayId(): string {
  return `gw-${randomBytes(3).toString('hex')}`;
}

/** Applies defaults and validates; throws {@link GatewayConfigError} naming the first bad option. */
export function resolveGatewayOptions(options: GatewayOptions): GatewayConfig {
  const {
    runners = [],
    pool,
    placer = createRoundRobinPlacer(),
    callTimeout = 600_000,
    maxBodyBytes = 16 * 1024 * 1024,
    bodyReadTimeout = 30_000,
    bodyIdleTimeout = 10_000,
    drainTimeout = 30_000,
    runnerConnectTimeout = 2000,
    runnerResponseTimeout = 5000,
    streamIdleTimeout = 60_000,
    statusInterval = 2000,
    retryAfter = 1,
    maxInFlight = 10_000,
    maxUploads = 1000,
    maxUploadsPerClient = 256,
    maxConnectionsPerClient = 4096,
    overrideCall,
    listeners = [],
    gatewayId = newGatewayId(),
    resultTtl = 3_600_000,
    maxResultBytes = 10 * 1024 * 1024,
    executionHeadroom = 360_000,
    callbacks,
    runnerToken,
    heartbeatInterval = 1000,
    unreachableAfterMissed = 3,
    lostAfter = 30_000,
    meterProvider = metrics.getMeterProvider(),
    renderMetrics,
    logger = silentLogger,
    clock = systemClock,
  } = options;
  const placerConfig = resolvePlacerConfig(options);
  if (!Array.isArray(runners)) throw new GatewayConfigError(`runners must be a list of URLs, got ${JSON.stringify(runners)}`);
  const urls = runners.map((r) => runnerUrl(r));
  if (urls.length === 0 && pool === undefined && runnerToken === undefined) {
    throw new GatewayConfigError('runners must list at least one runner URL, or set runnerToken so runners can register');
  }
  if (runnerToken !== undefined && pool !== undefined) {
    throw new GatewayConfigError('runnerToken cannot be used with a custom pool: a custom pool manages its own runners');
  }
  if (runnerToken !== undefined && (typeof runnerToken !== 'string' || runnerToken.length < 16)) {
    // Never echo the token, even a bad one.
    throw new GatewayConfigError('runnerToken must be a string of at least 16 characters');
  }
  if (typeof placer?.order !== 'function' || typeof placer.name !== 'string') {
    throw new GatewayConfigError('placer must be an object with a name and order(call, runners)');
  }
  const fail = (message: string) => new GatewayConfigError(message);
  checkMs('callTimeout', callTimeout, 1, fail);
  checkInteger('maxBodyBytes', maxBodyBytes, { min: 1 }, fail);
  checkMs('bodyReadTimeout', bodyReadTimeout, 1, fail);
  checkMs('bodyIdleTimeout', bodyIdleTimeout, 1, fail);
  checkMs('drainTimeout', drainTimeout, 0, fail);
  checkMs('runnerConnectTimeout', runnerConnectTimeout, 1, fail);
  checkMs('runnerResponseTimeout', runnerResponseTimeout, 1, fail);
  checkMs('streamIdleTimeout', streamIdleTimeout, 1, fail);
  checkMs('statusInterval', statusInterval, 1, fail);
  checkInteger('retryAfter', retryAfter, { min: 0 }, fail);
  checkInteger('maxInFlight', maxInFlight, { min: 1 }, fail);
  checkInteger('maxUploads', maxUploads, { min: 1 }, fail);
  checkInteger('maxUploadsPerClient', maxUploadsPerClient, { min: 1 }, fail);
  checkInteger('maxConnectionsPerClient', maxConnectionsPerClient, { min: 1 }, fail);
  checkMs('resultTtl', resultTtl, 1, fail);
  checkInteger('maxResultBytes', maxResultBytes, { min: 1 }, fail);
  checkMs('executionHeadroom', executionHeadroom, 0, fail);
  checkMs('heartbeatInterval', heartbeatInterval, 1, fail);
  checkInteger('unreachableAfterMissed', unreachableAfterMissed, { min: 1 }, fail);
  checkMs('lostAfter', lostAfter, 1, fail);
  const breaker = Object.freeze({ ...BREAKER_DEFAULTS, ...options.breaker });
  checkInteger('breaker.threshold', breaker.threshold, { min: 1 }, fail);
  checkMs('breaker.openFor', breaker.openFor, 1, fail);
  checkInteger('breaker.closeAfter', breaker.closeAfter, { min: 1 }, fail);
  if (lostAfter <= heartbeatInterval * unreachableAfterMissed) {
    throw new GatewayConfigError(`lostAfter must be longer than heartbeatInterval x unreachableAfterMissed (${heartbeatInterval * unreachableAfterMissed} ms), got ${lostAfter}`);
  }
  if (typeof gatewayId !== 'string' || !WIRE_ID_PATTERN.test(gatewayId)) {
    throw new GatewayConfigError(`gatewayId must be ${WIRE_ID_RULE}, got ${show(gatewayId)}`);
  }
  const { maxStoredBytes = storeDefaults.maxStoredBytes } = options;
  checkInteger('maxStoredBytes', maxStoredBytes, { min: 1 }, fail);
  // Checked against the store the gateway makes, or the bound given with one's own store.
  if ((options.store === undefined || options.maxStoredBytes !== undefined) && maxStoredBytes < maxResultBytes + RECORD_OVERHEAD_BYTES) {
    throw new GatewayConfigError(
      `maxStoredBytes must be at least maxResultBytes + ${RECORD_OVERHEAD_BYTES} (${maxResultBytes + RECORD_OVERHEAD_BYTES}), or no detached call could ever be admitted, got ${maxStoredBytes}`,
    );
  }
  const store = options.store ?? createMemoryStore({ resultTtl, maxStoredBytes, now: () => clock.now() });
  return Object.freeze({
    runners: urls,
    pool,
    placer,
    placerConfig,
    callTimeout,
    maxBodyBytes,
    bodyReadTimeout,
    bodyIdleTimeout,
    drainTimeout,
    runnerConnectTimeout,
    runnerResponseTimeout,
    streamIdleTimeout,
    statusInterval,
    retryAfter,
    maxInFlight,
    maxUploads,
    maxUploadsPerClient,
    maxConnectionsPerClient,
    overrideCall,
    listeners: Object.freeze([...listeners]),
    store,
    gatewayId,
    resultTtl,
    maxResultBytes,
    executionHeadroom,
    callbacks,
    runnerToken,
    breaker,
    heartbeatInterval,
    unreachableAfterMissed,
    lostAfter,
    meterProvider,
    renderMetrics,
    logger,
    clock,
  });
}

function runnerUrl(value: unknown): URL {
  let url: URL | undefined;
  try {
    url = typeof value === 'string' ? new URL(value) : undefined;
  } catch {
    url = undefined;
  }
  if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:') || url.pathname !== '/') {
    throw new GatewayConfigError(`runners entries must be http(s)://host:port URLs, got ${JSON.stringify(value)}`);
  }
  return url;
}
