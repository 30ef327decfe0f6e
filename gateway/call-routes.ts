/**
 * The detached-call routes: status, result and cancel of a call by id, from any gateway that
 * shares the store.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Context, Hono } from 'hono';
import { SluiceError } from '../placer/kernel/index.ts';
import { callUrls } from './detached-flow.ts';
import type { DetachedCalls } from './detached.ts';
import { GatewayError, errorResponse } from './errors.ts';
import { LIVE_STATUSES } from './store/types.ts';
import type { CallRecord, CallStore } from './store/types.ts';

type Env = { Bindings: { incoming: IncomingMessage; outgoing: ServerResponse } };

/** Seconds a client polling a queued or running call is asked to wait. */
const POLL_AFTER_SECONDS = '1';

/** What GET /v1/calls/{id} answers. */
export function statusView(record: CallRecord): Record<string, unknown> {
  const iso = (ms: number | undefined) => (ms === undefined ? undefined : new Date(ms).toISOString());
  return {
    id: record.id,
    fn: record.fn,
    status: record.status,
    createdAt: iso(record.createdAt),
    startedAt: iso(record.startedAt),
    completedAt: iso(record.completedAt),
    runner: record.runner,
    delayMs: record.delayMs,
    executionMs: record.executionMs,
    ...(record.error ? { error: record.error } : {}),
    urls: callUrls(record.id),
  };
}

/** Adds GET /v1/calls/:id, GET /v1/calls/:id/result and POST /v1/calls/:id/cancel. */
export function registerCallRoutes(app: Hono<Env>, calls: DetachedCalls, store: CallStore): void {
  const notFound = (id: string) =>
    new GatewayError('GW_CALL_NOT_FOUND', 404, 'not_found_error', `no call ${JSON.stringify(id)}: the id is unknown, or its result expired`);

  const guarded = (handler: (c: Context<Env>, id: string) => Promise<Response>) => async (c: Context<Env>) => {
    try {
      return await handler(c, c.req.param('id')!);
    } catch (error) {
      const failure =
        error instanceof SluiceError
          ? error
          : new GatewayError('GW_STORE_UNAVAILABLE', 503, 'service_unavailable_error', 'the detached-call store is unavailable; retry later', { cause: error });
      return errorResponse(c, failure);
    }
  };

  app.get(
    '/v1/calls/:id',
    guarded(async (c, id) => {
      const record = await calls.status(id);
      if (!record) return errorResponse(c, notFound(id));
      return c.json(statusView(record), 200, LIVE_STATUSES.has(record.status) ? { 'retry-after': POLL_AFTER_SECONDS } : {});
    }),
  );

  app.get(
    '/v1/calls/:id/result',
    guarded(async (c, id) => {
      const record = await calls.status(id);
      if (!record) return errorResponse(c, notFound(id));
      if (LIVE_STATUSES.has(record.status)) {
        return errorResponse(c, new GatewayError('GW_CALL_NOT_FINISHED', 409, 'invalid_request_error', `call ${id} is still ${record.status}; poll ${callUrls(id).status}`), {
          'retry-after': POLL_AFTER_SECONDS,
        });
      }
      const result = await store.getResult(id);
      if (!result) {
        const why = record.error ? `: ${record.error.code} ${record.error.message}` : '';
        return errorResponse(c, new GatewayError('GW_NO_RESULT', 404, 'not_found_error', `call ${id} ended ${record.status} without a result${why}`));
      }
      return c.body(new Uint8Array(result.body), result.status as 200, { 'content-type': result.contentType, 'sluice-call-id': id });
    }),
  );

  app.post(
    '/v1/calls/:id/cancel',
    guarded(async (c, id) => {
      const record = await calls.cancel(id);
      if (!record) return errorResponse(c, notFound(id));
      return c.json(statusView(record));
    }),
  );
}
