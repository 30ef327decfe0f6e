/**
 * Who may call what: the scope check as a table (every scope × every kind of caller, open and
 * closed to clients), then every route of a real gateway × every kind of caller, generated from
 * the route table so that a new route cannot go without its row, then calls that belong to the
 * key that made them.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { request } from 'undici';
import { Credentials, bearerToken, credentialId } from '../../../gateway/access/credentials.ts';
import { unscopedRoutes } from '../../../gateway/access/guard.ts';
import { ROUTE_SCOPES } from '../../../gateway/access/scopes.ts';
import type { ClientKey, ClientKeys, RouteScope, Scope } from '../../../gateway/access/scopes.ts';
import { createGateway } from '../../../gateway/server.ts';
import type { Gateway } from '../../../gateway/server.ts';
import type { GatewayOptions } from '../../../gateway/options.ts';
import { createSimEngine } from '../../../runner/engines/sim/server.ts';
import { createRunner } from '../../../runner/server.ts';
import { chatBody, eventually, postJson } from '../../support/fleet.ts';

const OPERATOR = 'operator-token-0123456789abcdef';
const VIEWER = 'viewer-token-0123456789abcdef';
const RUNNER = 'runner-token-0123456789abcdef';
const KEY_A: ClientKey = { id: 'ka', name: 'team a', limits: {} };
const KEY_B: ClientKey = { id: 'kb', name: 'team b', limits: {} };

/** A key ring of two keys (or none), as the key ring answers. */
function keys(count: 0 | 2): ClientKeys {
  const ring = new Map(count === 2 ? [['sk-a-secret', KEY_A], ['sk-b-secret', KEY_B]] : []);
  return { lookup: (token) => ring.get(token), size: ring.size };
}

/** The kinds of caller the issue names, as the Authorization header each sends. */
const CALLERS = {
  none: undefined,
  client: 'Bearer sk-a-secret',
  'wrong client': 'Bearer sk-nobody-knows-this',
  operator: `Bearer ${OPERATOR}`,
  viewer: `Bearer ${VIEWER}`,
  runner: `Bearer ${RUNNER}`,
  'forged runner': `Bearer ${RUNNER.slice(0, -1)}X`,
} as const;
type CallerName = keyof typeof CALLERS;

/** What a caller gets on a route of `scope` with keys configured: admitted, or the refusal's status. */
function expected(route: Pick<RouteScope, 'scope' | 'operatorToo'>, caller: CallerName): 'admitted' | 401 | 403 {
  if (route.scope === 'public') return 'admitted';
  const holds: Record<CallerName, Scope | 'unknown' | 'nothing'> = {
    none: 'nothing',
    client: 'client',
    'wrong client': 'unknown',
    operator: 'operator',
    viewer: 'viewer',
    runner: 'runner',
    'forged runner': 'unknown',
  };
  const held = holds[caller];
  if (held === route.scope || (held === 'operator' && (route.operatorToo || route.scope === 'viewer'))) return 'admitted';
  return held === 'nothing' || held === 'unknown' ? 401 : 403;
}

