/**
 * The runner's side of the acknowledgement (runner/call.ts): `102 Processing` once it has the
 * call and before the engine answers, repeated while the engine works, a sync status line held
 * back to the engine's first body byte, and a detached 202 only once the engine accepted the call.
 * Runner in-process, a scripted engine on a real socket.
 */
import { createServer } from 'node:http';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { request } from 'undici';
import { BUSY_HEADER, CALL_TYPE_HEADER, ERROR_TRAILER, RESPONSE_TIMEOUT_HEADER, TIMEOUT_HEADER } from '../../runner/protocol.ts';
import { createRunner } from '../../runner/server.ts';

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!().catch(() => {});
});

/** An engine that lists one model and answers calls as `answer` says. */
async function engine(answer: (req: IncomingMessage, res: ServerResponse) => void): Promise<string> {
  const server = createServer((req, res) => {
    if (req.method === 'GET') return res.end(JSON.stringify({ object: 'list', data: [{ id: 'm' }] }));
    req.resume();
    answer(req, res);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

async function runnerFor(engineUrl: string, acceptWindow?: number): Promise<string> {
  const runner = createRunner({ engine: engineUrl, engineKind: 'openai', slots: 4, ...(acceptWindow === undefined ? {} : { acceptWindow }) });
  const { url } = await runner.listen();
  cleanups.push(() => runner.close({ drainTimeout: 0 }));
  return url;
}

/** Sends a call and notes when each informational response and the final status line arrived. */
async function call(url: string, headers: Record<string, string> = {}) {
  const started = Date.now();
  const infos: number[] = [];
  const res = await request(`${url}/v1/chat/completions`, {
    method: 'POST',
    body: '{"model":"m"}',
    headers: { 'content-type': 'application/json', [RESPONSE_TIMEOUT_HEADER]: '150', ...headers },
    onInfo: ({ statusCode }) => {
      expect(statusCode).toBe(102);
      infos.push(Date.now() - started);
    },
  });
  return { res, infos, headAt: Date.now() - started };
}

describe('the acknowledgement', () => {
  it('acknowledges a call at once and again every third of the response bound while the engine works', async () => {
    const url = await runnerFor(await engine((_req, res) => setTimeout(() => res.end('{"ok":true}'), 600)));
    const { res, infos, headAt } = await call(url);
    expect(res.statusCode).toBe(200);
    expect(await res.body.text()).toBe('{"ok":true}');
    expect(infos[0]).toBeLessThan(100);
    // At least one more every 50 ms or so over 600 ms; generous for a busy machine.
    expect(infos.length).toBeGreaterThanOrEqual(4);
    expect(headAt).toBeGreaterThanOrEqual(550);
  });

  it('holds a sync call\'s status line until the engine\'s first body byte', async () => {
    const url = await runnerFor(await engine((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.flushHeaders();
      setTimeout(() => res.end('data: first\n\n'), 400);
    }));
    const { res, infos, headAt } = await call(url);
    expect(res.statusCode).toBe(200);
    expect(headAt).toBeGreaterThanOrEqual(350);
    // The engine's early headers did not end the acknowledgements: they covered its silence.
    expect(infos.filter((t) => t > 100).length).toBeGreaterThanOrEqual(1);
    expect(await res.body.text()).toBe('data: first\n\n');
  });

  it('sends no informational response to a caller that did not ask for acknowledgements', async () => {
    // A plain client, or a proxy in front of the runner that cannot relay 1xx answers (nginx).
    const url = await runnerFor(await engine((_req, res) => setTimeout(() => res.end('{"ok":true}'), 300)));
    const infos: number[] = [];
    const res = await request(`${url}/v1/chat/completions`, {
      method: 'POST',
      body: '{"model":"m"}',
      headers: { 'content-type': 'application/json' },
      onInfo: ({ statusCode }) => infos.push(statusCode),
    });
    expect(res.statusCode).toBe(200);
    expect(await res.body.text()).toBe('{"ok":true}');
    expect(infos).toEqual([]);
  });

  it('stops a call at the end of the budget it was sent, counted from its arrival', async () => {
    const url = await runnerFor(await engine(() => {}));
    const { res, headAt } = await call(url, { [TIMEOUT_HEADER]: '300' });
    expect(res.statusCode).toBe(504);
    expect(res.headers[ERROR_TRAILER]).toBe('RUNNER_ENGINE_TIMEOUT');
    await res.body.dump();
    expect(headAt).toBeGreaterThanOrEqual(280);
  });
});

describe('a detached call', () => {
  it.each([429, 503])('is answered busy when the engine refuses it with %i within the accept window', async (status) => {
    const url = await runnerFor(await engine((_req, res) => {
      res.writeHead(status);
      res.end();
    }), 1000);
    const { res, infos } = await call(url, { [CALL_TYPE_HEADER]: 'detached' });
    expect(res.statusCode).toBe(503);
    expect(res.headers[BUSY_HEADER]).toBe('engine-busy');
    expect(infos.length).toBeGreaterThanOrEqual(1);
    await res.body.dump();
  });

  it('is answered 202 once the engine kept it for the accept window, and its result follows', async () => {
    const url = await runnerFor(await engine((_req, res) => setTimeout(() => res.end('{"done":1}'), 700)), 150);
    const { res, headAt } = await call(url, { [CALL_TYPE_HEADER]: 'detached' });
    expect(res.statusCode).toBe(202);
    expect(headAt).toBeLessThan(600);
    expect(await res.body.text()).toBe('{"done":1}');
    expect(res.trailers['sluice-result-status']).toBe('200');
  });

  it('is answered 202 with its result at once when the engine answers within the window', async () => {
    const url = await runnerFor(await engine((_req, res) => res.end('{"done":2}')), 5000);
    const { res, headAt } = await call(url, { [CALL_TYPE_HEADER]: 'detached' });
    expect(res.statusCode).toBe(202);
    expect(headAt).toBeLessThan(2000);
    expect(await res.body.text()).toBe('{"done":2}');
  });
});
