/**
 * CORS on a real gateway on port 0, in front of an in-process runner and simulated engine: off
 * by default; on, a preflight is answered before any credential is checked (204, or 403 for an
 * origin not listed), and every answer to an allowed origin carries Access-Control-Allow-Origin
 * and exposes the headers a client reads: a route's, a call's, a stream's and a refusal's alike.
 */
import { describe, expect, it } from 'vitest';
import { request } from 'undici';
import { EXPOSED_HEADERS } from '../../../gateway/http/cors.ts';
import { GatewayConfigError } from '../../../gateway/errors.ts';
import type { GatewayOptions } from '../../../gateway/options.ts';
import { createGateway } from '../../../gateway/server.ts';
import { keys } from '../../support/callers.ts';
import { chatBody } from '../../support/fleet.ts';
import { serversForEach } from '../../support/servers.ts';
import { startSimRunner } from '../../support/sim-runner.ts';

const { cleanups } = serversForEach();
const APP = 'https://app.example.com';
const KEY = 'Bearer sk-a-secret';

async function gateway(options: Partial<GatewayOptions> = {}): Promise<string> {
  const { runnerUrl } = await startSimRunner(cleanups, { id: 'r1' });
  const gw = createGateway({
    runners: [runnerUrl],
    clientKeys: keys(2),
    requireKeys: true,
    placerTimeout: 2000,
    ...options,
  });
  const { url } = await gw.listen();
  cleanups.push(() => gw.close());
  return url;
}

async function send(url: string, init: Parameters<typeof request>[1] = {}) {
  const res = await request(url, init);
  const text = await res.body.text();
  return { status: res.statusCode, headers: res.headers, text };
}

const preflight = (origin: string, method = 'POST', headers = 'authorization, content-type, x-stainless-os') => ({
  method: 'OPTIONS' as const,
  headers: { origin, 'access-control-request-method': method, 'access-control-request-headers': headers },
});

const call = (origin: string | undefined, body = chatBody(), auth: string | null = KEY) => ({
  method: 'POST' as const,
  headers: {
    'content-type': 'application/json',
    ...(origin ? { origin } : {}),
    ...(auth ? { authorization: auth } : {}),
  },
  body,
});

describe('CORS', () => {
  it('answers a preflight from an allowed origin with 204, before any credential is checked', async () => {
    const url = await gateway({ corsOrigins: [APP, 'http://localhost:5173'] });
    const res = await send(`${url}/v1/chat/completions`, preflight(APP));
    expect(res.status).toBe(204);
    expect(res.headers).toMatchObject({
      'access-control-allow-origin': APP,
      'access-control-allow-methods': 'GET, POST, PUT, DELETE',
      'access-control-allow-headers': 'authorization, content-type, x-stainless-os',
      'access-control-max-age': '7200',
    });
    expect(String(res.headers.vary)).toMatch(/Origin/);
    expect(res.text).toBe('');
  });

  it('refuses a preflight from another origin with 403 GW_CORS_ORIGIN_REFUSED and no CORS header', async () => {
    const url = await gateway({ corsOrigins: [APP] });
    const res = await send(`${url}/v1/chat/completions`, preflight('https://evil.example'));
    expect(res.status).toBe(403);
    expect(JSON.parse(res.text).error).toMatchObject({ code: 'GW_CORS_ORIGIN_REFUSED', type: 'permission_error' });
    expect(JSON.parse(res.text).error.message).toContain('"https://evil.example" is not allowed');
    expect(res.headers['access-control-allow-origin']).toBeUndefined();
  });

  it('puts the CORS headers on a call, a stream, a refusal and a routed answer to an allowed origin', async () => {
    const url = await gateway({ corsOrigins: [APP] });
    const answers = [
      await send(`${url}/v1/chat/completions`, call(APP)),
      await send(`${url}/v1/chat/completions`, call(APP, chatBody({ stream: true }))),
      await send(`${url}/v1/chat/completions`, call(APP, chatBody(), null)),
      await send(`${url}/v1/chat/completions`, call(APP, '{"model":')),
      await send(`${url}/v1/models`, { headers: { origin: APP, authorization: KEY } }),
      await send(`${url}/v1/no-such-route`, { headers: { origin: APP } }),
    ];
    expect(answers.map((a) => a.status)).toEqual([200, 200, 401, 400, 200, 404]);
    expect(answers[1]!.text).toContain('data: [DONE]');
    for (const answer of answers) {
      expect(answer.headers['access-control-allow-origin']).toBe(APP);
      expect(String(answer.headers.vary)).toMatch(/Origin/);
      const exposed = String(answer.headers['access-control-expose-headers']).split(', ');
      expect(exposed).toEqual(EXPOSED_HEADERS);
      expect(exposed).toEqual(
        expect.arrayContaining(['sluice-call-id', 'x-ratelimit-remaining-requests', 'retry-after', 'x-request-id']),
      );
    }
  });

  it('gives a call from another origin, or from none, no CORS header', async () => {
    const url = await gateway({ corsOrigins: [APP] });
    for (const origin of ['https://evil.example', undefined]) {
      const res = await send(`${url}/v1/chat/completions`, call(origin));
      expect(res.status).toBe(200);
      expect(res.headers['access-control-allow-origin']).toBeUndefined();
      expect(res.headers['access-control-expose-headers']).toBeUndefined();
    }
  });

  it("answers any origin with '*'", async () => {
    const url = await gateway({ corsOrigins: ['*'] });
    const pre = await send(`${url}/v1/models`, preflight('https://anyone.example', 'GET'));
    expect(pre.status).toBe(204);
    expect(pre.headers['access-control-allow-origin']).toBe('*');
    const res = await send(`${url}/v1/chat/completions`, call('https://anyone.example'));
    expect(res.headers['access-control-allow-origin']).toBe('*');
  });

  it('sends no CORS header and answers no preflight when off (the default)', async () => {
    const url = await gateway();
    const pre = await send(`${url}/v1/chat/completions`, preflight(APP));
    expect(pre.status).not.toBe(204);
    expect(pre.headers['access-control-allow-origin']).toBeUndefined();
    const res = await send(`${url}/v1/chat/completions`, call(APP));
    expect(res.status).toBe(200);
    expect(res.headers['access-control-allow-origin']).toBeUndefined();
    expect(res.headers.vary).toBeUndefined();
  });

  it.each([
    [['https://app.example.com/'], 'corsOrigins[0]'],
    [['app.example.com'], 'corsOrigins[0]'],
    [[APP, 'https://x.example/path'], 'corsOrigins[1]'],
    ['*', 'corsOrigins must be a list'],
  ])('refuses corsOrigins %j, naming %s', (origins, named) => {
    expect(() =>
      createGateway({ runners: ['http://127.0.0.1:9'], corsOrigins: origins as unknown as string[] }),
    ).toThrow(GatewayConfigError);
    expect(() =>
      createGateway({ runners: ['http://127.0.0.1:9'], corsOrigins: origins as unknown as string[] }),
    ).toThrow(named);
  });
});