describe('Credentials.admit', () => {
  const closed = new Credentials({ operatorTokens: [OPERATOR], viewerTokens: [VIEWER], runnerTokens: [RUNNER], clientKeys: keys(2), clients: 'keys' });
  const scopes: RouteScope[] = [
    { method: 'GET', path: '/p', scope: 'public' },
    { method: 'POST', path: '/c', scope: 'client' },
    { method: 'GET', path: '/c/o', scope: 'client', operatorToo: true },
    { method: 'GET', path: '/o', scope: 'operator' },
    { method: 'POST', path: '/r', scope: 'runner' },
    { method: 'GET', path: '/v', scope: 'viewer' },
  ];
  const outcome = (credentials: Credentials, route: RouteScope, header: string | undefined): string => {
    try {
      return credentials.admit(route, header).kind;
    } catch (error) {
      return String((error as { status: number }).status);
    }
  };

  it.each(scopes.flatMap((route) => Object.keys(CALLERS).map((caller) => [route.path, caller] as const)))(
    'with keys configured, %s × %s',
    (path, caller) => {
      const route = scopes.find((r) => r.path === path)!;
      const want = expected(route, caller as CallerName);
      const got = outcome(closed, route, CALLERS[caller as CallerName]);
      if (want === 'admitted') expect(got).not.toMatch(/^\d+$/);
      else expect(got).toBe(String(want));
    },
  );

  it('names who is calling: the client with its key, the runner with the index of its token, an operator or viewer by its credential id', () => {
    const rotating = new Credentials({ operatorTokens: [OPERATOR], viewerTokens: [VIEWER], runnerTokens: [`${RUNNER}-new`, RUNNER], clientKeys: keys(2), clients: 'keys' });
    expect(rotating.admit(scopes[1]!, 'Bearer sk-b-secret')).toEqual({ kind: 'client', key: KEY_B });
    expect(rotating.admit(scopes[4]!, `Bearer ${RUNNER}`)).toEqual({ kind: 'runner', token: 1 });
    expect(rotating.admit(scopes[4]!, `bearer ${RUNNER}-new`)).toEqual({ kind: 'runner', token: 0 });
    expect(rotating.admit(scopes[2]!, `Bearer ${OPERATOR}`)).toEqual({ kind: 'operator', id: credentialId('operator', OPERATOR) });
    expect(rotating.admit(scopes[5]!, `Bearer ${VIEWER}`)).toEqual({ kind: 'viewer', id: credentialId('viewer', VIEWER) });
    // The id is the kind and 12 hex digits of the token's SHA-256: never the token.
    expect(credentialId('operator', OPERATOR)).toMatch(/^operator:[0-9a-f]{12}$/);
  });

  it('lets anyone call client routes while no key exists, whatever key an SDK sends, and closes them on a keyed gateway', () => {
    const open = new Credentials({ operatorTokens: [OPERATOR], runnerTokens: [], clientKeys: keys(0), clients: 'open' });
    expect(open.openToClients).toBe(true);
    for (const header of [undefined, 'Bearer sk-anything', 'Basic dXNlcjpwdw==']) expect(open.admit(scopes[1]!, header)).toEqual({ kind: 'anonymous' });
    // Operator routes stay closed, and known tokens keep their scope.
    expect(outcome(open, scopes[3]!, undefined)).toBe('401');
    expect(outcome(open, scopes[3]!, 'Bearer sk-anything')).toBe('401');
    expect(outcome(open, scopes[1]!, `Bearer ${OPERATOR}`)).toBe('403');
    // Without a runner token, runner routes say registration is off.
    expect(outcome(open, scopes[4]!, `Bearer ${RUNNER}`)).toBe('404');
    const required = new Credentials({ operatorTokens: [OPERATOR], runnerTokens: [], clientKeys: keys(0), clients: 'keys' });
    expect(required.openToClients).toBe(false);
    expect(outcome(required, scopes[1]!, undefined)).toBe('401');
    expect(outcome(required, scopes[1]!, 'Bearer sk-anything')).toBe('401');
  });

  it('reads a bearer token in any case of the scheme, and nothing else', () => {
    expect(bearerToken('Bearer abc')).toBe('abc');
    expect(bearerToken('bEaReR  abc ')).toBe('abc');
    for (const header of [undefined, '', 'Bearer', 'Bearer ', 'Basic abc', 'Bearerabc', 'Token abc']) expect(bearerToken(header)).toBeUndefined();
  });

  it('refuses to be made without an operator token', () => {
    expect(() => new Credentials({ operatorTokens: [], runnerTokens: [], clients: 'open' })).toThrow(/operator token/);
  });
});

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!().catch(() => {});
});

