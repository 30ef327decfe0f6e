/**
 * createGateway: the HTTP front (Hono on @hono/node-server) around the LB agent.
 */
import { createServer } from 'node:http';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { createSecureServer } from 'node:http2';
import type { Http2SecureServer, Http2Session } from 'node:http2';
import type { AddressInfo, Socket } from 'node:net';
import { getRequestListener } from '@hono/node-server';
import { RESPONSE_ALREADY_SENT } from '@hono/node-server/utils/response';
import { Hono } from 'hono';
import type { Context } from 'hono';
import { SluiceError, lingerEarlyAnswers, telemetryPath } from '../placer/kernel/index.ts';
import { VERSION } from '../runner/protocol/version.ts';
import { createBuiltinPlacer } from '../placer/registry.ts';
import {
  accessGuard,
  AuditLog,
  ClientKeysWatch,
  createMemoryLimiter,
  Credentials,
  keyOf,
  KeyRing,
  modelRefusal,
  registerKeyRoutes,
  ROUTE_SCOPES,
  unscopedRoutes,
  visibleModels,
} from './access/index.ts';
import type { Caller, GatewayEnv, RouteScope } from './access/index.ts';
import { LbAgent, notReadyReasons, readinessNotes, waitQueueFor } from './calls/index.ts';
import {
  answerClientError,
  callRouteOf,
  checkFrontListen,
  ClientConnections,
  Cors,
  frontDoor,
  guardListener,
  OPENAI_CALL_ROUTES,
  requestErrorResponse,
  uuidv7,
} from './http/index.ts';
import type { CallRoute } from './http/index.ts';
import { DetachedCalls, registerCallRoutes } from './detached/index.ts';
import { createMemoryBatchStore, createMemoryStore } from './store/index.ts';
import { createBatchRoom, fleetViewOf } from './batch/index.ts';
import { registerDashboardRoutes } from './observe/index.ts';
import { MemoryDeploymentStore, registerDeploymentRoutes, Serverless } from './control/index.ts';
import { CacheTruth, CallSigner, FleetPool, registerRunnerRoutes, RunnerRegistry } from './fleet/index.ts';
import type { GatewayPool } from './fleet/index.ts';
import { PromptMapper } from './tokens/index.ts';
import {
  GatewayConfigError,
  InternalError,
  MethodNotAllowedError,
  RouteNotFoundError,
  TooManyConnectionsError,
  UnknownModelError,
  errorResponse,
} from './errors.ts';
import { gatewayDefaults, resolveGatewayOptions, runnerTokensOf } from './options.ts';
import type { GatewayConfig, GatewayOptions } from './options.ts';

type Env = GatewayEnv;

/** The scope of the call routes, which the server hands to the agent without the router. */
const CALL_SCOPE: RouteScope = Object.freeze({ method: 'POST', path: '', scope: 'client' });

/** A gateway: the app, its pool, and its lifecycle. */
export interface Gateway {
  readonly config: GatewayConfig;
  readonly pool: GatewayPool;
  /** The Hono app, for embedding the routes in a server of your own. */
  readonly app: Hono<Env>;
  /** Starts the pool and listens. */
  listen(port?: number, host?: string): Promise<{ url: string; port: number; host: string }>;
  /**
   * Replaces the runner tokens, newest first (a rotation step without a restart; registered
   * runners keep their bindings to tokens still listed).
   * @throws {@link GatewayConfigError} for a bad list, or on a gateway started without registration.
   */
  setRunnerTokens(tokens: readonly string[]): void;
  /**
   * Graceful shutdown: the front gate answers 503, in-flight calls get up to drainTimeout to
   * finish, then runner connections close. Idempotent.
   */
  close(): Promise<void>;
}

/**
 * How long a connection past its client's limit may take to send the request its refusal
 * answers; one that sends nothing is dropped then rather than hold a descriptor.
 */
