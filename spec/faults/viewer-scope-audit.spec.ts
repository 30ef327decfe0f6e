/**
 * Hostile review round two, defect 3 (continued): the one operator token that changes
 * deployments also scraped /metrics and opened the dashboard, and no change left a trace of who
 * made it. A viewer token reads /metrics, /v1/stats and every GET of runners, deployments and the
 * queue, and is refused (403) on every change; every change to deployments, keys and drains is an
 * audit line naming the credential id and the fields changed, never their values nor a token.
 */
import { describe, expect, it } from 'vitest';
import { createGateway } from '../../gateway/server.ts';
import { createJsonLogger } from '../../placer/kernel/index.ts';
import { serversForEach } from '../support/servers.ts';

const OPERATOR = 'spec-operator-token-0123456789';
const VIEWER = 'spec-viewer-token-0123456789ab';
const HF_VALUE = 'hf_spec_secret_value_0123';
const API_KEY = 'engine-api-key-spec-0123';

const { cleanups } = serversForEach();

async function gateway(): Promise<{ url: string; lines: string[] }> {
  const lines: string[] = [];
  const gw = createGateway({
    runnerToken: 'spec-runner-token-0123456789',
    operatorTokens: [OPERATOR],
    viewerTokens: [VIEWER],
    placerTimeout: 300,
    // Keyed, so that an operator may make and revoke client keys.
    requireKeys: true,
    renderMetrics: async () => '# metrics of the spec\n',
    logger: createJsonLogger({ level: 'debug', write: (line) => void lines.push(line) }),
  } as never);
  const { url } = await gw.listen(0, '127.0.0.1');
  cleanups.push(() => gw.close());
  return { url, lines };
}

const as = (token: string): Record<string, string> => ({
  authorization: `Bearer ${token}`,
  'content-type': 'application/json',
});

async function call(
  url: string,
  method: string,
  path: string,
  token: string,
  body?: unknown,
): Promise<{ status: number; code?: string }> {
  const res = await fetch(`${url}${path}`, {
    method,
    headers: as(token),
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  let code: string | undefined;
  try {
    code = (JSON.parse(text) as { error?: { code?: string } }).error?.code;
  } catch {
    code = undefined;
  }
  return { status: res.status, ...(code === undefined ? {} : { code }) };
}

const deployment = {
  profile: { kind: 'vllm', args: ['--api-key', API_KEY], env: { HF_TOKEN: HF_VALUE } },
  maxReplicas: 2,
};

describe('the viewer token', () => {
  it('reads /metrics, /v1/stats and the GETs of runners, deployments and the queue', async () => {
    const { url } = await gateway();
    expect((await call(url, 'PUT', '/v1/deployments/m', OPERATOR, deployment)).status).toBe(201);
    for (const path of ['/metrics', '/v1/stats', '/v1/runners', '/v1/queue', '/v1/deployments', '/v1/deployments/m']) {
      expect((await call(url, 'GET', path, VIEWER)).status, path).toBe(200);
    }
    // A viewer sees what was ordered by name, never a credential among the values.
    const read = (await (await fetch(`${url}/v1/deployments/m`, { headers: as(VIEWER) })).json()) as {
      profile: unknown;
    };
    expect(read.profile).toMatchObject({ args: ['--api-key', '(hidden)'], env: { HF_TOKEN: '(hidden)' } });
  });

  it('is refused with 403 on every change: PUT and DELETE of deployments, drains, keys', async () => {
    const { url } = await gateway();
    expect((await call(url, 'PUT', '/v1/deployments/m', OPERATOR, deployment)).status).toBe(201);
    const changes: Array<[string, string, unknown?]> = [
      ['PUT', '/v1/deployments/m', deployment],
      ['DELETE', '/v1/deployments/m'],
      ['POST', '/v1/runners/drain'],
      ['POST', '/v1/runners/r1/drain'],
      ['POST', '/v1/keys', { name: 'k' }],
      ['DELETE', '/v1/keys/k'],
    ];
    for (const [method, path, body] of changes) {
      expect(await call(url, method, path, VIEWER, body), `${method} ${path}`).toEqual({
        status: 403,
        code: 'GW_FORBIDDEN',
      });
    }
    // The deployment is still there, as the operator put it.
    expect((await call(url, 'GET', '/v1/deployments/m', VIEWER)).status).toBe(200);
  });
});

describe('the audit log', () => {
  it('has one line per change to deployments, keys and drains: the credential id and field names, never values or a token', async () => {
    const { url, lines } = await gateway();
    expect((await call(url, 'PUT', '/v1/deployments/m', OPERATOR, deployment)).status).toBe(201);
    expect(
      (
        await call(url, 'PUT', '/v1/deployments/m', OPERATOR, {
          ...deployment,
          maxReplicas: 3,
          profile: { ...deployment.profile, env: { HF_TOKEN: `${HF_VALUE}-2` } },
        })
      ).status,
    ).toBe(200);
    const created = await fetch(`${url}/v1/keys`, {
      method: 'POST',
      headers: as(OPERATOR),
      body: JSON.stringify({ name: 'team a' }),
    });
    expect(created.status).toBe(201);
    const { id: keyId, key: keyToken } = (await created.json()) as { id: string; key: string };
    expect((await call(url, 'DELETE', `/v1/keys/${keyId}`, OPERATOR)).status).toBe(204);
    expect((await call(url, 'POST', '/v1/runners/drain?interval=0', OPERATOR)).status).toBe(202);
    expect((await call(url, 'DELETE', '/v1/deployments/m', OPERATOR)).status).toBe(204);
    // Reads leave no audit line.
    expect((await call(url, 'GET', '/v1/deployments', VIEWER)).status).toBe(200);

    const audit = lines
      .map((line) => JSON.parse(line) as Record<string, unknown>)
      .filter((line) => line.msg === 'audit');
    const credential = expect.stringMatching(/^operator:[0-9a-f]{12}$/);
    expect(
      audit.map(({ credential: c, action, target, fields }) => ({ credential: c, action, target, fields })),
    ).toEqual([
      {
        credential,
        action: 'deployment.put',
        target: 'm',
        fields: expect.arrayContaining([
          'model',
          'profile.kind',
          'profile.args',
          'profile.env.HF_TOKEN',
          'maxReplicas',
        ]),
      },
      { credential, action: 'deployment.put', target: 'm', fields: ['maxReplicas', 'profile.env.HF_TOKEN'] },
      { credential, action: 'key.create', target: keyId, fields: expect.arrayContaining(['name']) },
      { credential, action: 'key.delete', target: keyId, fields: undefined },
      { credential, action: 'runners.drain', target: '*', fields: ['interval'] },
      { credential, action: 'deployment.delete', target: 'm', fields: undefined },
    ]);
    // One credential id for one token, and each line says when.
    expect(new Set(audit.map((line) => line.credential)).size).toBe(1);
    for (const line of audit) expect(Date.parse(String(line.at))).not.toBeNaN();
    const all = lines.join('\n');
    for (const secret of [OPERATOR, VIEWER, HF_VALUE, API_KEY, keyToken]) expect(all).not.toContain(secret);
  });
});