async function realRunner(): Promise<string> {
  const engine = createSimEngine({ ttftMs: 0, itlMs: 0 });
  const { url: engineUrl } = await engine.listen();
  cleanups.push(() => engine.close());
  const runner = createRunner({ engine: engineUrl, engineKind: 'sim', id: 'r1' });
  const { url } = await runner.listen();
  cleanups.push(() => runner.close({ drainTimeout: 0 }));
  return url;
}

async function gateway(options: Partial<GatewayOptions>): Promise<{ gw: Gateway; url: string }> {
  const gw = createGateway({ runnerToken: RUNNER, operatorTokens: [OPERATOR], viewerTokens: [VIEWER], clientKeys: keys(2), placerTimeout: 300, ...options });
  const { url } = await gw.listen();
  cleanups.push(() => gw.close());
  return { gw, url };
}

/** A concrete path for a route's pattern: every parameter becomes `x`. */
const concrete = (path: string): string => path.replace(/:(\w+)(\{[^}]*\})?/g, 'x');

describe('every route × every kind of caller, on a real gateway', () => {
  it('gives every route of the app a scope, and lists no route the app lacks', async () => {
    const { gw } = await gateway({});
    expect(unscopedRoutes(gw.app, ROUTE_SCOPES)).toEqual([]);
    const routed = new Set(gw.app.routes.filter((r) => r.method !== 'ALL').map((r) => `${r.method} ${r.path}`));
    expect(ROUTE_SCOPES.map((r) => `${r.method} ${r.path}`).filter((r) => !routed.has(r))).toEqual([]);
  });

  it('refuses to build a gateway whose table misses a route', () => {
    expect(unscopedRoutes({ routes: [{ method: 'GET', path: '/v1/new-thing', handler: () => undefined, basePath: '/' }] }, ROUTE_SCOPES)).toEqual(['GET /v1/new-thing']);
  });

  it('answers each route as its scope says, before any handler runs', async () => {
    const { url } = await gateway({ runners: [await realRunner()] });
    const seen: string[] = [];
    for (const route of ROUTE_SCOPES) {
      for (const [caller, header] of Object.entries(CALLERS) as Array<[CallerName, string | undefined]>) {
        const res = await request(`${url}${concrete(route.path)}`, {
          method: route.method,
          headers: { 'content-type': 'application/json', ...(header ? { authorization: header } : {}) },
          ...(route.method === 'POST' ? { body: '{}' } : {}),
        });
        const text = await res.body.text();
        const want = expected(route, caller);
        const row = `${route.method} ${route.path} × ${caller}: ${res.statusCode}`;
        seen.push(row);
        if (want === 'admitted') {
          expect([401, 403], row).not.toContain(res.statusCode);
        } else {
          expect(res.statusCode, row).toBe(want);
          expect(JSON.parse(text).error.code, row).toBe(want === 401 ? 'GW_UNAUTHORIZED' : 'GW_FORBIDDEN');
          if (want === 401) expect(res.headers['www-authenticate'], row).toBe('Bearer');
        }
      }
    }
    expect(seen).toHaveLength(ROUTE_SCOPES.length * Object.keys(CALLERS).length);
  }, 30_000);

  it('says on /healthz whether clients need a key', async () => {
    const open = await gateway({ clientKeys: keys(0), requireKeys: false, runners: ['http://127.0.0.1:9'] });
    expect(((await (await request(`${open.url}/healthz`)).body.json()) as { clients: string }).clients).toBe('open');
    const closed = await gateway({ runners: ['http://127.0.0.1:9'] });
    expect(((await (await request(`${closed.url}/healthz`)).body.json()) as { clients: string }).clients).toBe('keys');
  });
});

