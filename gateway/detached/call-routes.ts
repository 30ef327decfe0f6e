/**
 * The detached-call routes: status, result and cancel of a call by id, from any gateway that
 * shares the store. A call answers only to the client key that created it (a call made without
 * a key, only to callers without one) and to operators; to anyone else it does not exist.
 * Refusals are thrown and answered by the app's onError (gateway/server.ts).
 */
import type { Hono } from 'hono';
import type { Caller, GatewayEnv } from '../access/index.ts';
import { callUrls } from './detached-flow.ts';
import type { DetachedCalls } from './detached.ts';
import { CallNotFinishedError, CallNotFoundError, NoResultError, storeFailure } from '../errors.ts';
import { LIVE_STATUSES } from '../store/index.ts';
import type { CallRecord, CallStore } from '../store/index.ts';

/** Seconds a client polling a queued or running call is asked to wait. */
const POLL_AFTER_SECONDS = '1';

/** True when `caller` may see and cancel `record`: its own call, or any call for an operator. */
function ownsCall(caller: Caller, record: Pick<CallRecord, 'client'>): boolean {
  if (caller.kind === 'operator') return true;
  return record.client === (caller.kind === 'client' ? caller.key.id : undefined);
}

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
export function registerCallRoutes(app: Hono<GatewayEnv>, calls: DetachedCalls, store: CallStore): void {
  const fromStore = <T>(pending: Promise<T>): Promise<T> =>
    pending.catch((error: unknown) => {
      throw storeFailure(error);
    });
  const found = async (caller: Caller, id: string): Promise<CallRecord> => {
    const record = await fromStore(calls.status(id));
    // Another client's call is answered as an unknown one: its id says nothing to a stranger.
    if (!record || !ownsCall(caller, record)) throw unknownCall(id);
    return record;
  };

  app.get('/v1/calls/:id', async (c) => {
    const id = c.req.param('id');
    const record = await found(c.get('caller'), id);
    return c.json(
      statusView(record),
      200,
      LIVE_STATUSES.has(record.status) ? { 'retry-after': POLL_AFTER_SECONDS } : {},
    );
  });

  app.get('/v1/calls/:id/result', async (c) => {
    const id = c.req.param('id');
    const record = await found(c.get('caller'), id);
    if (LIVE_STATUSES.has(record.status)) {
      throw new CallNotFinishedError(`call ${id} is still ${record.status}; poll ${callUrls(id).status}`, {
        headers: { 'retry-after': POLL_AFTER_SECONDS },
      });
    }
    const result = await fromStore(store.getResult(id));
    if (!result) {
      const why = record.error ? `: ${record.error.code} ${record.error.message}` : '';
      throw new NoResultError(`call ${id} ended ${record.status} without a result${why}`);
    }
    return c.body(new Uint8Array(result.body), result.status as 200, {
      'content-type': result.contentType,
      'sluice-call-id': id,
    });
  });

  app.post('/v1/calls/:id/cancel', async (c) => {
    const id = c.req.param('id');
    // Checked first: another client's call is not cancelled, it is unknown.
    await found(c.get('caller'), id);
    const record = await fromStore(calls.cancel(id));
    if (!record) throw unknownCall(id);
    return c.json(statusView(record));
  });
}

function unknownCall(id: string): CallNotFoundError {
  return new CallNotFoundError(`no call ${JSON.stringify(id)}: the id is unknown, or its result expired`);
}
