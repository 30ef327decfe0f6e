/**
 * Gateway options, their defaults, and validation with one message per bad option.
 */
import { metrics } from '@opentelemetry/api';
import type { MeterProvider } from '@opentelemetry/api';
import { resolvePlacerConfig } from '../placer/options.ts';
import type { PlacerOptions } from '../placer/options.ts';
import type { Fail, Logger, Resolved } from '../placer/kernel/index.ts';
import { silentLogger } from '../placer/kernel/index.ts';
import type { Clock } from '../placer/kernel/index.ts';
import { lingerDefaults, systemClock } from '../placer/kernel/index.ts';
import type { Placer, PlacerConfig } from '../placer/types.ts';
import type { CallOverride, CallResult, GatewayCall, Priority } from './http/index.ts';
import { randomBytes } from 'node:crypto';
import { checksFor, rule, show } from '../placer/kernel/index.ts';
import { breakerDefaults, resolveDataPlane } from './fleet/index.ts';
import type { DataPlaneConfig, DataPlaneOptions, GatewayPool } from './fleet/index.ts';
import { RECORD_OVERHEAD_BYTES, storeDefaults } from './store/index.ts';
import type { BatchStore, CallStore } from './store/index.ts';
import { GatewayConfigError } from './errors.ts';
import { PRIORITIES, corsOriginsProblem, isPriority } from './http/index.ts';
import { WIRE_ID_PATTERN, WIRE_ID_RULE, resolveLaunchPolicy } from '../runner/protocol/index.ts';
import type { LaunchPolicy } from '../runner/protocol/index.ts';
import { newToken } from './access/index.ts';
import type { ClientKeys, Limiter } from './access/index.ts';
import type { ColdStarts, DeploymentStore, ReconcilerSettings } from './control/index.ts';
import { compileNetworks } from './callbacks/index.ts';
import type { CallbackDelivery } from './callbacks/index.ts';

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
/** Settings of the Files and Batch APIs (docs/api.md, "Files and batches"). */
export interface BatchOptions {
  /** Largest file POST /v1/files takes, in bytes. @default 64 MiB */
  maxFileBytes?: number;
  /** Most requests one batch holds. @default 50000 */
  maxLines?: number;
  /** Most batch lines this gateway has in flight at once, over every batch. @default 256 */
  maxLinesInFlight?: number;
  /** How long a file is kept, in ms (input, output and error files alike). @default 30 days */
  fileTtl?: number;
  /** How often the release window is looked at besides each line's end, in ms. @default 100 */
  tick?: number;
  /** Lines in one chunk, the unit of work a gateway leases. @default 50 */
  chunkLines?: number;
  /** How long a chunk's lease lasts unless renewed, in ms: a dead gateway's chunks are taken over after it. @default 10000 */
  leaseTtl?: number;
  /** Where files and batches are kept. @default an in-memory store bounded by maxStoredBytes */
  store?: BatchStore;
}

