/**
 * The dashboard's routes on an in-process gateway: the page and its files are public and carry
 * a policy that lets them load nothing but the gateway's own files and routes; the figures stay
 * behind the operator token; and the two fields GET /v1/runners gained for the page (slots, a
 * hosted engine). The page itself, in a browser, is dashboard.integration.spec.ts's.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DASHBOARD_FILES } from '../../../gateway/observe/dashboard/routes.ts';
import { createGateway } from '../../../gateway/server.ts';
import type { Gateway } from '../../../gateway/server.ts';
import { ROUTE_SCOPES } from '../../../gateway/access/scopes.ts';
import { createJsonLogger } from '../../../placer/kernel/index.ts';
import { REGISTER_PATH } from '../../../runner/protocol/index.ts';
import type { RunnerRegistration } from '../../../runner/protocol/index.ts';
import { OPERATOR_TOKEN, asOperator, getJson, postJson } from '../../support/fleet.ts';
import { registeringGateway } from '../../support/registrations.ts';

const RUNNER_TOKEN = 'dashboard-spec-runner-token-0123456789';

let gateway: Gateway;
let url: string;
beforeAll(async () => {
  gateway = registeringGateway(RUNNER_TOKEN);
  url = (await gateway.listen()).url;
});
afterAll(() => gateway?.close());

describe('the dashboard routes', () => {
  it('serves the page, its style and its script without a token, each with its type', async () => {
    const types: Record<string, string> = {};
    for (const { path } of DASHBOARD_FILES) {
      const answer = await getJson(`${url}${path}`);
      expect(answer.status, path).toBe(200);
      types[path] = String(answer.headers['content-type']);
      expect(answer.text.length, path).toBeGreaterThan(100);
    }
    expect(types).toEqual({
      '/dashboard': 'text/html; charset=utf-8',
      '/dashboard/dashboard.css': 'text/css; charset=utf-8',
      '/dashboard/dashboard.js': 'text/javascript; charset=utf-8',
    });
  });

  it('says on its token form where the viewer token is: the flags, or the file the CLI writes and names', async () => {
    const page = (await getJson(`${url}/dashboard`)).text;
    const where = /<p id="token-where">([\s\S]*?)<\/p>/.exec(page)?.[1] ?? '';
    for (const hint of [
      '--viewer-token',
      'viewer-token-&lt;port&gt;',
      '$XDG_RUNTIME_DIR/sluice/',
      '~/.sluice/',
      'banner',
    ])
      expect(where).toContain(hint);
  });

  it('lists every dashboard file as public in the route table, and nothing else under /dashboard', () => {
    const rows = ROUTE_SCOPES.filter((r) => r.path.startsWith('/dashboard'));
    expect(rows.map((r) => `${r.method} ${r.path} ${r.scope}`).sort()).toEqual(
      DASHBOARD_FILES.map((f) => `GET ${f.path} public`).sort(),
    );
  });

  it('answers with a policy allowing only its own files and requests, and no framing', async () => {
    const answer = await getJson(`${url}/dashboard`);
    const policy = String(answer.headers['content-security-policy']);
    expect(policy).toContain("default-src 'none'");
    expect(policy).toContain("script-src 'self'");
    expect(policy).toContain("connect-src 'self'");
    expect(policy).toContain("frame-ancestors 'none'");
    expect(answer.headers['x-content-type-options']).toBe('nosniff');
  });

  it('loads nothing from elsewhere: every link and script of the page is relative to the gateway', async () => {
    const html = (await getJson(`${url}/dashboard`)).text;
    const refs = [...html.matchAll(/\b(?:src|href)="([^"]*)"/g)].map((m) => m[1]);
    expect(refs).toEqual(['data:,', 'dashboard/dashboard.css', 'dashboard/dashboard.js']);
    const script = (await getJson(`${url}/dashboard/dashboard.js`)).text;
    // The only absolute URL in the script is SVG's namespace, which is a name, not a request.
    expect([...script.matchAll(/https?:\/\/[^'"\s]+/g)].map((m) => m[0])).toEqual(['http://www.w3.org/2000/svg']);
    expect(script).not.toMatch(/innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(/);
  });

  it('keeps the figures behind the operator token: the JSON routes the page reads refuse a request without one', async () => {
    for (const path of ['/v1/runners', '/v1/queue', '/v1/deployments']) {
      expect((await getJson(`${url}${path}`)).status, path).toBe(401);
      expect((await getJson(`${url}${path}`, asOperator)).status, path).toBe(200);
    }
  });

  it('answers 404 for a path under /dashboard that is not one of its files', async () => {
    expect((await getJson(`${url}/dashboard/secrets.json`)).status).toBe(404);
  });
});

describe('what GET /v1/runners gives the dashboard', () => {
  it("shows a runner's slots, and the state of the engine a deployment ordered it to host", async () => {
    const registration: RunnerRegistration = {
      id: 'dash-r1',
      url: 'http://127.0.0.1:9',
      version: 'test',
      engines: [],
      models: [],
      slots: 3,
      gpus: { gpus: [], source: 'none' },
      ready: false,
      load: { slotsInUse: 1, slots: 3, queue: 0, models: {} },
      capacity: { labels: {}, freeGpus: [], engineKinds: ['sim'], orders: true },
      hosted: { replica: 'sim-small-1', model: 'sim-small', state: 'starting', since: 1 },
    };
    expect(
      (
        await postJson(`${url}${REGISTER_PATH}`, JSON.stringify(registration), {
          authorization: `Bearer ${RUNNER_TOKEN}`,
        })
      ).status,
    ).toBe(200);
    const runner = (await getJson(`${url}/v1/runners`, asOperator)).json.data.find(
      (r: { id: string }) => r.id === 'dash-r1',
    );
    expect(runner.slots).toBe(3);
    expect(runner.engine).toEqual({ replica: 'sim-small-1', model: 'sim-small', state: 'starting' });
  });

  it('leaves both out while nothing reported them: a static runner that never answered a probe has no slots and no engine', async () => {
    const gw = createGateway({
      runners: ['http://127.0.0.1:9'],
      operatorTokens: [OPERATOR_TOKEN],
      statusInterval: 3_600_000,
      logger: createJsonLogger({ level: 'error', write: () => {} }),
    });
    const base = (await gw.listen()).url;
    try {
      const [runner] = (await getJson(`${base}/v1/runners`, asOperator)).json.data;
      expect(runner.id).toBe('127.0.0.1:9');
      expect('slots' in runner).toBe(false);
      expect('engine' in runner).toBe(false);
    } finally {
      await gw.close();
    }
  });
});
