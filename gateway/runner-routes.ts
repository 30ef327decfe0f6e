/**
 * The pool's HTTP face: registration and heartbeats for runners that dial out, the runner list
 * for operators, and drain. Refusals are thrown and answered by the app's onError
 * (gateway/server.ts). Who may call which is the route table's (gateway/access/scopes.ts): the
 * access guard has admitted the caller before a handler here runs.
 */
import type { Context, Hono } from 'hono';
import type { Clock } from '../placer/kernel/index.ts';
import { REGISTER_PATH } from '../runner/protocol.ts';
import type { GatewayEnv } from './access/scopes.ts';
import { InvalidDrainError, InvalidJsonError, RunnerNotFoundError } from './errors.ts';
import type { FleetPool } from './pool.ts';
import type { RunnerEntry } from './runner-entry.ts';
import type { RunnerRegistry } from './registry.ts';

/** What GET /v1/runners shows of one runner. */
function runnerView(runner: RunnerEntry, now: number): Record<string, unknown> {
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
export function registerRunnerRoutes(app: Hono<GatewayEnv>, pool: FleetPool, registry: RunnerRegistry, clock: Clock): void {
  const body = async (c: Context<GatewayEnv>): Promise<unknown> => {
    try {
      return await c.req.json();
    } catch (error) {
      throw new InvalidJsonError(`request body is not valid JSON: ${(error as Error).message}`);
    }
  };

  app.post(REGISTER_PATH, async (c) => c.json(registry.register(await body(c))));
  app.post('/v1/runners/:id/heartbeat', async (c) => {
    const id = c.req.param('id');
    const answer = registry.heartbeat(id, await body(c));
    if (!answer) throw unknownRunner(id);
    return c.json(answer);
  });
  app.delete('/v1/runners/:id', (c) => {
    if (!registry.deregister(c.req.param('id'))) throw unknownRunner(c.req.param('id'));
    return c.body(null, 204);
  });
  app.post('/v1/runners/drain', (c) => {
    const raw = c.req.query('interval');
    const interval = raw === undefined ? 1000 : Number(raw);
    if (!Number.isSafeInteger(interval) || interval < 0 || interval > 600_000) {
      throw new InvalidDrainError(`interval must be 0 to 600000 ms, got ${JSON.stringify(raw)}`);
    }
    return c.json({ runners: registry.drainAll(interval), intervalMs: interval }, 202);
  });
  app.post('/v1/runners/:id/drain', (c) => {
    const id = c.req.param('id');
    if (!registry.requestDrain(id)) throw unknownRunner(id);
    return c.json(runnerView(pool.get(id)!, clock.now()), 202);
  });
  app.get('/v1/runners', (c) => {
    const now = clock.now();
    return c.json({ object: 'list', data: pool.runnerList.map((r) => runnerView(r, now)) });
  });
}

function unknownRunner(id: string): RunnerNotFoundError {
  return new RunnerNotFoundError(`no registered runner ${JSON.stringify(id)}: register first`);
}