export interface GatewayOptions extends PlacerOptions, DataPlaneOptions {
  /** Static runner URLs, e.g. `['http://127.0.0.1:9001']`. */
  runners?: readonly string[];
  /** A pool of your own instead of the static list. */
  pool?: GatewayPool;
  /** Orders runners for each call. @default see gatewayDefaults */
  placer?: Placer;
  /** Execution limit of a call after a runner takes it, in ms. @default see gatewayDefaults */
  callTimeout?: number;
  /** Largest request body accepted, in bytes. @default see gatewayDefaults */
  maxBodyBytes?: number;
  /** Longest time a request body may take to arrive, in ms. @default see gatewayDefaults */
  bodyReadTimeout?: number;
  /**
   * Longest silence before a request body's first chunk or between two of its chunks, in ms:
   * a trickling upload is cut here rather than at bodyReadTimeout. @default see gatewayDefaults
   */
  bodyIdleTimeout?: number;
  /**
   * After an HTTP/1.1 answer given before its request's body was read whole (413, 408, a
   * refusal), the rest of the body is read and discarded for at most this long, in ms, before
   * the connection closes, so that the client can finish sending and read the answer rather than
   * get a reset (placer/kernel/linger.ts). @default see lingerDefaults (placer/kernel/linger.ts)
   */
  lingerTime?: number;
  /** The longest silence while lingering, in ms; a client that sends nothing this long is closed. @default see lingerDefaults */
  lingerIdleTimeout?: number;
  /** The most bytes read and discarded while lingering; past them the connection is closed. @default see lingerDefaults */
  lingerMaxBytes?: number;
  /** How long shutdown waits for in-flight calls, in ms. @default see gatewayDefaults */
  drainTimeout?: number;
  /** How long connecting to a runner may take, in ms. @default see gatewayDefaults */
  runnerConnectTimeout?: number;
  /**
   * How long a runner may take to acknowledge a call, in ms. A runner answers at once (busy, or
   * `102 Processing` before it asks its engine), so one that says nothing this long is hung: the
   * call goes to another runner and this one is passed over until a status probe finds it
   * answering. After the acknowledgement, the longest silence before the response's status line.
   * @default see gatewayDefaults
   */
  runnerResponseTimeout?: number;
  /**
   * The longest silence between body chunks of a call a runner took, in ms; past it the call ends
   * with GW_RUNNER_STALLED (a stream that stopped moving, a runner stopped mid-answer).
   * @default see gatewayDefaults
   */
  streamIdleTimeout?: number;
  /** How often static runners' /status is fetched, in ms. @default see gatewayDefaults */
  statusInterval?: number;
  /**
   * Calls placed or running at once, once their body is buffered; more are refused with 503
   * GW_OVERLOADED. @default see gatewayDefaults
   */
  maxInFlight?: number;
  /**
   * Request bodies being received at once, apart from maxInFlight, so that stalled uploads
   * cannot take the calls' room; more are refused with 503 GW_UPLOADS_FULL. @default see gatewayDefaults
   */
  maxUploads?: number;
  /**
   * Request bodies being received at once from one client address (an IPv6 /64); more are
   * refused with 429 GW_TOO_MANY_UPLOADS. @default see gatewayDefaults
   */
  maxUploadsPerClient?: number;
  /**
   * Connections one client address (an IPv6 /64) may hold open; the first request on one more
   * is answered 429 GW_TOO_MANY_CONNECTIONS and that connection closed. @default see gatewayDefaults
   */
  maxConnectionsPerClient?: number;
  /**
   * Streams one HTTP/2 connection may have open at once (its SETTINGS_MAX_CONCURRENT_STREAMS):
   * each is a request, so this bounds what one connection can ask of the gateway at once, as
   * maxConnectionsPerClient bounds the connections. 100 is what HTTP/2 (RFC 9113) advises as
   * the least a server should allow, and what most servers and clients use. Only the TLS front
   * speaks HTTP/2. @default see gatewayDefaults
   */
  maxStreamsPerConnection?: number;
  /** Seconds sent in Retry-After when no runner took a call. @default see gatewayDefaults */
  retryAfter?: number;
  /**
   * Calls waiting for a runner at once, over all models (see docs/placers.md, the wait queue);
   * one more is refused with 503 GW_QUEUE_FULL. @default see gatewayDefaults
   */
  maxQueued?: number;
  /**
   * Calls of one flow (the `sluice-flow` header, else the body's `user`, else the client
   * address) waiting at once; one more is refused with 503 GW_QUEUE_FULL. @default see gatewayDefaults
   */
  maxQueuedPerFlow?: number;
  /**
   * Calls of one model waiting at once; one more is refused with 503 GW_QUEUE_FULL. Bounds
   * what one model's calls (a deployment that cannot start, a model short of runners) take
   * of the queue, so the others' calls still find room.
   * @default half of maxQueued, rounded up
   */
  maxQueuedPerModel?: number;
  /**
   * Priority class of a call that sends no `sluice-priority` header: `interactive` or `batch`.
   * @default see gatewayDefaults
   */
  defaultPriority?: Priority;
  /** Changes a call's function, key or timeout before placement. */
  // biome-ignore lint/suspicious/noConfusingVoidType: an overrider that changes nothing returns nothing
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
  /** How long finished detached results and Idempotency-Keys are kept, in ms. @default see gatewayDefaults */
  resultTtl?: number;
  /** Largest detached result kept, in bytes; a larger one fails its call. @default see gatewayDefaults */
  maxResultBytes?: number;
  /**
   * Bound on the bytes of finished detached calls and results the default store keeps (pass
   * the same to a store of your own). Results leave only by TTL: one that does not fit fails its
   * call with GW_STORE_FULL, and new detached calls are refused while one more result of
   * maxResultBytes would not fit. At least maxResultBytes + 1024. @default see gatewayDefaults
   */
  maxStoredBytes?: number;
  /**
   * Added to detachedPlacerTimeout and callTimeout to make a detached call's background
   * lifetime, in ms (Fn's execution headroom). @default see gatewayDefaults
   */
  executionHeadroom?: number;
  /**
   * Shared secret runners present to register and heartbeat (`--runner-token`); without it
   * registration is off and only `runners` are used.
   */
  runnerToken?: string;
  /**
   * Tokens of the operator scope (the runner list, drain, the queue, /metrics, keys): each
   * works, so a new one can be added before the old is removed. Without any, the gateway makes
   * one at start-up ({@link GatewayConfig.operatorTokenGenerated}); the CLI writes it to a file
   * only its user can read.
   */
  operatorTokens?: readonly string[];
  /**
   * Tokens of the viewer scope: read-only operator routes (/metrics, /v1/stats, GET of runners,
   * deployments and the queue), what Prometheus and the dashboard need; never a change. Without
   * any, the gateway makes one at start-up ({@link GatewayConfig.viewerTokenGenerated}), kept
   * beside the operator's.
   */
  viewerTokens?: readonly string[];
  /**
   * Executables deployments may name as `profile.binary` besides each kind's usual entry point,
   * as `kind=path`; the runners check their own list too (docs/security.md, "Launch policy").
   * @default none
   */
  engineBinaries?: readonly string[];
  /**
   * Environment variables deployments may set besides each kind's allow-list, as `NAME` or
   * `kind=NAME`; the runners check their own list too. @default none
   */
  engineEnvAllow?: readonly string[];
  /** Client keys: the key ring (gateway/access/keys.ts) or a lookup of your own. */
  clientKeys?: ClientKeys;
  /**
   * Whether client calls need a key they name (`--require-keys`), decided here once: a keyed
   * gateway whose keys all go (or cannot be read) refuses every client call, never opens. A
   * gateway started open stays open, and refuses to make keys through /v1/keys.
   * @default true when `clientKeys` is given, else false
   */
  requireKeys?: boolean;
  /**
   * Where deployments are kept (/v1/deployments; the CLI fills one from `--deployments`, in
   * Redis with a Redis `--store`). The gateway's reconciler keeps each one's replicas.
   * @default an empty MemoryDeploymentStore on the gateway's clock
   */
  deployments?: DeploymentStore;
  /**
   * The reconciler's tunables (period, windows, start backoff) and, for several gateways on one
   * Redis, its shared lease and boards (gateway/control/serverless.ts). The reconciler checks them.
   * @default one gateway's reconciler at reconcilerDefaults
   */
  reconciler?: ReconcilerSettings;
  /**
   * Who starts replicas of deployed models (the reconciler): with it, a call for a deployed model
   * that no runner serves now waits in the queue for a replica within its placer deadline,
   * instead of failing (docs/placers.md, "Cold starts"). @default none: such calls fail as before
   */
  coldStarts?: ColdStarts;
  /** The Files and Batch APIs' settings, resolved by the batch room (gateway/batch/options.ts). */
  batch?: BatchOptions;
  /**
   * The sliding window of the client keys' requestsPerMinute and tokensPerMinute, in ms: a
   * minute, shorter only for tests and demonstrations. Used by the limiter the gateway makes.
   * @default see gatewayDefaults
   */
  keyLimitWindow?: number;
  /**
   * Where client keys' limits are counted (gateway/access/limits.ts): in memory, or a Redis
   * limiter shared by several gateways. @default in memory, on the gateway's clock and keyLimitWindow
   */
  limiter?: Limiter;
  /**
   * Runner tokens, newest first, all accepted at once so that one can be rotated without
   * downtime (`--runner-token-file`, one a line); instead of runnerToken. A runner id is bound to
   * the token it registered with (docs/runners.md, "Registration rules").
   */
  runnerTokens?: readonly string[];
  /**
   * CIDR networks registered runner URLs must be in (`--runner-networks`). Without it any
   * address is taken but loopback, link-local (the metadata address), unspecified, multicast
   * and reserved ones; a listed network holding one of those allows it. This gateway's own
   * listeners, cloud metadata addresses (callbacks/address.ts) and port 0 are refused always.
   * @default none
   */
  runnerNetworks?: readonly string[];
  /**
   * Origins whose browser pages may call the gateway (CORS, `--cors-origins`): origins such as
   * `https://app.example.com`, or `*` for any. Preflights are answered before credentials are
   * checked; answers to an allowed origin carry `Access-Control-Allow-Origin` and expose the
   * `sluice-*`, `x-ratelimit-*` and `retry-after` headers.
   * @default none: CORS off
   */
  corsOrigins?: readonly string[];
  /** How often registered runners heartbeat, in ms. @default see gatewayDefaults */
  heartbeatInterval?: number;
  /** Missed heartbeats after which a runner is unreachable and not placed on. @default see gatewayDefaults */
  unreachableAfterMissed?: number;
  /** Silence after which an unreachable runner is forgotten, in ms. @default see gatewayDefaults */
  lostAfter?: number;
  /**
   * Silence after which a runner's cache feed is stale and placement treats its cache as unknown,
   * in ms. Runners send a keep-alive at least every heartbeat, so a few heartbeats.
   * @default 3000
   */
  cacheFeedStaleAfterMs?: number;
  /**
   * How long the blocks of a call this gateway placed count as held by its runner before the
   * runner's feed reports them stored, in ms: the prefill plus the feed's delay. 0 turns it off.
   * @default 2000
   */
  cachePendingMs?: number;
  /**
   * Blocks of the truth index kept per runner (stored and pending; about 90 bytes each); past it
   * the oldest are forgotten. The default holds 1M tokens in blocks of 16, more than an 80 GB GPU
   * holds of an 8B model's KV cache.
   * @default 65536
   */
  cacheMaxBlocksPerRunner?: number;
  /**
   * Blocks of the truth index kept over every runner (about 90 bytes each: 180 MiB at the
   * default); past it the runner holding the most forgets its oldest.
   * @default 2097152
   */
  cacheMaxBlocks?: number;
  /**
   * A directory of Hugging Face tokenizer folders, `<dir>/<name>/tokenizer.json` and
   * `tokenizer_config.json`, for runners that announce the tokenizer `<name>` (docs/placers.md,
   * "Tokenizers"). Nothing is downloaded. Unset: only the simulated engine's tokenizer is known,
   * and calls to other engines are placed without cache truth.
   * @default none
   */
  tokenizers?: string;
  /**
   * Circuit breaker per runner: opens after `threshold` failures before commit in a row, passes
   * the runner over for `openFor` ms, closes after `closeAfter` successes.
   * @default see breakerDefaults (gateway/fleet/breaker.ts)
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

/**
 * A gateway's config: its settings with every part made, the given ones or the defaults the
 * composition makes (composeGatewayConfig in gateway/server.ts); frozen. Each option with a
 * default in gatewayDefaults is held as resolved, of that default's type; the rest are below.
 */
export interface GatewayConfig extends Omit<Resolved<typeof gatewayDefaults>, 'placer'> {
  readonly runners: readonly URL[];
  readonly pool: GatewayPool | undefined;
  readonly placer: Placer;
  readonly placerConfig: PlacerConfig;
  readonly maxQueuedPerModel: number;
  /** Checked to be a priority class, which the default's widened type does not say. */
  readonly defaultPriority: Priority;
  readonly overrideCall: GatewayOptions['overrideCall'];
  readonly listeners: readonly CallListener[];
  readonly store: CallStore;
  readonly gatewayId: string;
  readonly callbacks: CallbackDelivery | undefined;
  /** The first of runnerTokens: the one runners are given. */
  readonly runnerToken: string | undefined;
  /** At least one; the first is the one made at start-up when none was given. */
  readonly operatorTokens: readonly string[];
  /** True when the gateway made its operator token itself (none was given). */
  readonly operatorTokenGenerated: boolean;
  /** At least one; the first is the one made at start-up when none was given. */
  readonly viewerTokens: readonly string[];
  /** True when the gateway made its viewer token itself (none was given). */
  readonly viewerTokenGenerated: boolean;
  /** What deployments may launch: engineBinaries and engineEnvAllow over the kinds' defaults. */
  readonly launchPolicy: LaunchPolicy;
  readonly clientKeys: ClientKeys | undefined;
  readonly deployments: DeploymentStore;
  readonly coldStarts: ColdStarts | undefined;
  readonly reconciler: ReconcilerSettings;
  readonly limiter: Limiter;
  /** Every runner token accepted, newest first; empty when registration is off. */
  readonly runnerTokens: readonly string[];
  readonly runnerNetworks: readonly string[];
  /** Empty when CORS is off. */
  readonly corsOrigins: readonly string[];
  readonly breaker: { readonly threshold: number; readonly openFor: number; readonly closeAfter: number };
  readonly meterProvider: MeterProvider;
  readonly renderMetrics: (() => Promise<string>) | undefined;
  /** The call secret, runner mutual TLS and front TLS (gateway/fleet/data-plane.ts). */
  readonly dataPlane: DataPlaneConfig;
}

/** The parts of a gateway that are live objects: given in the options, or made by the composition. */
export type GatewayPart = 'placer' | 'store' | 'limiter' | 'deployments';

/**
 * Options after defaults and validation, frozen: values, and the parts given as they were
 * given (checked for their shape); a part left out is undefined, never made here.
 */
export type GatewaySettings = Omit<GatewayConfig, GatewayPart> & {
  readonly [K in GatewayPart]: GatewayConfig[K] | undefined;
};

/**
 * The one place each gateway default lives: resolveGatewayOptions applies them, the TSDoc above
 * points here, and `sluice --help` prints them. The placement timings are placerDefaults' and
 * the store's bounds storeDefaults', read from there rather than copied.
 */
export const gatewayDefaults = Object.freeze({
  /** A built-in placer's name, made through its descriptor with the gateway's clock. */
  placer: 'round-robin',
  callTimeout: 600_000,
  maxBodyBytes: 16 * 1024 * 1024,
  bodyReadTimeout: 30_000,
  bodyIdleTimeout: 10_000,
  lingerTime: lingerDefaults.time,
  lingerIdleTimeout: lingerDefaults.idle,
  lingerMaxBytes: lingerDefaults.maxBytes,
  drainTimeout: 30_000,
  runnerConnectTimeout: 2000,
  runnerResponseTimeout: 5000,
  streamIdleTimeout: 60_000,
  statusInterval: 2000,
  retryAfter: 1,
  maxQueued: 10_000,
  maxQueuedPerFlow: 1000,
  defaultPriority: 'interactive' as Priority,
  maxInFlight: 10_000,
  maxUploads: 1000,
  maxUploadsPerClient: 256,
  maxConnectionsPerClient: 4096,
  maxStreamsPerConnection: 100,
  resultTtl: storeDefaults.resultTtl,
  maxResultBytes: 10 * 1024 * 1024,
  maxStoredBytes: storeDefaults.maxStoredBytes,
  executionHeadroom: 360_000,
  heartbeatInterval: 1000,
  unreachableAfterMissed: 3,
  lostAfter: 30_000,
  cacheFeedStaleAfterMs: 3000,
  cachePendingMs: 2000,
  cacheMaxBlocksPerRunner: 65_536,
  cacheMaxBlocks: 2_097_152,
  requireKeys: false,
  keyLimitWindow: 60_000,
  logger: silentLogger as Logger,
  clock: systemClock as Clock,
});

/** How each defaulted option is checked, in the order the first bad one is reported. */
const gatewayRules = {
  callTimeout: rule.ms(1),
  maxBodyBytes: rule.integer({ min: 1 }),
  bodyReadTimeout: rule.ms(1),
  bodyIdleTimeout: rule.ms(1),
  lingerTime: rule.ms(1),
  lingerIdleTimeout: rule.ms(1),
  lingerMaxBytes: rule.integer({ min: 1 }),
  drainTimeout: rule.ms(0),
  runnerConnectTimeout: rule.ms(1),
  runnerResponseTimeout: rule.ms(1),
  streamIdleTimeout: rule.ms(1),
  statusInterval: rule.ms(1),
  retryAfter: rule.integer({ min: 0 }),
  maxQueued: rule.integer({ min: 1 }),
  maxQueuedPerFlow: rule.integer({ min: 1 }),
  defaultPriority: priorityRule,
  maxInFlight: rule.integer({ min: 1 }),
  maxUploads: rule.integer({ min: 1 }),
  maxUploadsPerClient: rule.integer({ min: 1 }),
  maxConnectionsPerClient: rule.integer({ min: 1 }),
  // The most an HTTP/2 setting holds.
  maxStreamsPerConnection: rule.integer({ min: 1, max: 2 ** 32 - 1 }),
  resultTtl: rule.ms(1),
  maxResultBytes: rule.integer({ min: 1 }),
  executionHeadroom: rule.ms(0),
  heartbeatInterval: rule.ms(1),
  unreachableAfterMissed: rule.integer({ min: 1 }),
  lostAfter: rule.ms(1),
  cacheFeedStaleAfterMs: rule.ms(1),
  cachePendingMs: rule.ms(0),
  cacheMaxBlocksPerRunner: rule.integer({ min: 1, max: 100_000_000 }),
  cacheMaxBlocks: rule.integer({ min: 1, max: 100_000_000 }),
  requireKeys: booleanRule,
  keyLimitWindow: rule.ms(1),
  logger: rule.logger(),
};

const check = checksFor(GatewayConfigError);

/** A switch: true or false, nothing else. */
function booleanRule(option: string, value: unknown, fail: Fail): boolean {
  if (typeof value !== 'boolean') throw fail(`${option} must be true or false, got ${show(value)}`, option);
  return value;
}

/** defaultPriority names one of the priority classes. */
function priorityRule(option: string, value: unknown, fail: Fail): Priority {
  if (!isPriority(value)) throw fail(`${option} must be one of ${PRIORITIES.join(', ')}, got ${show(value)}`, option);
  return value;
}

/** A fresh gateway id: `gw-` and 6 random hex digits. */
export function newGatewayId(): string {
  return `gw-${randomBytes(3).toString('hex')}`;
}

/**
 * Applies defaults and validates, making nothing live: the parts left out (placer, store,
 * limiter, deployments) stay undefined for the composition to make.
 * @throws {@link GatewayConfigError} naming the first bad option.
 */
export function resolveGatewayOptions(options: GatewayOptions): GatewaySettings {
  const {
    runners = [],
    pool,
    overrideCall,
    listeners = [],
    gatewayId = newGatewayId(),
    callbacks,
    renderMetrics,
    runnerNetworks = [],
    corsOrigins = [],
  } = options;
  const { meterProvider = metrics.getMeterProvider() } = options;
  const placerConfig = resolvePlacerConfig(options);
  if (!Array.isArray(runners)) throw check.fail(`runners must be a list of URLs, got ${JSON.stringify(runners)}`);
  const urls = runners.map((r) => runnerUrl(r));
  const runnerTokens = runnerTokensOf(options);
  if (urls.length === 0 && pool === undefined && runnerTokens.length === 0) {
    throw check.fail('runners must list at least one runner URL, or set runnerToken so runners can register');
  }
  if (runnerTokens.length > 0 && pool !== undefined) {
    throw check.fail('runnerToken cannot be used with a custom pool: a custom pool manages its own runners');
  }
  const { operatorTokens: givenOperatorTokens = [], clientKeys } = options;
  if (!Array.isArray(givenOperatorTokens)) throw check.fail('operatorTokens must be a list of tokens');
  givenOperatorTokens.forEach((token, i) => check.runnerToken(`operatorTokens[${i}]`, token));
  if (clientKeys !== undefined && typeof clientKeys.lookup !== 'function')
    throw check.fail('clientKeys must have a lookup(token) method');
  const operatorTokenGenerated = givenOperatorTokens.length === 0;
  const operatorTokens = Object.freeze(operatorTokenGenerated ? [newToken('sluice-op-')] : [...givenOperatorTokens]);
  const { viewerTokens: givenViewerTokens = [] } = options;
  if (!Array.isArray(givenViewerTokens)) throw check.fail('viewerTokens must be a list of tokens');
  givenViewerTokens.forEach((token, i) => {
    check.runnerToken(`viewerTokens[${i}]`, token);
    // One token in both lists would make a viewer an operator: refused, naming neither token.
    if (operatorTokens.includes(token))
      throw check.fail(`viewerTokens[${i}] is also an operator token; a viewer token must be its own`);
  });
  const viewerTokenGenerated = givenViewerTokens.length === 0;
  const viewerTokens = Object.freeze(viewerTokenGenerated ? [newToken('sluice-view-')] : [...givenViewerTokens]);
  const launch = resolveLaunchPolicy({ binaries: options.engineBinaries, envAllow: options.engineEnvAllow });
  if (launch.kind === 'invalid') throw check.fail(launch.problem);
  try {
    compileNetworks(runnerNetworks, 'runnerNetworks');
  } catch (error) {
    throw check.fail((error as Error).message, 'runnerNetworks');
  }
  if (!Array.isArray(corsOrigins)) throw check.fail(`corsOrigins must be a list of origins, got ${show(corsOrigins)}`);
  const corsProblem = corsOriginsProblem(corsOrigins);
  if (corsProblem !== undefined) throw check.fail(corsProblem, 'corsOrigins');
  // The default placer is made by the composition, by its name; a given one is checked here.
  const checked = check.resolve(gatewayDefaults, gatewayRules, { ...options, placer: undefined });
  const { placer } = options;
  if (placer !== undefined && (typeof placer?.order !== 'function' || typeof placer.name !== 'string')) {
    throw check.fail('placer must be an object with a name and order(call, runners)');
  }
  const breaker = Object.freeze({ ...breakerDefaults, ...options.breaker });
  check.integer('breaker.threshold', breaker.threshold, { min: 1 });
  check.ms('breaker.openFor', breaker.openFor, 1);
  check.integer('breaker.closeAfter', breaker.closeAfter, { min: 1 });
  const missedFor = checked.heartbeatInterval * checked.unreachableAfterMissed;
  if (checked.lostAfter <= missedFor) {
    throw check.fail(
      `lostAfter must be longer than heartbeatInterval x unreachableAfterMissed (${missedFor} ms), got ${checked.lostAfter}`,
    );
  }
  if (typeof gatewayId !== 'string' || !WIRE_ID_PATTERN.test(gatewayId)) {
    throw check.fail(`gatewayId must be ${WIRE_ID_RULE}, got ${show(gatewayId)}`);
  }
  const maxStoredBytes = check.integer('maxStoredBytes', checked.maxStoredBytes, { min: 1 });
  // Checked against the store the gateway makes, or the bound given with one's own store.
  if (
    (options.store === undefined || options.maxStoredBytes !== undefined) &&
    maxStoredBytes < checked.maxResultBytes + RECORD_OVERHEAD_BYTES
  ) {
    throw check.fail(
      `maxStoredBytes must be at least maxResultBytes + ${RECORD_OVERHEAD_BYTES} (${checked.maxResultBytes + RECORD_OVERHEAD_BYTES}), or no detached call could ever be admitted, got ${maxStoredBytes}`,
    );
  }
  const { deployments } = options;
  if (deployments !== undefined && (typeof deployments?.list !== 'function' || typeof deployments.put !== 'function')) {
    throw check.fail(
      'deployments must be a DeploymentStore (gateway/control/store.ts), with list, get, put and delete',
    );
  }
  const { coldStarts } = options;
  if (
    coldStarts !== undefined &&
    (typeof coldStarts?.deployed !== 'function' || typeof coldStarts.wake !== 'function')
  ) {
    throw check.fail(
      'coldStarts must be a ColdStarts (gateway/control/cold-start.ts), with deployed(model) and wake(model)',
    );
  }
  const maxQueuedPerModel =
    options.maxQueuedPerModel === undefined
      ? Math.ceil(checked.maxQueued / 2)
      : check.integer('maxQueuedPerModel', options.maxQueuedPerModel, { min: 1 });
  return Object.freeze({
    ...checked,
    // Checked by priorityRule; resolveOptions widens the default's type to string.
    defaultPriority: checked.defaultPriority as Priority,
    maxQueuedPerModel,
    runners: urls,
    pool,
    placer,
    placerConfig,
    overrideCall,
    listeners: Object.freeze([...listeners]),
    store: options.store,
    gatewayId,
    callbacks,
    operatorTokens,
    operatorTokenGenerated,
    viewerTokens,
    viewerTokenGenerated,
    launchPolicy: launch.policy,
    clientKeys,
    requireKeys: options.requireKeys === undefined ? clientKeys !== undefined : checked.requireKeys,
    deployments,
    coldStarts,
    reconciler: Object.freeze({ ...(options.reconciler ?? {}) }),
    limiter: checkedLimiter(options.limiter),
    runnerToken: runnerTokens[0],
    runnerTokens,
    runnerNetworks: Object.freeze([...runnerNetworks]),
    corsOrigins: Object.freeze([...corsOrigins]),
    breaker,
    meterProvider,
    renderMetrics,
    dataPlane: resolveDataPlane(options, check.fail, urls),
  });
}

/** The limiter given, checked; undefined when none was. */
function checkedLimiter(given: Limiter | undefined): Limiter | undefined {
  if (given === undefined) return undefined;
  if (typeof given?.admitCall !== 'function' || typeof given.release !== 'function')
    throw check.fail(
      'limiter must be a Limiter (gateway/access/limits.ts), with admitCall, admitTokens, settle, release, reserveStored, settleStored and releaseStored',
    );
  return given;
}

/**
 * runnerToken or runnerTokens as one list, each token checked; the messages never echo a token.
 * @throws {@link GatewayConfigError} naming the first bad entry.
 */
export function runnerTokensOf({
  runnerToken,
  runnerTokens,
}: Pick<GatewayOptions, 'runnerToken' | 'runnerTokens'>): readonly string[] {
  if (runnerToken !== undefined && runnerTokens !== undefined)
    throw check.fail('give runnerToken or runnerTokens, not both');
  if (runnerToken !== undefined) {
    // The same rule the runner applies to the token it presents.
    check.runnerToken('runnerToken', runnerToken);
    return Object.freeze([runnerToken]);
  }
  if (runnerTokens === undefined) return Object.freeze([]);
  if (!Array.isArray(runnerTokens) || runnerTokens.length === 0)
    throw check.fail('runnerTokens must be a non-empty list of tokens');
  runnerTokens.forEach((token, i) => {
    check.runnerToken(`runnerTokens[${i}]`, token);
    if (runnerTokens.indexOf(token) !== i)
      throw check.fail(`runnerTokens[${i}] repeats runnerTokens[${runnerTokens.indexOf(token)}]`);
  });
  return Object.freeze([...runnerTokens]);
}

function runnerUrl(value: unknown): URL {
  let url: URL | undefined;
  try {
    url = typeof value === 'string' ? new URL(value) : undefined;
  } catch {
    url = undefined;
  }
  if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:') || url.pathname !== '/') {
    throw check.fail(`runners entries must be http(s)://host:port URLs, got ${JSON.stringify(value)}`);
  }
  return url;
}
