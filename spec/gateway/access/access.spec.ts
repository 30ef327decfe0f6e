/**
 * Who may call what on a real gateway: every route × every kind of caller, generated from the
 * route table so that a new route cannot go without its row, then calls that belong to the key
 * that made them. The scope check itself, as a table, is spec/gateway/access/credentials.spec.ts.
 */
import { describe, expect, it } from 'vitest';
import { request } from 'undici';
import { unscopedRoutes } from '../../../gateway/access/guard.ts';
import { ROUTE_SCOPES } from '../../../gateway/access/scopes.ts';
import { createGateway } from '../../../gateway/server.ts';
import type { Gateway } from '../../../gateway/server.ts';
import type { GatewayOptions } from '../../../gateway/options.ts';
import { createRunner } from '../../../runner/server.ts';
import { CALLERS, OPERATOR, RUNNER, VIEWER, expected, keys } from '../../support/callers.ts';
import type { CallerName } from '../../support/callers.ts';
import { chatBody, eventually, postJson } from '../../support/fleet.ts';
import { serversForEach } from '../../support/servers.ts';
import { startSimEngine, startSimRunner } from '../../support/sim-runner.ts';

const { cleanups } = serversForEach();

async function realRunner(): Promise<string> {
  return (await startSimRunner(cleanups, { id: 'r1' })).runnerUrl;
}

async function gateway(options: Partial<GatewayOptions>): Promise<{ gw: Gateway; url: string }> {
  const gw = createGateway({
    runnerToken: RUNNER,
    operatorTokens: [OPERATOR],
    viewerTokens: [VIEWER],
    clientKeys: keys(2),
    placerTimeout: 300,
    ...options,
  });
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
    expect(
      unscopedRoutes(
        { routes: [{ method: 'GET', path: '/v1/new-thing', handler: () => undefined, basePath: '/' }] },
        ROUTE_SCOPES,
      ),
    ).toEqual(['GET /v1/new-thing']);
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
    const made = await postJson(`${url}/v1/chat/completions`, chatBody({ max_tokens: 2 }), {
      ...asA,
      ...detached,
      'idempotency-key': 'shared',
    });
    expect(made.status).toBe(202);
    const id = made.json.id as string;
    const status = async (headers: Record<string, string>) =>
      (await request(`${url}/v1/calls/${id}`, { headers })).statusCode;
    await eventually(
      async () =>
        ((await (await request(`${url}/v1/calls/${id}`, { headers: asA })).body.json()) as { status: string })
          .status === 'succeeded',
      5000,
      'the call to end',
    );

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
    const fromB = await postJson(`${url}/v1/chat/completions`, chatBody({ max_tokens: 2 }), {
      ...asB,
      ...detached,
      'idempotency-key': 'shared',
    });
    expect(fromB.status).toBe(202);
    expect(fromB.json.id).not.toBe(id);
    // From A again, it is A's first call.
    const again = await postJson(`${url}/v1/chat/completions`, chatBody({ max_tokens: 2 }), {
      ...asA,
      ...detached,
      'idempotency-key': 'shared',
    });
    expect(again.json.id).toBe(id);
  });

  it('never lets the client key reach the runner or engine', async () => {
    const seen: Array<{ path: string | undefined; authorization: string | undefined }> = [];
    const engineUrl = await startSimEngine(cleanups);
    const { createServer } = await import('node:http');
    // A runner stand-in in front of the engine would hide what the engine gets; the engine's own
    // server is wrapped instead, recording the header of each request it serves.
    const spy = createServer((req, res) => {
      seen.push({ path: req.url, authorization: req.headers.authorization });
      void request(`${engineUrl}${req.url}`, {
        method: req.method as 'POST',
        headers: { 'content-type': 'application/json' },
        body: req,
      }).then(async (answer) => {
        res.writeHead(answer.statusCode, { 'content-type': String(answer.headers['content-type']) });
        res.end(Buffer.from(await answer.body.arrayBuffer()));
      });
    });
    await new Promise<void>((resolve) => spy.listen(0, '127.0.0.1', resolve));
    cleanups.push(() => new Promise((resolve) => spy.close(resolve)));
    const runner = createRunner({
      engine: `http://127.0.0.1:${(spy.address() as { port: number }).port}`,
      engineKind: 'sim',
      id: 'r1',
    });
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
