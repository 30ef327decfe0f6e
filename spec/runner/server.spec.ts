/**
 * The runner over real sockets on 127.0.0.1: admission, the wire contract, trailers, and how
 * engine trouble is reported. Runner and simulated engine run in-process here; the gateway
 * integration specs run them as processes.
 */
import { request as httpRequest } from 'node:http';
import { connect } from 'node:net';
import { describe, expect, it } from 'vitest';
import { request } from 'undici';
import { createSimEngine } from '../../runner/engines/sim/server.ts';
import type { SimEngineOptions } from '../../runner/engines/sim/options.ts';
import {
  BUSY_HEADER,
  ERROR_TRAILER,
  EXEC_TRAILER,
  RUNNER_ID_HEADER,
  parseExecTiming,
} from '../../runner/protocol/index.ts';
import { createRunner } from '../../runner/server.ts';
import type { RunnerServer } from '../../runner/server.ts';
import type { LogFields } from '../../placer/kernel/index.ts';
import { warningRecorder } from '../support/logger.ts';
import { serversForEach } from '../support/servers.ts';

const { cleanups } = serversForEach();

async function start(
  engineOptions: SimEngineOptions,
  slots = 1,
): Promise<{ runner: RunnerServer; url: string; engineUrl: string; engine: ReturnType<typeof createSimEngine> }> {
  const engine = createSimEngine(engineOptions);
  const { url: engineUrl } = await engine.listen();
  cleanups.push(() => engine.close());
  const runner = createRunner({ engine: engineUrl, slots, id: 'r-test' });
  const { url } = await runner.listen();
  cleanups.push(() => runner.close({ drainTimeout: 0 }));
  return { runner, url, engineUrl, engine };
}

const chat = (extra: Record<string, unknown> = {}) =>
  JSON.stringify({ model: 'sim-small', messages: [{ role: 'user', content: 'hi' }], ...extra });

function post(url: string, body: string) {
  return request(`${url}/v1/chat/completions`, {
    method: 'POST',
    body,
    headers: { 'content-type': 'application/json' },
  });
}

type Answer = Awaited<ReturnType<typeof post>>;

/** Checks the runner answered 503 busy for `reason`, and reads the answer's body away. */
async function expectBusy(res: Answer, reason: string): Promise<void> {
  expect(res.statusCode).toBe(503);
  expect(res.headers[BUSY_HEADER]).toBe(reason);
  await res.body.dump();
}

/** Checks the runner served the call, and reads the answer's body away. */
async function expectServed(res: Answer): Promise<void> {
  expect(res.statusCode).toBe(200);
  await res.body.dump();
}

