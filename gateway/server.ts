/**
 * createGateway: the HTTP front (Hono on @hono/node-server) around the LB agent.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { serve } from '@hono/node-server';
import type { ServerType } from '@hono/node-server';
import { RESPONSE_ALREADY_SENT } from '@hono/node-server/utils/response';
import { Hono } from 'hono';
import type { Context } from 'hono';
import { VERSION } from '../runner/version.ts';
import { LbAgent } from './agent.ts';
import { registerCallRoutes } from './call-routes.ts';
import { DetachedCalls } from './detached.ts';
import type { CallRoute } from './call.ts';
import { GatewayError, RouteNotFoundError, errorResponse } from './errors.ts';
import { resolveGatewayOptions } from './options.ts';
import type { GatewayConfig, GatewayOptions } from './options.ts';
import { FleetPool } from './pool.ts';
import { RunnerRegistry } from './registry.ts';
import { registerRunnerRoutes } from './runner-routes.ts';
import type { GatewayPool } from './pool.ts';

type Env = { Bindings: { incoming: IncomingMessage; outgoing: ServerResponse } };

/** A gateway: the app, its pool, and its lifecycle. */
export interface Gateway {
  readonly config: GatewayConfig;
  readonly pool: GatewayPool;
  /** The Hono app, for embedding the routes in a server of your own. */
  readonly app: Hono<Env>;
  /** Starts the pool and listens. */
  listen(port?: number, host?: string): Promise<{ url: string; port: number; host: string }>;
  /**
   * Graceful shutdown: the front gate answers 503, in-flight calls get up to drainTimeout to
   * finish, then runner connections close. Idempotent.
   */
  close(): Promise<void>;
}

const CALL_ROUTES: Record<string, CallRoute> = {
  '/v1/chat/completions': 'chat',
  '/v1/completions': 'completions',
  '/v1/embeddings': 'embeddings',
};

/** Builds a gateway from options; nothing listens until {@link Gateway.listen}. */
export function createGateway(options: GatewayOptions): Gateway {
  const config = resolveGatewayOptions(options);
  const log = config.logger;
  const fleet = new FleetPool({
    urls: config.runners,
    connectTimeout: config.runnerConnectTimeout,
    statusInterval: config.statusInterval,
    breaker: { ...config.breaker, now: () => config.clock.now() },
    logger: log,
    onRemove: (ids) => config.placer.forget?.(ids),
  });
  const pool: GatewayPool = config.pool ?? fleet;
  const registry = new RunnerRegistry({
    pool: fleet,
    token: config.runnerToken,
    gatewayId: config.gatewayId,
    heartbeatInterval: config.heartbeatInterval,
    unreachableAfter: config.heartbeatInterval * config.unreachableAfterMissed,
    lostAfter: config.lostAfter,
    logger: log,
    clock: config.clock,
  });
  const detached = new DetachedCalls({
    store: config.store,
    gatewayId: config.gatewayId,
    resultTtl: config.resultTtl,
    maxResultBytes: config.maxResultBytes,
    executionHeadroom: config.executionHeadroom,
    detachedPlacerTimeout: config.placerConfig.detachedPlacerTimeout,
    callbacks: config.callbacks,
    logger: log,
    clock: config.clock,
    meterProvider: config.meterProvider,
  });
  const agent = new LbAgent(config, pool, detached);
  const app = new Hono<Env>();

  const call = (route: CallRoute) => async (c: Context<Env>) => {
    await agent.serve(route, c.req.param('fn'), c.env.incoming, c.env.outgoing);
    return RESPONSE_ALREADY_SENT;
  };
  for (const [path, route] of Object.entries(CALL_ROUTES)) app.post(path, call(route));
  app.post('/invoke/:fn', call('invoke'));

  registerCallRoutes(app, detached, config.store);
  registerRunnerRoutes(app, fleet, registry, config.clock, log);
  app.get('/v1/models', (c) =>
    c.json({ object: 'list', data: pool.models().map((id) => ({ id, object: 'model', created: 0, owned_by: 'sluice' })) }),
  );
  app.get('/healthz', (c) => c.json({ ok: true, version: VERSION }));
  app.get('/readyz', async (c) => {
    // Detached calls, their status and results all need the store; its check is cached by the
    // store for about a second, so probes cost at most one ping a second.
    const store = await config.store.health().catch(() => ({ ok: false }));
    const reason = agent.closing ? 'shutting down' : !pool.ready() ? 'no ready runner' : !store.ok ? 'store unavailable' : undefined;
    return c.json({ ready: reason === undefined, closing: agent.closing, ...(reason ? { reason } : {}) }, reason ? 503 : 200);
  });
  app.get('/metrics', async (c) => {
    if (!config.renderMetrics) return errorResponse(c, new RouteNotFoundError('metrics are not enabled on this gateway'));
    return c.body(await config.renderMetrics(), 200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8' });
  });
  app.notFound((c) => {
    if (c.req.method !== 'POST' && (CALL_ROUTES[c.req.path] || /^\/invoke\/[^/]+$/.test(c.req.path))) {
      return errorResponse(c, new GatewayError('GW_METHOD_NOT_ALLOWED', 405, 'invalid_request_error', `${c.req.method} is not allowed on ${c.req.path}; use POST`), { allow: 'POST' });
    }
    return errorResponse(c, new RouteNotFoundError(`no route for ${c.req.method} ${c.req.path}`));
  });
  app.onError((error, c) => {
    log.error('route failed', { path: c.req.path, error });
    return errorResponse(c, new GatewayError('GW_INTERNAL', 500, 'server_error', 'internal gateway error'));
  });

  let server: ServerType | undefined;
  let closing: Promise<void> | undefined;
  return {
    config,
    pool,
    app,
    async listen(port = 0, host = '127.0.0.1') {
      await pool.start();
      await detached.start();
      registry.start();
      const info = await new Promise<AddressInfo>((resolve, reject) => {
        const s = serve({ fetch: app.fetch, port, hostname: host }, (i) => resolve(i));
        s.once('error', reject);
        server = s;
      });
      const http = server as unknown as { keepAliveTimeout: number; headersTimeout: number; requestTimeout: number };
      http.keepAliveTimeout = 65_000;
      http.headersTimeout = 66_000;
      // Body reads are bounded by bodyReadTimeout; Node's own request timeout would cut streams.
      http.requestTimeout = 0;
      const url = `http://${host}:${info.port}`;
      log.info('gateway listening', { url, placer: config.placer.name, runners: config.runners.map((u) => u.origin), version: VERSION });
      return { url, port: info.port, host };
    },
    close() {
      closing ??= (async () => {
        log.info('gateway draining', { inFlight: agent.inFlight, drainTimeout: config.drainTimeout });
        const s = server as unknown as { close(cb: () => void): void; closeIdleConnections?(): void; closeAllConnections?(): void } | undefined;
        const stopped = new Promise<void>((resolve) => (s ? s.close(() => resolve()) : resolve()));
        s?.closeIdleConnections?.();
        // Closes the front gate now; in-flight calls include detached ones still running.
        const agentDrained = agent.drain(config.drainTimeout);
        // Detached calls run on after their 202; they get the same drain time, then are failed.
        await detached.drain(config.drainTimeout);
        const drained = await agentDrained;
        if (!drained) log.warn('drain timeout, closing in-flight calls', { inFlight: agent.inFlight });
        registry.close();
        await pool.close(!drained);
        await config.store.close();
        s?.closeAllConnections?.();
        await stopped;
        log.info('gateway stopped', {});
      })();
      return closing;
    },
  };
}
