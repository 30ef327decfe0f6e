/**
 * The runner's HTTP face: the status and health routes, and every POST as a call (runner/call.ts
 * answers on the Node response itself, so a call's bytes never pass through a web Response).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { RESPONSE_ALREADY_SENT } from '@hono/node-server/utils/response';
import { Hono } from 'hono';
import type { BusyReason } from './admission.ts';
import { STATUS_PATH } from './protocol/index.ts';
import type { RunnerStatus } from './protocol/index.ts';

/** The Node request and response, as @hono/node-server hands them to a route. */
export type NodeBindings = { Bindings: { incoming: IncomingMessage; outgoing: ServerResponse } };

/** What the routes answer from. */
export interface RouteHandlers {
  status(): RunnerStatus;
  /** Why the runner is not ready, or undefined when it is (GET /readyz). */
  notReady(): BusyReason | undefined;
  /** The runner's metrics in Prometheus text (GET /metrics). */
  metrics(): Promise<string>;
  /** Serves one call on the Node request and response. */
  serveCall(req: IncomingMessage, res: ServerResponse): Promise<void>;
}

/**
 * The runner's routes: GET /status (the status payload), GET /healthz (the process answers),
 * GET /readyz (200, or 503 with the reason), GET /metrics (Prometheus text), and POST on any
 * path, forwarded to the engine. The GET routes take no credential (docs/security.md says why).
 */
export function runnerRoutes(handlers: RouteHandlers): Hono<NodeBindings> {
  const app = new Hono<NodeBindings>();
  app.get(STATUS_PATH, (c) => c.json(shownStatus(handlers.status())));
  app.get('/healthz', (c) => c.json({ ok: true }));
  app.get('/readyz', (c) => {
    const reason = handlers.notReady();
    return reason === undefined ? c.json({ ready: true }) : c.json({ ready: false, reason }, 503);
  });
  app.get('/metrics', async (c) =>
    c.body(await handlers.metrics(), 200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8' }),
  );
  app.post('*', async (c) => {
    await handlers.serveCall(c.env.incoming, c.env.outgoing);
    return RESPONSE_ALREADY_SENT;
  });
  return app;
}

/**
 * The status as GET /status shows it: without the hosted engine's revision, which only the
 * heartbeat carries (a hash over the ordered profile, whose args and env may hold credentials).
 */
function shownStatus(status: RunnerStatus): RunnerStatus {
  if (status.hosted?.revision === undefined) return status;
  const { revision: _revision, ...hosted } = status.hosted;
  return { ...status, hosted };
}