describe('runner', () => {
  it('streams the engine response and sends the execution time as a trailer', async () => {
    const { url } = await start({ ttftMs: 60, itlMs: 0, outputTokens: 1 });
    const res = await post(url, chat());
    expect(res.statusCode).toBe(200);
    expect(res.headers[RUNNER_ID_HEADER]).toBe('r-test');
    expect(res.headers['sluice-engine-id']).toBeDefined();
    expect(((await res.body.json()) as any).object).toBe('chat.completion');
    const exec = parseExecTiming(res.trailers[EXEC_TRAILER]);
    expect(exec).toBeGreaterThanOrEqual(60);
    expect(exec).toBeLessThan(5000);
    expect(res.trailers[ERROR_TRAILER]).toBeUndefined();
  });

  it('answers 100 Continue itself and does not pass Expect on to the engine', async () => {
    const { url, engine } = await start({ ttftMs: 0, itlMs: 0, outputTokens: 1 });
    const body = chat();
    const answer = await new Promise<{ status: number; text: string; continued: boolean }>((resolve, reject) => {
      let continued = false;
      const req = httpRequest(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'content-length': String(Buffer.byteLength(body)),
          expect: '100-continue',
        },
      });
      req.once('continue', () => {
        continued = true;
        req.end(body);
      });
      req.once('response', (res) => {
        let text = '';
        res.on('data', (chunk: Buffer) => (text += chunk.toString()));
        res.once('end', () => resolve({ status: res.statusCode ?? 0, text, continued }));
      });
      req.once('error', reject);
      req.flushHeaders();
    });
    expect(answer.continued).toBe(true);
    expect(answer.status, answer.text).toBe(200);
    expect(JSON.parse(answer.text).object).toBe('chat.completion');
    expect(engine.stats().completed).toBe(1);
  });

  it('answers busy before reading the body when every slot is taken', async () => {
    const { url, runner } = await start({ ttftMs: 0, itlMs: 50, outputTokens: 20 });
    const long = post(url, chat());
    await expect.poll(() => runner.status().slots.inUse, { timeout: 5000, interval: 5 }).toBe(1);
    // Headers promise a megabyte that never comes: only an answer given before reading can arrive.
    const { port } = new URL(url);
    const answer = await new Promise<string>((resolve, reject) => {
      const socket = connect(Number(port), '127.0.0.1');
      let data = '';
      socket.on('data', (d) => {
        data += d.toString();
        if (data.includes('\r\n\r\n')) {
          socket.destroy();
          resolve(data);
        }
      });
      socket.on('error', reject);
      socket.write(
        'POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 1048576\r\n\r\n',
      );
    });
    expect(answer).toMatch(/^HTTP\/1.1 503/);
    expect(answer.toLowerCase()).toContain(`${BUSY_HEADER}: slots`);
    expect((await long).statusCode).toBe(200);
    expect(runner.status().calls.rejected).toBe(1);
  });

  it('answers busy when the engine refuses with 429, since nothing ran', async () => {
    const { url, engine, runner } = await start(
      { ttftMs: 0, itlMs: 50, outputTokens: 20, maxNumSeqs: 1, maxQueue: 0 },
      4,
    );
    const first = post(url, chat());
    await expect.poll(() => engine.stats().running, { timeout: 5000, interval: 5 }).toBe(1);
    await expectBusy(await post(url, chat()), 'engine-busy');
    await expectServed(await first);
    expect(runner.status().calls).toMatchObject({ served: 1, rejected: 1 });
  });

  it('answers busy while its engine is not reachable, then serves once it is', async () => {
    const engine = createSimEngine({ ttftMs: 0, itlMs: 0 });
    const { port } = await engine.listen();
    await engine.close();
    const runner = createRunner({ engine: `http://127.0.0.1:${port}`, engineProbeInterval: 500 });
    const { url } = await runner.listen();
    cleanups.push(() => runner.close({ drainTimeout: 0 }));
    await expectBusy(await post(url, chat()), 'starting');
    expect(runner.status().engines[0]!.state).toBe('starting');

    const again = createSimEngine({ ttftMs: 0, itlMs: 0 });
    await again.listen(port);
    cleanups.push(() => again.close());
    await expect.poll(() => runner.status().engines[0]!.state, { timeout: 5000, interval: 20 }).toBe('ready');
    await expectServed(await post(url, chat()));
  });

  it('marks the response failed in a trailer when the engine dies mid-stream', async () => {
    const { url, engine } = await start({ ttftMs: 0, itlMs: 30, outputTokens: 40 });
    const res = await post(url, chat({ stream: true }));
    expect(res.statusCode).toBe(200);
    let closing: Promise<void> | undefined;
    for await (const _chunk of res.body) closing ??= engine.close();
    await closing;
    expect(res.trailers[ERROR_TRAILER]).toBe('RUNNER_ENGINE_FAILED');
    expect(parseExecTiming(res.trailers[EXEC_TRAILER])).toBeGreaterThan(0);
  });

  it('reports id, version, engine, models, slots and call counts at /status', async () => {
    const { url, engineUrl } = await start({ ttftMs: 0, itlMs: 0 }, 3);
    await (await post(url, chat())).body.dump();
    const status = (await (await request(`${url}/status`)).body.json()) as any;
    expect(status).toMatchObject({
      id: 'r-test',
      state: 'serving',
      engines: [{ url: engineUrl, state: 'ready', models: ['sim-small'], slots: { total: 3, inUse: 0 } }],
      models: ['sim-small'],
      slots: { total: 3, inUse: 0 },
      calls: { served: 1, rejected: 0, failed: 0 },
    });
    expect(status.version).toMatch(/^\d+\.\d+\.\d+/);
  });

  it('answers busy with reason draining once closing, and finishes the running call', async () => {
    const { url, runner } = await start({ ttftMs: 0, itlMs: 20, outputTokens: 10 }, 2);
    const running = post(url, chat());
    await expect.poll(() => runner.status().slots.inUse, { timeout: 5000, interval: 5 }).toBe(1);
    const closed = runner.close({ drainTimeout: 5000 });
    const refused = await post(url, chat()).catch((error: Error) => error);
    if (!(refused instanceof Error)) await expectBusy(refused, 'draining');
    await expectServed(await running);
    await closed;
  });

  it('ends the drain when the last running call finishes, long before the drain timeout', async () => {
    const { url, runner } = await start({ ttftMs: 0, itlMs: 20, outputTokens: 10 }, 2);
    const running = post(url, chat());
    await expect.poll(() => runner.status().slots.inUse, { timeout: 5000, interval: 5 }).toBe(1);
    let stopped = false;
    const closed = runner.close({ drainTimeout: 600_000 }).then(() => (stopped = true));
    const res = await running;
    await res.body.dump();
    // The drain waits on the slots, not on the timeout: it ends soon after the call does (the
    // test's own timeout, far below the drain timeout, fails it otherwise).
    await closed;
    expect(stopped).toBe(true);
    expect(runner.status().slots.inUse).toBe(0);
  });

  it('stops waiting at the drain timeout and warns with the calls still running', async () => {
    const engine = createSimEngine({ ttftMs: 0, itlMs: 200, outputTokens: 200 });
    const { url: engineUrl } = await engine.listen();
    cleanups.push(() => engine.close());
    const warnings: LogFields[] = [];
    const runner = createRunner({ engine: engineUrl, slots: 2, id: 'r-test', logger: warningRecorder(warnings) });
    const { url } = await runner.listen();
    const running = post(url, chat())
      .then(
        (res) => res.body.dump(),
        () => undefined,
      )
      .catch(() => undefined);
    await expect.poll(() => runner.status().slots.inUse, { timeout: 5000, interval: 5 }).toBe(1);
    await runner.close({ drainTimeout: 50 });
    expect(warnings.filter((w) => w.msg === 'drain timeout, aborting calls')).toEqual([
      { msg: 'drain timeout, aborting calls', inFlight: 1 },
    ]);
    await running;
  });
});
