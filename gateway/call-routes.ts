/**
 * The detached-call routes: status, result and cancel of a call by id, from any gateway that
 * shares the store. Refusals are thrown and answered by the app's onError (gateway/server.ts).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Hono } from 'hono';
import { callUrls } from './detached-flow.ts';
import type { DetachedCalls } from './detached.ts';
import { CallNotFinishedError, CallNotFoundError, NoResultError, storeFailure } from './errors.ts';
import { LIVE_STATUSES } from './store/types.ts';
import type { CallRecord, CallStore } from './store/types.ts';

type Env = { Bindings: { incoming: IncomingMessage; outgoing: ServerResponse } };

/** Seconds a client polling a queued or running call is asked to wait. */
const POLL_AFTER_SECONDS = '1';

/** What GET /v1/calls/{id} answers. */
function statusView(record: CallRecord): Record<string, unknown> {
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

/**
 * Adds GET /v1/calls/:id, GET /v1/calls/:id/result and POST /v1/calls/:id/cancel. A store that
 * fails with something other than a SluiceError is answered GW_STORE_UNAVAILABLE (storeFailure),
 * never GW_INTERNAL: a store that went away is a 503 to retry, not a bug.
 */
export function registerCallRoutes(app: Hono<Env>, calls: DetachedCalls, store: CallStore): void {
  const fromStore = <T>(pending: Promise<T>): Promise<T> =>
    pending.catch((error: unknown) => {
      throw storeFailure(error);
    });
  const found = async (id: string, pending: Promise<CallRecord | undefined>): Promise<CallRecord> => {
    const record = await fromStore(pending);
    if (!record) throw new CallNotFoundError(`no call ${JSON.stringify(id)}: the id is unknown, or its result expired`);
    return record;
  };

  app.get('/v1/calls/:id', async (c) => {
    const id = c.req.param('id');
    const record = await found(id, calls.status(id));
    return c.json(statusView(record), 200, LIVE_STATUSES.has(record.status) ? { 'retry-after': POLL_AFTER_SECONDS } : {});
  });

  app.get('/v1/calls/:id/result', async (c) => {
    const id = c.req.param('id');
    const record = await found(id, calls.status(id));
    if (LIVE_STATUSES.has(record.status)) {
      throw new CallNotFinishedError(`call ${id} is still ${record.status}; poll ${callUrls(id).status}`, { headers: { 'retry-after': POLL_AFTER_SECONDS } });
    }
    const result = await fromStore(store.getResult(id));
    if (!result) {
      const why = record.error ? `: ${record.error.code} ${record.error.message}` : '';
      throw new NoResultError(`call ${id} ended ${record.status} without a result${why}`);
    }
    return c.body(new Uint8Array(result.body), result.status as 200, { 'content-type': result.contentType, 'sluice-call-id': id });
  });

  app.post('/v1/calls/:id/cancel', async (c) => {
    const id = c.req.param('id');
    return c.json(statusView(await found(id, calls.cancel(id))));
  });
}