describe('calls belong to the key that made them', () => {
  const asA = { authorization: 'Bearer sk-a-secret' };
  const asB = { authorization: 'Bearer sk-b-secret' };
  const asOperator = { authorization: `Bearer ${OPERATOR}` };
  const detached = { prefer: 'respond-async' };

  it("shows, answers and cancels a detached call to its own key and to operators only; another key's Idempotency-Key never meets it", async () => {
    const { url } = await gateway({ runners: [await realRunner()] });
    const made = await postJson(`${url}/v1/chat/completions`, chatBody({ max_tokens: 2 }), { ...asA, ...detached, 'idempotency-key': 'shared' });
    expect(made.status).toBe(202);
    const id = made.json.id as string;
    const status = async (headers: Record<string, string>) => (await request(`${url}/v1/calls/${id}`, { headers })).statusCode;
    await eventually(async () => ((await (await request(`${url}/v1/calls/${id}`, { headers: asA })).body.json()) as { status: string }).status === 'succeeded', 5000, 'the call to end');

    expect(await status(asA)).toBe(200);
    expect(await status(asOperator)).toBe(200);
    // To another key the call does not exist: the same answer as an unknown id.
    const other = await request(`${url}/v1/calls/${id}`, { headers: asB });
    expect(other.statusCode).toBe(404);
    expect(((await other.body.json()) as { error: { code: string } }).error.code).toBe('GW_CALL_NOT_FOUND');
    expect((await request(`${url}/v1/calls/${id}/result`, { headers: asB })).statusCode).toBe(404);
    expect((await request(`${url}/v1/calls/${id}/result`, { headers: asA })).statusCode).toBe(200);
    expect((await request(`${url}/v1/calls/${id}/cancel`, { method: 'POST', headers: asB })).statusCode).toBe(404);
    expect(await status({})).toBe(401);

    // The same Idempotency-Key from B is B's own: a new call, not A's answer.
    const fromB = await postJson(`${url}/v1/chat/completions`, chatBody({ max_tokens: 2 }), { ...asB, ...detached, 'idempotency-key': 'shared' });
    expect(fromB.status).toBe(202);
    expect(fromB.json.id).not.toBe(id);
    // From A again, it is A's first call.
    const again = await postJson(`${url}/v1/chat/completions`, chatBody({ max_tokens: 2 }), { ...asA, ...detached, 'idempotency-key': 'shared' });
    expect(again.json.id).toBe(id);
  });

  it('never lets the client key reach the runner or engine', async () => {
    const seen: Array<{ path: string | undefined; authorization: string | undefined }> = [];
    const engine = createSimEngine({ ttftMs: 0, itlMs: 0 });
    const { url: engineUrl } = await engine.listen();
    cleanups.push(() => engine.close());
    const { createServer } = await import('node:http');
    // A runner stand-in in front of the engine would hide what the engine gets; the engine's own
    // server is wrapped instead, recording the header of each request it serves.
    const spy = createServer((req, res) => {
      seen.push({ path: req.url, authorization: req.headers.authorization });
      void request(`${engineUrl}${req.url}`, { method: req.method as 'POST', headers: { 'content-type': 'application/json' }, body: req }).then(async (answer) => {
        res.writeHead(answer.statusCode, { 'content-type': String(answer.headers['content-type']) });
        res.end(Buffer.from(await answer.body.arrayBuffer()));
      });
    });
    await new Promise<void>((resolve) => spy.listen(0, '127.0.0.1', resolve));
    cleanups.push(() => new Promise((resolve) => spy.close(resolve)));
    const runner = createRunner({ engine: `http://127.0.0.1:${(spy.address() as { port: number }).port}`, engineKind: 'sim', id: 'r1' });
    const { url: runnerUrl } = await runner.listen();
    cleanups.push(() => runner.close({ drainTimeout: 0 }));
    const { url } = await gateway({ runners: [runnerUrl] });
    const res = await postJson(`${url}/v1/chat/completions`, chatBody({ max_tokens: 2 }), asA);
    expect(res.status).toBe(200);
    const calls = seen.filter((r) => r.path === '/v1/chat/completions');
    expect(calls).toHaveLength(1);
    expect(seen.every((r) => r.authorization === undefined)).toBe(true);
  });
});
