/**
 * The operator API of client keys: POST /v1/keys makes one and answers its token once, GET
 * /v1/keys lists them (never a token or a digest), GET and DELETE /v1/keys/:id read and revoke
 * one. Operator scope, as every /v1/keys* route in scopes.ts: the scope check runs before these
 * handlers. Refusals are thrown and answered by the app's onError.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Hono } from 'hono';
import { InvalidJsonError, KeyNotFoundError } from '../errors.ts';
import type { KeyRing } from './keys.ts';

type Env = { Bindings: { incoming: IncomingMessage; outgoing: ServerResponse } };

/** Adds the /v1/keys routes over `keys`. */
export function registerKeyRoutes(app: Hono<Env>, keys: KeyRing): void {
  app.post('/v1/keys', async (c) => {
    let body: unknown;
    try {
      body = await c.req.json();
    } catch (error) {
      throw new InvalidJsonError(`request body is not valid JSON: ${(error as Error).message}`);
    }
    const created = await keys.create(body);
    // The token is in this answer and nowhere else: never logged, never stored.
    return c.json({ object: 'client_key', key: created.key, ...created.record }, 201, { 'cache-control': 'no-store' });
  });
  app.get('/v1/keys', (c) => c.json({ object: 'list', data: keys.list().map((record) => ({ object: 'client_key', ...record })) }));
  app.get('/v1/keys/:id', (c) => {
    const id = c.req.param('id');
    const record = keys.list().find((r) => r.id === id);
    if (!record) throw new KeyNotFoundError(`no client key with id ${JSON.stringify(id)}`);
    return c.json({ object: 'client_key', ...record });
  });
  app.delete('/v1/keys/:id', async (c) => {
    await keys.delete(c.req.param('id'));
    return c.body(null, 204);
  });
}
