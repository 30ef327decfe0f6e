/**
 * gateway/server.ts's error edge, over real sockets on port 0: onError answers a thrown
 * SluiceError with its own status, code, headers and OpenAI body, and anything else with
 * GW_INTERNAL, logged and without its message; the routes that rely on it (the runner routes
 * behind their token middleware, the call routes with a store that fails).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { IdempotencyInProgressError } from '../../gateway/errors.ts';
import { resolveGatewayOptions } from '../../gateway/options.ts';
import type { GatewayOptions } from '../../gateway/options.ts';
import { composeGatewayConfig, createGateway } from '../../gateway/server.ts';
import type { Gateway } from '../../gateway/server.ts';
import { createMemoryStore } from '../../gateway/store/memory.ts';
import { createMemoryLimiter } from '../../gateway/access/limits.ts';
import { MemoryDeploymentStore } from '../../gateway/control/store.ts';
import type { CallStore } from '../../gateway/store/types.ts';
import { createJsonLogger } from '../../placer/kernel/index.ts';
import type { Placer } from '../../placer/types.ts';
import { REGISTER_PATH } from '../../runner/protocol/index.ts';
import { OPERATOR_TOKEN, asOperator, getJson, postJson } from '../support/fleet.ts';

const TOKEN = 'a-runner-token-long-enough';

let gateway: Gateway | undefined;
afterEach(async () => {
  await gateway?.close();
  gateway = undefined;
});

/** A gateway for runners that register (none do), with routes of the test's own added to its app. */
async function start(options: Partial<GatewayOptions> = {}, lines: string[] = []): Promise<string> {
  gateway = createGateway({
    runnerToken: TOKEN,
    operatorTokens: [OPERATOR_TOKEN],
    logger: createJsonLogger({ level: 'warn', write: (line) => lines.push(line) }),
    ...options,
  });
  gateway.app.get('/test/refused', () => {
    throw new IdempotencyInProgressError('still placing');
  });
  gateway.app.get('/test/broken', () => {
    throw new Error('the secret is s3cr3t');
  });
  return (await gateway.listen()).url;
}

describe('onError', () => {
  it('answers a thrown SluiceError with its status, code, headers and OpenAI body', async () => {
    const url = await start();
    const res = await getJson(`${url}/test/refused`, asOperator);
    expect(res.status).toBe(409);
    expect(res.headers['retry-after']).toBe('1');
    expect(res.headers['content-type']).toBe('application/json');
    expect(res.json).toEqual({
      error: { message: 'still placing', type: 'invalid_request_error', code: 'GW_IDEMPOTENCY_IN_PROGRESS' },
    });
  });

  it('answers anything else with 500 GW_INTERNAL, logs it, and never sends its message', async () => {
    const lines: string[] = [];
    const url = await start({}, lines);
    const res = await getJson(`${url}/test/broken`, asOperator);
    expect(res.status).toBe(500);
    expect(res.json.error).toEqual({ message: 'internal gateway error', type: 'server_error', code: 'GW_INTERNAL' });
    expect(res.text).not.toContain('s3cr3t');
    expect(lines.some((l) => l.includes('route failed'))).toBe(true);
  });
});

