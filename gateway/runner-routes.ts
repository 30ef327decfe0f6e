/**
 * The pool's HTTP face: registration and heartbeats for runners that dial out, the runner list
 * for operators, and drain.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Context, Hono } from 'hono';
import type { SluiceError } from '../placer/kernel/index.ts';
import type { Logger } from '../placer/kernel/index.ts';
import type { Clock } from '../placer/kernel/index.ts';
import { REGISTER_PATH } from '../runner/protocol.ts';
import { GatewayError, InvalidJsonError, errorResponse } from './errors.ts';
import type { FleetPool } from './pool.ts';
import type { RunnerEntry } from './runner-entry.ts';
import type { RunnerRegistry } from './registry.ts';

type Env = { Bindings: { incoming: IncomingMessage; outgoing: ServerResponse } };

/** What GET /v1/runners shows of one runner. */
export function runnerView(runner: RunnerEntry, now: number): Record<string, unknown> {
  const reg = runner.registration;
  const state = reg
    ? reg.drainRequested ? 'drain-requested' : reg.draining ? 'draining' : reg.state
    : runner.health.reachable ? 'live' : 'unreachable';
  return {
    id: runner.id,
    url: runner.url.origin,
    source: reg ? 'registered' : 'static',
    state,
    ready: reg ? reg.ready : runner.health.models !== undefined,
    placeable: runner.placeable(),
    models: runner.health.models ?? [],
    inFlight: runner.inFlight,
    // What this gateway saw when it last called or probed the runner: `hung` when it took a
    // connection and said nothing (passed over until a probe gets an answer), `down` when it
    // refused one (passed over for a second).
    health: runner.health.hung ? 'hung' : runner.health.reachable ? 'ok' : 'down',
    breaker: runner.breaker.state,
    ...(reg
      ? {
          version: reg.version,
          lastHeartbeatAgeMs: Math.round(now - reg.lastSeen),
          load: reg.report?.load,
          loadAgeMs: reg.report ? Math.round(now - reg.report.at) : undefined,
          ...(runner.health.reachable ? {} : { lastError: runner.health.lastError }),
        }
      : { lastError: runner.health.lastError }),
  };
}

/** Adds the registration, heartbeat, list and drain routes. */
export function registerRunnerRoutes(app: Hono<Env>, pool: FleetPool, registry: RunnerRegistry, clock: Clock, logger: Logger): void {
  const guard = (handler: (c: Context<Env>) => Promise<Response> | Response) => async (c: Context<Env>) => {
    if (!registry.enabled) {
      return errorResponse(c, new GatewayError('GW_REGISTRATION_DISABLED', 404, 'not_found_error', 'runner registration is off on this gateway: start it with --runner-token'));
    }
    if (!registry.authorize(c.req.header('authorization'))) {
      // Logged without the presented token: a near-miss token in a log is a leaked token.
      logger.warn('runner token refused', { method: c.req.method, path: c.req.path, remote: c.env.incoming.socket.remoteAddress });
      return errorResponse(c, new GatewayError('GW_UNAUTHORIZED', 401, 'invalid_request_error', 'missing or wrong runner token'));
    }
    try {
      return await handler(c);
    } catch (error) {
      return errorResponse(c, error as SluiceError);
    }
  };
  const body = async (c: Context<Env>): Promise<unknown> => {
    try {
      return await c.req.json();
    } catch (error) {
      throw new InvalidJsonError(`request body is not valid JSON: ${(error as Error).message}`);
    }
  };

  app.post(REGISTER_PATH, guard(async (c) => c.json(registry.register(await body(c)))));
  app.post(
    '/v1/runners/:id/heartbeat',
    guard(async (c) => {
      const answer = registry.heartbeat(c.req.param('id')!, await body(c));
      return answer ? c.json(answer) : errorResponse(c, unknownRunner(c.req.param('id')!));
    }),
  );
  app.delete(
    '/v1/runners/:id',
    guard((c) => (registry.deregister(c.req.param('id')!) ? c.body(null, 204) : errorResponse(c, unknownRunner(c.req.param('id')!)))),
  );
  app.post(
    '/v1/runners/drain',
    guard((c) => {
      const raw = c.req.query('interval');
      const interval = raw === undefined ? 1000 : Number(raw);
      if (!Number.isSafeInteger(interval) || interval < 0 || interval > 600_000) {
        return errorResponse(c, new GatewayError('GW_INVALID_DRAIN', 400, 'invalid_request_error', `interval must be 0 to 600000 ms, got ${JSON.stringify(raw)}`));
      }
      return c.json({ runners: registry.drainAll(interval), intervalMs: interval }, 202);
    }),
  );
  app.post(
    '/v1/runners/:id/drain',
    guard((c) => {
      const id = c.req.param('id')!;
      if (!registry.requestDrain(id)) return errorResponse(c, unknownRunner(id));
      return c.json(runnerView(pool.get(id)!, clock.now()), 202);
    }),
  );
  app.get('/v1/runners', (c) => {
    const now = clock.now();
    return c.json({ object: 'list', data: pool.runnerList.map((r) => runnerView(r, now)) });
  });
}

function unknownRunner(id: string): GatewayError {
  return new GatewayError('GW_RUNNER_NOT_FOUND', 404, 'not_found_error', `no registered runner ${JSON.stringify(id)}: register first`);
}