const REFUSED_CONNECTION_GRACE_MS = 5000;

/** Builds a gateway from options; nothing listens until {@link Gateway.listen}. */
export function createGateway(options: GatewayOptions): Gateway {
  const config = composeGatewayConfig(options);
  const log = config.logger;
  // Calls that found every runner busy wait here; the fleet's runners wake them as room appears.
  const queue = waitQueueFor(config);
  // What the engines' caches hold, from the runners' cache feeds: placement reads it per call.
  const cacheTruth = new CacheTruth({
    clock: config.clock,
    staleAfterMs: config.cacheFeedStaleAfterMs,
    pendingMs: config.cachePendingMs,
    maxBlocksPerRunner: config.cacheMaxBlocksPerRunner,
    maxBlocks: config.cacheMaxBlocks,
    meterProvider: config.meterProvider,
    mapper: new PromptMapper({ tokenizerDir: tokenizerDirOf(options.tokenizers), logger: log }),
  });
  const fleet = new FleetPool({
    urls: config.runners,
    connectTimeout: config.runnerConnectTimeout,
    responseTimeout: config.runnerResponseTimeout,
    streamIdleTimeout: config.streamIdleTimeout,
    clock: config.clock,
    statusInterval: config.statusInterval,
    breaker: config.breaker,
    logger: log,
    ...(config.dataPlane.callSecret === undefined ? {} : { signer: new CallSigner(config.dataPlane.callSecret) }),
    ...(config.dataPlane.runnerTls ? { tls: config.dataPlane.runnerTls } : {}),
    onRemove: (ids) => config.placer.forget?.(ids),
    room: queue,
    cacheTruth,
  });
  const pool: GatewayPool = config.pool ?? fleet;
  const registry = new RunnerRegistry({
    pool: fleet,
    tokens: config.runnerTokens,
    networks: config.runnerNetworks,
    gatewayId: config.gatewayId,
    heartbeatInterval: config.heartbeatInterval,
    unreachableAfter: config.heartbeatInterval * config.unreachableAfterMissed,
    lostAfter: config.lostAfter,
    logger: log,
    clock: config.clock,
  });
  // The control plane first, over the registry and the queue: the call path is handed it as
  // whoever starts replicas (unless the options name another).
  const serverless = new Serverless({
    store: config.deployments,
    registry,
    calls: queue,
    settings: config.reconciler,
    clock: config.clock,
    logger: log,
    meterProvider: config.meterProvider,
  });
  const detached = DetachedCalls.forGateway(config, log);
  const agent = new LbAgent(config, pool, detached, queue, config.coldStarts ?? serverless);
  // Keys made through /v1/keys live in a key ring: the one given, or an empty one of the gateway's.
  const ring =
    config.clientKeys === undefined
      ? new KeyRing({ clock: config.clock, logger: log })
      : config.clientKeys instanceof KeyRing
        ? config.clientKeys
        : undefined;
  // Open or keyed is settled here, from settings, for the gateway's life: see access/credentials.ts.
  const clients = config.requireKeys ? 'keys' : 'open';
  const clientKeys = config.clientKeys ?? ring;
  const credentials = new Credentials({
    operatorTokens: config.operatorTokens,
    viewerTokens: config.viewerTokens,
    runnerTokens: config.runnerTokens,
    clientKeys,
    clients,
  });
  const keysWatch = new ClientKeysWatch({ clients, keys: clientKeys, logger: log });
  const app = new Hono<Env>();
  const newId = () => uuidv7(config.clock.now());
  // Off, CORS costs a call nothing: no object, no header looked at.
  const cors = config.corsOrigins.length > 0 ? new Cors(config.corsOrigins) : undefined;
  // First, so that every answer (404s and refusals included) carries x-request-id and CORS.
  app.use(frontDoor({ newId, cors }));
  // Then who is calling, before any route's handler runs.
  app.use(accessGuard(credentials, ROUTE_SCOPES, log));

  // Connections per client address, HTTP/1.1 ones and HTTP/2 sessions alike.
  const connections = new ClientConnections({
    limit: config.maxConnectionsPerClient,
    grace: REFUSED_CONNECTION_GRACE_MS,
  });

  // The call routes of the app, for an app embedded in a server of one's own (`app.fetch`): the
  // gateway's own server never routes a call here (see `limited` in listen).
  const call = (route: CallRoute) => async (c: Context<Env>) => {
    await agent.serve(route, c.req.param('fn'), c.env.incoming, c.env.outgoing, c.get('caller'));
    return RESPONSE_ALREADY_SENT;
  };
  for (const [path, route] of Object.entries(OPENAI_CALL_ROUTES)) app.post(path, call(route));
  app.post('/invoke/:fn', call('invoke'));

  registerCallRoutes(app, detached, config.store);
  // Files and batches; a batch's lines are calls handed to the agent in-process.
  const batch = createBatchRoom({
    options: options.batch,
    store:
      options.batch?.store ??
      createMemoryBatchStore({
        maxStoredBytes: config.maxStoredBytes,
        resultTtl: config.resultTtl,
        now: () => config.clock.now(),
      }),
    calls: config.store,
    limiter: config.limiter,
    serve: (route, incoming, out, caller) => agent.serve(route, undefined, incoming, out, caller),
    fleet: fleetViewOf(pool, queue),
    clock: config.clock,
    logger: log,
    gatewayId: config.gatewayId,
    maxResultBytes: config.maxResultBytes,
    meterProvider: config.meterProvider,
  });
  batch.register(app);
  // Every change to drains, keys and deployments is an audit line, naming the credential.
  const audit = new AuditLog(log, config.clock);
  registerRunnerRoutes(app, fleet, registry, config.clock, audit);
  registerKeyRoutes(app, ring, { openToClients: credentials.openToClients, audit });
  registerDeploymentRoutes(app, config.deployments, serverless, { policy: config.launchPolicy, audit });
  registerDashboardRoutes(app);
  // `created` is when this gateway first saw the model (in seconds, as OpenAI writes it): no
  // runner reports when its model was made.
  const firstSeen = new Map<string, number>();
  const model = (id: string) => {
    let created = firstSeen.get(id);
    if (created === undefined) firstSeen.set(id, (created = Math.floor(config.clock.now() / 1000)));
    return { id, object: 'model', created, owned_by: 'sluice' };
  };
  // The models runners serve, and the deployed ones: a call for one of those is served too,
  // after a cold start, so a client that checks the list first finds it.
  const listed = (): string[] =>
    [...new Set([...pool.models(), ...(serverless.reconciler.deployedModels() ?? [])])].sort();
  // A key with a model list sees those of its models there are, and is refused the others
  // alike, listed or not, as its calls are (gateway/access/model-access.ts).
  app.get('/v1/models', (c) =>
    c.json({ object: 'list', data: visibleModels(keyOf(c.get('caller')), listed()).map(model) }),
  );
  // Model names often hold a slash (org/name): taken as it is, or percent-encoded as OpenAI's SDK sends it.
  app.get('/v1/models/:id{.+}', (c) => {
    const id = c.req.param('id');
    const refusal = modelRefusal(keyOf(c.get('caller')), id);
    if (refusal) return errorResponse(c, refusal);
    if (pool.serves(id) !== 'yes' && !serverless.deployed(id)) {
      return errorResponse(
        c,
        new UnknownModelError(
          `model ${JSON.stringify(id)} is not served by any runner nor deployed; GET /v1/models lists the models`,
        ),
      );
    }
    return c.json(model(id));
  });
  app.get('/v1/queue', (c) => c.json(queue.snapshot()));
  app.get('/v1/stats', (c) => c.json({ ...agent.stats(), cacheTruth: cacheTruth.stats(), batches: batch.stats() }));
  // `clients` says whether client calls need a key: `open` is worth seeing from outside.
  app.get('/healthz', (c) =>
    c.json({ ok: true, version: VERSION, clients: credentials.openToClients ? 'open' : 'keys' }),
  );
  app.get('/readyz', async (c) => {
    // Not ready whenever a new call would be refused, so a load balancer stops sending instead
    // of learning it from 503s; every reason that holds is listed. Detached calls, their status
    // and results need the store; its check is cached by the store for about a second, so
    // probes cost at most one ping a second.
    const store = await config.store.health().catch(() => ({ ok: false }));
    const state = {
      closing: agent.closing,
      inFlight: agent.inFlight,
      maxInFlight: config.maxInFlight,
      uploadsFull: agent.uploadsFull,
      runnersReady: pool.ready(),
      replicasCanStart: serverless.reconciler.deployedModels().some((m) => serverless.failed(m) === undefined),
      storeReady: store.ok,
    };
    const reasons: string[] = notReadyReasons(state);
    // A keyed gateway with no key it can read refuses every client call.
    reasons.push(...keysWatch.reasons());
    const ready = reasons.length === 0;
    const { inFlight, uploads } = agent;
    const notes = readinessNotes(state);
    return c.json({ ready, closing: agent.closing, reasons, notes, inFlight, uploads }, ready ? 200 : 503);
  });
  app.get('/metrics', async (c) => {
    if (!config.renderMetrics)
      return errorResponse(c, new RouteNotFoundError('metrics are not enabled on this gateway'));
    return c.body(await config.renderMetrics(), 200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8' });
  });
  // A route without a scope would be open to anyone: refuse to build such a gateway.
  const unscoped = unscopedRoutes(app, ROUTE_SCOPES);
  if (unscoped.length > 0)
    throw new GatewayConfigError(`routes without a scope in gateway/access/scopes.ts: ${unscoped.join(', ')}`);
  app.notFound((c) => {
    if (c.req.method !== 'POST' && (OPENAI_CALL_ROUTES[c.req.path] || /^\/invoke\/[^/]+$/.test(c.req.path))) {
      return errorResponse(c, new MethodNotAllowedError(`${c.req.method} is not allowed on ${c.req.path}; use POST`), {
        allow: 'POST',
      });
    }
    return errorResponse(c, new RouteNotFoundError(`no route for ${c.req.method} ${c.req.path}`));
  });
  // Routes refuse by throwing a SluiceError: it is answered with its own status, code and
  // headers. Anything else is a fault of ours: logged, and answered GW_INTERNAL without its
  // message, which could hold anything (a secret included).
  app.onError((error, c) => {
    if (error instanceof SluiceError) return errorResponse(c, error);
    log.error('route failed', { path: telemetryPath(c.req.path), error });
    return errorResponse(c, new InternalError({ cause: error }));
  });

  let server: Server | Http2SecureServer | undefined;
  const sessions = new Set<Http2Session>();
  // Under TLS the server has no closeAllConnections: its sockets (HTTP/1.1 ones too) are kept here.
  const tlsSockets = new Set<Socket>();
  let closing: Promise<void> | undefined;
  return {
    config,
    pool,
    app,
    setRunnerTokens(tokens) {
      if (!registry.enabled)
        throw new GatewayConfigError('runner tokens cannot be set on a gateway started without registration');
      const checked = runnerTokensOf({ runnerTokens: tokens });
      registry.setTokens(checked);
      credentials.setRunnerTokens(checked);
      log.info('runner tokens replaced', { tokens: tokens.length });
    },
    async listen(port = 0, host = '127.0.0.1') {
      // Before anything starts: a front that would take secrets in clear text from the network.
      checkFrontListen(config.dataPlane, host);
      await pool.start();
      await detached.start();
      registry.start();
      serverless.start();
      // What @hono/node-server's serve() builds, with a body on the refusals it and Node would
      // answer bare: a target that is not a plain path (guardListener), a Host it cannot make a
      // URL of (errorHandler), a missing Host (the front door, so Node's own check is off), and
      // whatever Node's parser refused (the 'clientError' listener).
      const listener = getRequestListener(app.fetch, {
        hostname: host,
        errorHandler: requestErrorResponse(newId, (error) =>
          log.error('request failed before routing', { error: error as Error }),
        ),
      });
      // A connection past its client's limit gets its first request refused, on every route,
      // before Hono runs (checked here rather than in a middleware: every request pays for it).
      // Then the one door of calls: a POST to a call route, however its path is spelled, goes to
      // the agent, admitted to the client scope here; the agent reads and answers on Node's own
      // request and response, so the Fetch objects Hono's adapter builds would be made for
      // nothing. Everything else goes to the router.
      const limited = (incoming: IncomingMessage, out: ServerResponse): unknown => {
        if (connections.refuses(incoming)) {
          agent.refuse(out, new TooManyConnectionsError(config.maxConnectionsPerClient, config.retryAfter));
          return undefined;
        }
        const call = incoming.method === 'POST' ? callRouteOf(incoming.url ?? '') : undefined;
        if (call === undefined) return listener(incoming, out);
        let caller: Caller;
        try {
          caller = credentials.admit(CALL_SCOPE, incoming.headers.authorization);
        } catch (error) {
          // The body is left unread: the connection closes after the refusal.
          agent.refuse(out, error as SluiceError, { connection: 'close' });
          return undefined;
        }
        return agent.serve(call.route, call.fn, incoming, out, caller);
      };
      const { tls } = config.dataPlane;
      const handler = guardListener(limited, { newId, cors });
      // Under TLS, HTTP/2 for the clients that offer it (ALPN) and HTTP/1.1 for the rest, on one
      // port. HTTP/2's compatibility request and response are what the routes and the agent use
      // on HTTP/1.1; its sessions are kept to end them at close.
      let s: Server | Http2SecureServer;
      if (tls) {
        // Streams per session are bounded as connections per client are: each is a request.
        const settings = { maxConcurrentStreams: config.maxStreamsPerConnection };
        const secure = createSecureServer(
          { allowHTTP1: true, cert: tls.cert, key: tls.key, settings },
          handler as unknown as Parameters<typeof createSecureServer>[1],
        );
        secure.on('session', (session: Http2Session) => {
          connections.admitSession(session);
          sessions.add(session);
          session.once('close', () => sessions.delete(session));
        });
        secure.on('secureConnection', (socket: Socket) => {
          tlsSockets.add(socket);
          socket.once('close', () => tlsSockets.delete(socket));
        });
        s = secure;
      } else {
        const plain = createServer({ requireHostHeader: false }, handler);
        plain.keepAliveTimeout = 65_000;
        plain.headersTimeout = 66_000;
        // Body reads are bounded by bodyReadTimeout; Node's own request timeout would cut streams.
        plain.requestTimeout = 0;
        s = plain;
      }
      // An answer given before the body was read whole (413, 408, a refusal) is followed by the
      // rest of the body read and discarded within bounds, then the close: closed at once, the
      // client would get a reset in place of the answer (placer/kernel/linger.ts).
      lingerEarlyAnswers(s, {
        time: config.lingerTime,
        idle: config.lingerIdleTimeout,
        maxBytes: config.lingerMaxBytes,
        clock: config.clock,
        onEnd: (outcome) => log.debug('lingering close ended', { ...outcome }),
      });
      s.on('clientError', answerClientError(newId));
      // Counted on the socket requests arrive on: under TLS that is the TLS socket, made after the
      // handshake (one that speaks HTTP/2 is counted as its session, above).
      s.on(tls ? 'secureConnection' : 'connection', (socket: Socket) => connections.admitSocket(socket));
      server = s;
      const info = await new Promise<AddressInfo>((resolve, reject) => {
        s.once('error', reject);
        s.listen(port, host, () => resolve(s.address() as AddressInfo));
      });
      // A runner registering this address would have the gateway call itself.
      registry.addListener(info.address, info.port);
      const url = `${tls ? 'https' : 'http'}://${host}:${info.port}`;
      log.info('gateway listening', {
        url,
        placer: config.placer.name,
        runners: config.runners.map((u) => u.origin),
        version: VERSION,
      });
      if (credentials.openToClients) {
        log.warn(
          'gateway open to clients: it was started without --keys or --require-keys, so anyone who can reach it can call it',
          { url },
        );
      }
      // Told once now, and again each time the keys come to keep every client out (or let them in).
      keysWatch.check();
      ring?.onChange(() => keysWatch.check());
      return { url, port: info.port, host };
    },
    close() {
      closing ??= (async () => {
        log.info('gateway draining', { inFlight: agent.inFlight, drainTimeout: config.drainTimeout });
        const s = server;
        const stopped = new Promise<void>((resolve) => (s ? s.close(() => resolve()) : resolve()));
        if (s && 'closeIdleConnections' in s) s.closeIdleConnections();
        // HTTP/2 sessions are told to take no new streams; the streams in flight finish.
        for (const session of sessions) session.close();
        // No batch line is released from now on; those in flight are calls the drain waits for.
        const batchClosed = batch.close(config.drainTimeout);
        // Closes the front gate now; in-flight calls include detached ones still running.
        const agentDrained = agent.drain(config.drainTimeout);
        // Detached calls run on after their 202; they get the same drain time, then are failed.
        await detached.drain(config.drainTimeout);
        const drained = await agentDrained;
        if (!drained) log.warn('drain timeout, closing in-flight calls', { inFlight: agent.inFlight });
        await batchClosed;
        await serverless.close();
        registry.close();
        queue.close();
        await pool.close({ abortCalls: !drained });
        await config.store.close();
        await config.limiter.close();
        await ring?.close();
        if (s && 'closeAllConnections' in s) s.closeAllConnections();
        for (const session of sessions) session.destroy();
        for (const socket of tlsSockets) socket.destroy();
        await stopped;
        log.info('gateway stopped', {});
      })();
      return closing;
    },
  };
}

/**
 * Resolves the options (gateway/options.ts, which makes nothing) and makes the parts they left
 * out, on the gateway's clock: the default placer (by its name, as --placer's are made), an
 * in-memory store bounded by resultTtl and maxStoredBytes, an in-memory limiter on
 * keyLimitWindow, and an empty deployment store.
 * @throws {@link GatewayConfigError} naming the first bad option.
 */
export function composeGatewayConfig(options: GatewayOptions): GatewayConfig {
  const settings = resolveGatewayOptions(options);
  const { clock, resultTtl, maxStoredBytes, keyLimitWindow, retryAfter } = settings;
  const now = () => clock.now();
  return Object.freeze({
    ...settings,
    placer: settings.placer ?? createBuiltinPlacer(gatewayDefaults.placer, undefined, { clock }),
    store: settings.store ?? createMemoryStore({ resultTtl, maxStoredBytes, now }),
    limiter:
      settings.limiter ?? createMemoryLimiter({ clock, windowMs: keyLimitWindow, retryAfterMs: retryAfter * 1000 }),
    deployments: settings.deployments ?? new MemoryDeploymentStore({ now }),
  });
}

/**
 * The `tokenizers` option, checked under its own name (the mapper would name it `tokenizerDir`).
 * @throws {@link GatewayConfigError} when it is given and is not a non-empty path.
 */
function tokenizerDirOf(value: unknown): string | undefined {
  if (value === undefined) return undefined;
  if (typeof value === 'string' && value !== '') return value;
  throw new GatewayConfigError(`tokenizers must be a directory path, got ${JSON.stringify(value)}`);
}