describe('the runner routes', () => {
  it('refuse a wrong token with 401 GW_UNAUTHORIZED before the handler, and an unknown runner with 404 GW_RUNNER_NOT_FOUND', async () => {
    const url = await start();
    const refused = await postJson(`${url}${REGISTER_PATH}`, '{', { authorization: 'Bearer wrong' });
    // The token is checked first: the malformed body is never read.
    expect(refused.status).toBe(401);
    expect(refused.json.error.code).toBe('GW_UNAUTHORIZED');
    const unknown = await postJson(`${url}/v1/runners/nobody/heartbeat`, JSON.stringify({ models: [] }), {
      authorization: `Bearer ${TOKEN}`,
    });
    expect(unknown.status).toBe(404);
    expect(unknown.json.error.code).toBe('GW_RUNNER_NOT_FOUND');
    const malformed = await postJson(`${url}${REGISTER_PATH}`, '{', { authorization: `Bearer ${TOKEN}` });
    expect(malformed.status).toBe(400);
    expect(malformed.json.error.code).toBe('GW_INVALID_JSON');
  });

  it('keep the runner list for operators: 401 without a token, 403 with the runner token, the list with the operator token', async () => {
    const url = await start();
    const none = await getJson(`${url}/v1/runners`);
    expect(none.status).toBe(401);
    expect(none.headers['www-authenticate']).toBe('Bearer');
    expect(none.json.error.code).toBe('GW_UNAUTHORIZED');
    const runner = await getJson(`${url}/v1/runners`, { authorization: `Bearer ${TOKEN}` });
    expect(runner.status).toBe(403);
    expect(runner.json.error).toMatchObject({ code: 'GW_FORBIDDEN', type: 'permission_error' });
    const list = await getJson(`${url}/v1/runners`, asOperator);
    expect(list.status).toBe(200);
    expect(list.json).toEqual({ object: 'list', data: [] });
  });

  it('close a route added to the app after the gateway was built to all but operators', async () => {
    const url = await start();
    expect((await getJson(`${url}/test/refused`)).status).toBe(401);
    expect((await getJson(`${url}/test/refused`, { authorization: `Bearer ${TOKEN}` })).status).toBe(403);
    expect((await getJson(`${url}/test/refused`, asOperator)).status).toBe(409);
  });
});

describe('the call routes', () => {
  it('answer an unknown id 404 GW_CALL_NOT_FOUND, and a store failing with a plain error 503 GW_STORE_UNAVAILABLE, not GW_INTERNAL', async () => {
    const base = createMemoryStore();
    let broken = false;
    // The memory store with its get failing on demand (its other methods bound to it: they use private fields).
    const get = (id: string) => (broken ? Promise.reject(new Error('redis said s3cr3t')) : base.get(id));
    const store = new Proxy(base, {
      get: (target, key) => {
        if (key === 'get') return get;
        const value: unknown = Reflect.get(target, key);
        return typeof value === 'function' ? value.bind(target) : value;
      },
    }) as CallStore;
    const url = await start({ store });
    const unknown = await getJson(`${url}/v1/calls/nope`);
    expect(unknown.status).toBe(404);
    expect(unknown.json.error.code).toBe('GW_CALL_NOT_FOUND');
    broken = true;
    for (const path of ['/v1/calls/nope', '/v1/calls/nope/result']) {
      const res = await getJson(`${url}${path}`);
      expect(res.status).toBe(503);
      expect(res.json.error.code).toBe('GW_STORE_UNAVAILABLE');
      expect(res.text).not.toContain('s3cr3t');
    }
    const cancel = await postJson(`${url}/v1/calls/nope/cancel`, '');
    expect(cancel.status).toBe(503);
    expect(cancel.json.error.code).toBe('GW_STORE_UNAVAILABLE');
  });
});

describe('composeGatewayConfig', () => {
  const runners = ['http://127.0.0.1:9001'];

  it('makes the parts the options left out: the default placer, a store bounded as resolved, a limiter and an empty deployment store', async () => {
    const config = composeGatewayConfig({ runners, maxResultBytes: 4096, maxStoredBytes: 5120 });
    expect(config.placer.name).toBe('round-robin');
    expect(await config.store.health()).toEqual({ ok: true, storedBytes: 0, maxStoredBytes: 5120 });
    expect(await config.limiter.admitCall('key-1', {}, 'lease-1')).toEqual({ kind: 'admitted' });
    expect(await config.deployments.list()).toEqual([]);
    expect(Object.isFrozen(config)).toBe(true);
  });

  it('takes the parts given as they are, and resolving alone makes none', () => {
    const placer: Placer = { name: 'mine', order: (_call, list) => list };
    const parts = {
      placer,
      store: createMemoryStore(),
      limiter: createMemoryLimiter(),
      deployments: new MemoryDeploymentStore(),
    };
    const config = composeGatewayConfig({ runners, ...parts });
    expect(config).toMatchObject(parts);
    for (const part of Object.keys(parts))
      expect(config[part as keyof typeof parts]).toBe(parts[part as keyof typeof parts]);
    expect(resolveGatewayOptions({ runners })).toMatchObject({
      placer: undefined,
      store: undefined,
      limiter: undefined,
      deployments: undefined,
    });
  });
});
