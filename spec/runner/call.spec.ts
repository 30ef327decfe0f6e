/**
 * The runner's side of the acknowledgement (runner/call.ts): `102 Processing` once it has the
 * call and before the engine answers, repeated while the engine works, a sync status line held
 * back to the engine's first body byte, and a detached 202 only once the engine accepted the call.
 * Runner in-process, a scripted engine on a real socket.
 */
import { createServer } from 'node:http';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { request } from 'undici';
import {
  BUSY_HEADER,
  CALL_TYPE_HEADER,
  ERROR_TRAILER,
  RESPONSE_TIMEOUT_HEADER,
  TIMEOUT_HEADER,
} from '../../runner/protocol/index.ts';
import { createRunner } from '../../runner/server.ts';
import { serversForEach } from '../support/servers.ts';

const { cleanups } = serversForEach();

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
  const runner = createRunner({
    engine: engineUrl,
    engineKind: 'openai',
    slots: 4,
    ...(acceptWindow === undefined ? {} : { acceptWindow }),
  });
  const { url } = await runner.listen();
  cleanups.push(() => runner.close({ drainTimeout: 0 }));
  return url;
}

/**
 * The response bound the specs send: its third is the acknowledgement beat, and a runner stalled
 * for half of it answers busy; long enough that a busy machine does not stall the in-process
 * runner that long.
 */
const RESPONSE_TIMEOUT_MS = 1500;

/** Resolves true once `condition` holds, or false after `timeout` ms: the engine's gate. */
async function until(condition: () => boolean, timeout = 10_000): Promise<boolean> {
  for (const end = Date.now() + timeout; !condition(); await new Promise((r) => setTimeout(r, 5))) {
    if (Date.now() > end) return false;
  }
  return true;
}

/**
 * Sends a call and notes when each informational response and the final status line arrived
 * (ms after sending), pushing onto `infos` as they come so that an engine can wait on them.
 */
async function call(url: string, headers: Record<string, string> = {}, infos: number[] = []) {
  const started = Date.now();
  const res = await request(`${url}/v1/chat/completions`, {
    method: 'POST',
    body: '{"model":"m"}',
    headers: { 'content-type': 'application/json', [RESPONSE_TIMEOUT_HEADER]: String(RESPONSE_TIMEOUT_MS), ...headers },
    onInfo: ({ statusCode }) => {
      expect(statusCode).toBe(102);
      infos.push(Date.now() - started);
    },
  });
  return { res, infos, headAt: Date.now() - started };
}

// No case bounds wall-clock time from above: each engine holds its answer until the caller has
// seen what the case is about (gated on the caller's own observations), so a busy machine only
// makes a case slower. A broken mechanism makes the gate run out and the case's check fail.
describe('the acknowledgement', () => {
  it('acknowledges a call as soon as it has it, not a beat later', async () => {
    // A beat of 20 s: an acknowledgement the engine sees within 10 s was the one sent at arrival.
    const infos: number[] = [];
    let seen = false;
    const url = await runnerFor(
      await engine(async (_req, res) => {
        seen = await until(() => infos.length >= 1);
        res.end('{"ok":true}');
      }),
    );
    const { res } = await call(url, { [RESPONSE_TIMEOUT_HEADER]: '60000' }, infos);
    expect(res.statusCode).toBe(200);
    expect(await res.body.text()).toBe('{"ok":true}');
    expect(seen).toBe(true);
  });

  it('acknowledges a call again every third of the response bound while the engine works', async () => {
    const infos: number[] = [];
    const url = await runnerFor(
      await engine(async (_req, res) => {
        await until(() => infos.length >= 4);
        res.end('{"ok":true}');
      }),
    );
    const { res, headAt } = await call(url, {}, infos);
    expect(res.statusCode).toBe(200);
    expect(await res.body.text()).toBe('{"ok":true}');
    expect(infos.length).toBeGreaterThanOrEqual(4);
    // Repeated on the beat, not in a burst: the fourth leaves no sooner than three beats in.
    expect(infos[3]).toBeGreaterThanOrEqual(3 * (RESPONSE_TIMEOUT_MS / 3) - 10);
    expect(headAt).toBeGreaterThanOrEqual(infos[3]!);
  });

  it("holds a sync call's status line until the engine's first body byte", async () => {
    const infos: number[] = [];
    let wrote = false;
    let infosAtHeaders = 0;
    const url = await runnerFor(
      await engine(async (_req, res) => {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.flushHeaders();
        infosAtHeaders = infos.length;
        // The engine's early headers did not end the acknowledgements: they cover its silence.
        await until(() => infos.length >= infosAtHeaders + 3);
        wrote = true;
        res.end('data: first\n\n');
      }),
    );
    const { res } = await call(url, {}, infos);
    const wroteBeforeHead = wrote;
    expect(res.statusCode).toBe(200);
    expect(wroteBeforeHead).toBe(true);
    expect(infos.length).toBeGreaterThanOrEqual(infosAtHeaders + 3);
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
  it.each([429, 503])(
    'is answered busy when the engine refuses it with %i within the accept window',
    async (status) => {
      const url = await runnerFor(
        await engine((_req, res) => {
          res.writeHead(status);
          res.end();
        }),
        1000,
      );
      const { res, infos } = await call(url, { [CALL_TYPE_HEADER]: 'detached' });
      expect(res.statusCode).toBe(503);
      expect(res.headers[BUSY_HEADER]).toBe('engine-busy');
      expect(infos.length).toBeGreaterThanOrEqual(1);
      await res.body.dump();
    },
  );

  it('is answered 202 once the engine kept it for the accept window, and its result follows', async () => {
    let headSeen = false;
    let answered = false;
    const url = await runnerFor(
      await engine(async (_req, res) => {
        await until(() => headSeen);
        answered = true;
        res.end('{"done":1}');
      }),
      150,
    );
    const { res, headAt } = await call(url, { [CALL_TYPE_HEADER]: 'detached' });
    headSeen = true;
    const answeredBeforeHead = answered;
    expect(res.statusCode).toBe(202);
    // The 202 came on the accept window's timer, while the engine still held the call.
    expect(answeredBeforeHead).toBe(false);
    expect(headAt).toBeGreaterThanOrEqual(140);
    expect(await res.body.text()).toBe('{"done":1}');
    expect(res.trailers['sluice-result-status']).toBe('200');
  });

  it('is answered 202 with its result at once when the engine answers within the window', async () => {
    // A 20 s window: a 202 well inside it came from the engine's answer, not the window's end.
    const url = await runnerFor(await engine((_req, res) => res.end('{"done":2}')), 20_000);
    const { res, headAt } = await call(url, { [CALL_TYPE_HEADER]: 'detached' });
    expect(res.statusCode).toBe(202);
    expect(headAt).toBeLessThan(15_000);
    expect(await res.body.text()).toBe('{"done":2}');
  });
});
