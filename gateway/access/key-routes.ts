/**
 * The operator API of client keys: POST /v1/keys makes one and answers its token once, GET
 * /v1/keys lists them (never a token or a digest), GET and DELETE /v1/keys/:id read and revoke
 * one. Operator scope, as every /v1/keys* route in scopes.ts: the scope check runs before these
 * handlers. Each create and delete is an audit line (audit.ts). Refusals are thrown and answered by the app's onError.
 */
import type { Hono, MiddlewareHandler } from 'hono';
import { ClientsOpenError, InvalidJsonError, KeyNotFoundError, RouteNotFoundError } from '../errors.ts';
import type { KeyRing } from './keys.ts';
import type { GatewayEnv } from './scopes.ts';
import type { AuditLog } from './audit.ts';

/** Options of {@link registerKeyRoutes}. */
export interface KeyRoutesOptions {
  /**
   * The gateway was started open to clients: a key made now would not close it, so making one
   * is refused (409 GW_CLIENTS_OPEN) rather than let an operator believe it did.
   * @default false
   */
  readonly openToClients?: boolean;
  /** Where each create and delete is written as an audit line. @default none */
  readonly audit?: AuditLog;
}

/**
 * Adds the /v1/keys routes over `keys`. Without a key ring (a gateway given a `clientKeys` lookup
 * of its own in code) the routes exist, so their scope is checked as every route's, and answer
 * 404: such keys are managed where they come from.
 */
export function registerKeyRoutes(
  app: Hono<GatewayEnv>,
  ring: KeyRing | undefined,
  options: KeyRoutesOptions = {},
): void {
  const { openToClients = false, audit } = options;
  const managed: MiddlewareHandler<GatewayEnv> = async function managed(_c, next) {
    if (!ring)
      throw new RouteNotFoundError(
        "this gateway's client keys come from code (the clientKeys option), not from a key ring: /v1/keys is off",
      );
    await next();
  };
  const keys = (): KeyRing => ring!;
  app.post('/v1/keys', managed, async (c) => {
    if (openToClients) {
      throw new ClientsOpenError(
        'this gateway was started open to clients (without --keys or --require-keys) and stays open: a key would not close it; restart it with --require-keys, then make keys',
      );
    }
    let body: unknown;
    try {
      body = await c.req.json();
    } catch (error) {
      throw new InvalidJsonError(`request body is not valid JSON: ${(error as Error).message}`);
    }
    const created = await keys().create(body);
    // The record's field names: the token is in the answer alone.
    audit?.record(c.get('caller'), {
      action: 'key.create',
      target: created.record.id,
      fields: Object.keys(created.record)
        .filter((f) => f !== 'id')
        .sort(),
    });
    // The token is in this answer and nowhere else: never logged, never stored.
    return c.json({ object: 'client_key', key: created.key, ...created.record }, 201, { 'cache-control': 'no-store' });
  });
  app.get('/v1/keys', managed, (c) =>
    c.json({
      object: 'list',
      data: keys()
        .list()
        .map((record) => ({ object: 'client_key', ...record })),
    }),
  );
  app.get('/v1/keys/:id', managed, (c) => {
    const id = c.req.param('id');
    const record = keys()
      .list()
      .find((r) => r.id === id);
    if (!record) throw new KeyNotFoundError(`no client key with id ${JSON.stringify(id)}`);
    return c.json({ object: 'client_key', ...record });
  });
  app.delete('/v1/keys/:id', managed, async (c) => {
    await keys().delete(c.req.param('id'));
    audit?.record(c.get('caller'), { action: 'key.delete', target: c.req.param('id') });
    return c.body(null, 204);
  });
}
