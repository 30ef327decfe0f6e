/**
 * The /v1/deployments routes on a real gateway on port 0: operator scope (401 without the
 * operator token; spec/gateway/access/access.spec.ts tries every caller on every route), a round trip through PUT, GET and DELETE of a model whose name holds a
 * slash, 400 with every problem on a bad PUT, 404 on an unknown model, 409 on a file deployment,
 * and the status that says no reconciler runs.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { request } from 'undici';
import { parseDeploymentsFile } from '../../../gateway/control/file.ts';
import { MemoryDeploymentStore } from '../../../gateway/control/store.ts';
import type { GatewayOptions } from '../../../gateway/options.ts';
import { createGateway } from '../../../gateway/server.ts';
import type { Gateway } from '../../../gateway/server.ts';
import { OPERATOR_TOKEN, asOperator, getJson } from '../../support/fleet.ts';
import { LLAMA_PROFILE } from './fake-fleet.ts';

let gateway: Gateway | undefined;
afterEach(async () => {
  await gateway?.close();
  gateway = undefined;
});

async function start(options: Partial<GatewayOptions> = {}): Promise<string> {
  gateway = createGateway({
    runnerToken: 'a-runner-token-long-enough',
    operatorTokens: [OPERATOR_TOKEN],
    deployments: new MemoryDeploymentStore({ now: () => 1_000 }),
    ...options,
  });
  return (await gateway.listen()).url;
}

async function send(
  method: 'PUT' | 'DELETE',
  url: string,
  body?: unknown,
  headers: Record<string, string> = asOperator,
) {
  const res = await request(url, {
    method,
    headers: { 'content-type': 'application/json', ...headers },
    ...(body === undefined ? {} : { body: typeof body === 'string' ? body : JSON.stringify(body) }),
  });
  const text = await res.body.text();
  return { status: res.statusCode, json: text === '' ? undefined : JSON.parse(text) };
}

// No runner takes orders here: the reconciler leads (a memory lease) and wants nothing of a minReplicas 0 deployment.
const IDLE = {
  reconciler: 'leading',
  wanted: 0,
  starting: 0,
  ready: 0,
  draining: 0,
  outdated: 0,
  replicas: [],
  pending: [],
  deadLettered: [],
  events: [],
};

describe('/v1/deployments', () => {
  it('takes a deployment by PUT, answers it on GET and in the list, replaces and deletes it', async () => {
    const url = await start();
    const at = `${url}/v1/deployments/org/llama`;
    const body = {
      profile: LLAMA_PROFILE,
      maxReplicas: 3,
      runnerLabels: { zone: 'a' },
    };
    const created = await send('PUT', at, body);
    expect(created.status).toBe(201);
    const expected = {
      object: 'deployment',
      id: 'org/llama',
      model: 'org/llama',
      profile: { ...LLAMA_PROFILE, env: { HF_TOKEN: '(hidden)' } },
      minReplicas: 0,
      maxReplicas: 3,
      targetConcurrency: 100,
      scaleDownDelay: 300_000,
      runnerLabels: { zone: 'a' },
      source: 'api',
      updatedAt: 1_000,
      status: IDLE,
    };
    expect(created.json).toEqual(expected);
    const read = await getJson(at, asOperator);
    expect([read.status, read.json]).toEqual([200, expected]);
    expect(read.text).not.toContain('hf_secret_value');
    // Percent-encoded, as OpenAI's SDK sends a slash in an id.
    expect((await getJson(`${url}/v1/deployments/org%2Fllama`, asOperator)).json).toEqual(expected);
    expect((await getJson(`${url}/v1/deployments`, asOperator)).json).toEqual({ object: 'list', data: [expected] });

    const replaced = await send('PUT', at, { ...body, model: 'org/llama', minReplicas: 1 });
    expect([replaced.status, replaced.json.minReplicas]).toEqual([200, 1]);
    expect((await send('DELETE', at)).status).toBe(204);
    expect((await getJson(`${url}/v1/deployments`, asOperator)).json).toEqual({ object: 'list', data: [] });
  });

  it('answers 400 with every problem of a bad PUT, and stores nothing', async () => {
    const url = await start();
    const bad = await send('PUT', `${url}/v1/deployments/m`, {
      model: 'other',
      profile: { kind: 'nope' },
      minReplicas: 4,
      maxReplicas: 2,
      targetConcurrency: 0,
    });
    expect(bad.status).toBe(400);
    expect(bad.json.error.code).toBe('GW_INVALID_DEPLOYMENT');
    expect(bad.json.error.problems).toEqual([
      'deployment "m": model "other" in the body differs from the path\'s; leave it out or make them equal',
      'deployment "m": minReplicas 4 must be at most maxReplicas 2',
      'deployment "m": targetConcurrency must be a whole number from 1 to 1024, got 0',
      'deployment "m": profile.kind must be one of vllm, sglang, llamacpp, tgi, ollama, sim, got "nope"',
    ]);
    for (const problem of bad.json.error.problems) expect(bad.json.error.message).toContain(problem);
    expect((await send('PUT', `${url}/v1/deployments/m`, '{"profile":')).json.error.code).toBe('GW_INVALID_JSON');
    const list = await send('PUT', `${url}/v1/deployments/m`, []);
    expect([list.status, list.json.error.problems]).toEqual([400, ['deployment "m": must be an object, got a list']]);
    expect((await getJson(`${url}/v1/deployments`, asOperator)).json.data).toEqual([]);
  });

  it('answers 404 for a model with no deployment, on GET and DELETE', async () => {
    const url = await start();
    const read = await getJson(`${url}/v1/deployments/org/none`, asOperator);
    expect([read.status, read.json.error.code]).toEqual([404, 'GW_DEPLOYMENT_NOT_FOUND']);
    expect(read.json.error.message).toContain('"org/none"');
    const deleted = await send('DELETE', `${url}/v1/deployments/org/none`);
    expect([deleted.status, deleted.json.error.code]).toEqual([404, 'GW_DEPLOYMENT_NOT_FOUND']);
  });

  it('refuses callers without the operator token', async () => {
    const url = await start();
    const none = await getJson(`${url}/v1/deployments`);
    expect([none.status, none.json.error.code]).toEqual([401, 'GW_UNAUTHORIZED']);
    const wrong = await send(
      'PUT',
      `${url}/v1/deployments/m`,
      { profile: { kind: 'sim' } },
      { authorization: 'Bearer not-a-token-we-know-at-all' },
    );
    expect([wrong.status, wrong.json.error.code]).toEqual([401, 'GW_UNAUTHORIZED']);
    expect((await send('DELETE', `${url}/v1/deployments/m`, undefined, {})).status).toBe(401);
    expect((await getJson(`${url}/v1/deployments/m`)).status).toBe(401);
    expect((await getJson(`${url}/v1/deployments`, asOperator)).json.data).toEqual([]);
  });

  it('lists file deployments and refuses to replace or delete them (409)', async () => {
    const fileDeployments = parseDeploymentsFile(
      JSON.stringify([{ model: 'org/filed', profile: { kind: 'sim' }, minReplicas: 1 }]),
      'd.json',
    );
    const url = await start({ deployments: new MemoryDeploymentStore({ fileDeployments, now: () => 5 }) });
    const list = await getJson(`${url}/v1/deployments`, asOperator);
    expect(
      list.json.data.map((d: { model: string; source: string; minReplicas: number }) => [
        d.model,
        d.source,
        d.minReplicas,
      ]),
    ).toEqual([['org/filed', 'file', 1]]);
    const put = await send('PUT', `${url}/v1/deployments/org/filed`, { profile: { kind: 'sim' } });
    expect([put.status, put.json.error.code]).toEqual([409, 'GW_DEPLOYMENT_IN_FILE']);
    const deleted = await send('DELETE', `${url}/v1/deployments/org/filed`);
    expect([deleted.status, deleted.json.error.code]).toEqual([409, 'GW_DEPLOYMENT_IN_FILE']);
    // Its minimum wants a replica, and with no runner taking orders the start waits, saying why.
    const read = (await getJson(`${url}/v1/deployments/org/filed`, asOperator)).json;
    expect(read).toMatchObject({
      source: 'file',
      minReplicas: 1,
      status: { reconciler: 'leading', wanted: 1, ready: 0, starting: 0 },
    });
    expect(read.status.pending.map((p: { lastReason: string }) => p.lastReason)).toEqual(['no runner fits']);
    expect(read.status.events.map((e: { reason: string; to: number }) => [e.to, e.reason])).toEqual([
      [1, 'minReplicas 1'],
    ]);
  });
});
