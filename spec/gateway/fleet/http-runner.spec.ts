/**
 * Offers through a pool entry and its HttpRunner against a bare HTTP server standing in for a
 * runner, so the test sees exactly which offers reached the wire: an offer to a runner this
 * gateway already fills with its own calls is answered busy without a request, and is sent again
 * once one of them finishes. Time on the gateway's side is a fake clock the test moves; the
 * sockets are real.
 */
import { once } from 'node:events';
import { createServer } from 'node:http';
import type { ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { beforeEach, describe, expect, it } from 'vitest';
import type { GatewayCall } from '../../../gateway/http/call.ts';
import { HttpRunner } from '../../../gateway/fleet/http-runner.ts';
import type { RunnerResponse } from '../../../gateway/fleet/http-runner.ts';
import { RunnerEntry } from '../../../gateway/fleet/runner-entry.ts';
import type { TryExecResult } from '../../../placer/types.ts';
import {
  BUSY_HEADER,
  CALL_ID_HEADER,
  RESPONSE_TIMEOUT_HEADER,
  TIMEOUT_HEADER,
} from '../../../runner/protocol/index.ts';
import type { ReportedLoad, RunnerRegistration, StatusReading } from '../../../runner/protocol/index.ts';
import { FakeClock } from '../../placer/fake.ts';
import { serversForEach } from '../../support/servers.ts';
import { gatewayCall } from '../../support/gateway-call.ts';

const { cleanups } = serversForEach();
/** The gateway's clock; each test starts it afresh. */
let clock: FakeClock;
beforeEach(() => {
  clock = new FakeClock();
});

/** A runner that takes every call, sends its headers, and holds the body open until `finish`. */
async function holdingRunner(): Promise<{ url: URL; received: string[]; open: ServerResponse[] }> {
  const received: string[] = [];
  const open: ServerResponse[] = [];
  const server = createServer((req, res) => {
    received.push(String(req.headers[CALL_ID_HEADER]));
    req.resume();
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.write('taken\n');
    open.push(res);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(async () => {
    for (const res of open) res.destroy();
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });
  return { url: new URL(`http://127.0.0.1:${(server.address() as AddressInfo).port}`), received, open };
}

/** A pool entry over an HttpRunner to `url`, on the test's clock. */
function httpRunner(
  url: URL,
  bounds: { responseTimeout?: number; streamIdleTimeout?: number; threshold?: number } = {},
): RunnerEntry {
  const streamIdleTimeout = bounds.streamIdleTimeout ?? 60_000;
  const transport = new HttpRunner(url, {
    connectTimeout: 2_000,
    responseTimeout: bounds.responseTimeout ?? 5_000,
    streamIdleTimeout,
    clock,
  });
  const runner = new RunnerEntry(url.host, transport, {
    clock,
    breaker: { threshold: bounds.threshold ?? 5, openFor: 30_000, closeAfter: 2 },
    streamIdleTimeout,
    onChange: () => {},
  });
  cleanups.push(() => runner.close({ abortCalls: true }));
  return runner;
}

function loadOf(slots: number): ReportedLoad {
  return { slotsInUse: 0, slots, queue: 0, models: {} };
}

/** What a status probe reading `load` gives the entry (no models: the engine's list is not the point). */
function statusOf(load: ReportedLoad): StatusReading {
  return { models: undefined, load };
}

function registrationOf(slots: number): RunnerRegistration {
  return {
    id: 'r',
    url: 'http://127.0.0.1:9',
    version: 'test',
    engines: [],
    models: ['sim-small'],
    slots,
    gpus: null,
    ready: true,
    load: loadOf(slots),
  };
}

/** An /invoke call of sim-small at the gateway's clock. */
function call(overrides: Partial<GatewayCall> = {}): GatewayCall {
  return gatewayCall(clock.now(), {
    route: 'invoke',
    path: '/invoke/sim-small',
    headers: { 'content-type': 'application/json' },
    ...overrides,
  });
}

/** A stand-in runner answering each call as `answer` says; counts the calls that reached it. */
async function scriptedRunner(
  answer: (res: ServerResponse, n: number) => void,
): Promise<{ url: URL; received: () => number }> {
  let received = 0;
  const server = createServer((req, res) => {
    received++;
    req.resume();
    answer(res, received);
  });
  const sockets = new Set<import('node:net').Socket>();
  server.on('connection', (s) => {
    sockets.add(s);
    s.once('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(async () => {
    for (const s of sockets) s.destroy();
    await new Promise((resolve) => server.close(resolve));
  });
  return { url: new URL(`http://127.0.0.1:${(server.address() as AddressInfo).port}`), received: () => received };
}

/** The response of a placed offer; fails the test for any other result. */
function placedResponse(result: TryExecResult<RunnerResponse>): RunnerResponse {
  expect(result.kind).toBe('placed');
  return (result as { value: RunnerResponse }).value;
}

describe('HttpRunner.send: the headers a runner gets', () => {
  it("sends the client's forwardable headers, repeated ones included, and the wire's own headers once, never a client's spelling of them", async () => {
    let seen: import('node:http').IncomingHttpHeaders | undefined;
    let raw: string[] = [];
    const server = createServer((req, res) => {
      seen = req.headers;
      raw = req.rawHeaders;
      req.resume();
      res.end('ok');
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    cleanups.push(() => new Promise((resolve) => server.close(resolve)));
    const target = new URL(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
    const runner = new HttpRunner(target, {
      connectTimeout: 2_000,
      responseTimeout: 4_321,
      streamIdleTimeout: 60_000,
      clock,
    });
    cleanups.push(() => runner.close({ abortCalls: true }));
    const signals = { answered() {}, down() {}, hung() {}, failed() {}, succeeded() {} };
    const sent = call({
      id: 'call-own',
      headers: {
        'content-type': 'application/json',
        'x-multi': ['a', 'b'],
        [CALL_ID_HEADER]: 'forged',
        [TIMEOUT_HEADER]: '1',
      },
      timeout: 9_000,
    });
    const result = await runner.send(sent, 'r', signals);
    await placedResponse(result).body.dump();
    expect(seen?.[CALL_ID_HEADER]).toBe('call-own');
    expect(seen?.[TIMEOUT_HEADER]).toBe('9000');
    expect(seen?.[RESPONSE_TIMEOUT_HEADER]).toBe('4321');
    expect(seen?.['content-type']).toBe('application/json');
    // Each name once, as the gateway set it; the client's repeated header arrives twice.
    const names = raw.filter((_, i) => i % 2 === 0).map((n) => n.toLowerCase());
    expect(names.filter((n) => n === CALL_ID_HEADER)).toHaveLength(1);
    expect(names.filter((n) => n === TIMEOUT_HEADER)).toHaveLength(1);
    expect(names.filter((n) => n === 'x-multi')).toHaveLength(2);
  });
});

describe('RunnerEntry.tryExec over HttpRunner.send', () => {
  it('answers busy without a request while its own calls fill the reported slots, and sends again once one finishes', async () => {
    const server = await holdingRunner();
    const runner = httpRunner(server.url);
    runner.probed(statusOf(loadOf(2)));
    const [a, b] = [call(), call()];
    const first = placedResponse(await runner.tryExec(a));
    placedResponse(await runner.tryExec(b));
    expect(runner.inFlight).toBe(2);

    const refused = call();
    expect(await runner.tryExec(refused)).toEqual({ kind: 'busy' });
    expect(runner.inFlight).toBe(2);

    const closed = once(first.body, 'close');
    server.open[0]!.end();
    await first.body.text();
    await closed;
    expect(runner.inFlight).toBe(1);
    const next = call();
    placedResponse(await runner.tryExec(next));
    expect(runner.inFlight).toBe(2);
    // The busy offer never reached the wire: the runner saw the two first calls, then the next.
    expect(server.received).toEqual([a.id, b.id, next.id]);
  });

  it("answers busy at the registration's reported slots, which take precedence over a status probe's", async () => {
    const server = await holdingRunner();
    const runner = httpRunner(server.url);
    runner.probed(statusOf(loadOf(8)));
    runner.register(registrationOf(1));
    placedResponse(await runner.tryExec(call()));
    expect(await runner.tryExec(call())).toEqual({ kind: 'busy' });
    expect(server.received).toHaveLength(1);
  });

  it.each([
    ['no report has come', undefined],
    ['the reported slots are 0', 0],
    ['the reported slots are not a number', Number.NaN],
  ])('sends every offer when %s, however many calls are in flight', async (_name, slots) => {
    const server = await holdingRunner();
    const runner = httpRunner(server.url);
    if (slots !== undefined) runner.probed(statusOf(loadOf(slots)));
    for (let i = 0; i < 3; i++) placedResponse(await runner.tryExec(call()));
    expect(runner.inFlight).toBe(3);
    expect(server.received).toHaveLength(3);
  });
});

describe('RunnerEntry.tryExec over HttpRunner.send: what an answer, or its absence, commits', () => {
  it('fails before commit, and marks the runner hung, when nothing answers within responseTimeout', async () => {
    const runner = httpRunner((await scriptedRunner(() => {})).url, { responseTimeout: 200 });
    const result = await runner.tryExec(call());
    expect(result.kind).toBe('failed');
    expect((result as { error: Error }).error.message).toMatch(/did not take the call.*nothing ran/);
    expect(runner.health.hung).toBe(true);
    // Passed over at once from now on, without touching the network.
    expect(await runner.tryExec(call())).toMatchObject({
      kind: 'failed',
      error: { message: expect.stringContaining('is hung') },
    });
    expect(runner.inFlight).toBe(0);
  });

  it('fails before commit when the connection ends before any answer', async () => {
    const runner = httpRunner((await scriptedRunner((res) => res.socket!.destroy())).url);
    expect((await runner.tryExec(call())).kind).toBe('failed');
    expect(runner.health.reachable).toBe(false);
    expect(runner.health.hung).toBe(false);
  });

  it('throws a failure after commit when the runner acknowledged the call and then the connection ended', async () => {
    const runner = httpRunner(
      (
        await scriptedRunner((res) => {
          res.writeProcessing();
          setTimeout(() => res.socket!.destroy(), 20);
        })
      ).url,
    );
    await expect(runner.tryExec(call())).rejects.toMatchObject({ code: 'GW_RUNNER_FAILED_AFTER_COMMIT' });
  });

  it('keeps waiting while acknowledgements come, longer than responseTimeout in all', async () => {
    // A beat a tenth of the bound: a busy machine would have to hold this process for most of
    // a second between two beats to make the bound run out.
    const runner = httpRunner(
      (
        await scriptedRunner((res) => {
          res.writeProcessing();
          const beat = setInterval(() => res.writeProcessing(), 100);
          setTimeout(() => {
            clearInterval(beat);
            res.end('done');
          }, 2_500);
        })
      ).url,
      { responseTimeout: 1_000 },
    );
    const response = placedResponse(await runner.tryExec(call()));
    expect(await response.body.text()).toBe('done');
  });

  it('throws GW_RUNNER_STALLED when the acknowledgements stop before the answer, and marks the runner hung', async () => {
    const runner = httpRunner((await scriptedRunner((res) => res.writeProcessing())).url, { responseTimeout: 150 });
    await expect(runner.tryExec(call())).rejects.toMatchObject({ code: 'GW_RUNNER_STALLED', status: 504 });
    expect(runner.health.hung).toBe(true);
  });

  it('errors a committed body that stays silent for streamIdleTimeout (the relay makes it GW_RUNNER_STALLED)', async () => {
    const runner = httpRunner(
      (
        await scriptedRunner((res) => {
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          res.write('data: 1\n\n');
        })
      ).url,
      { streamIdleTimeout: 150 },
    );
    const response = placedResponse(await runner.tryExec(call()));
    await expect(response.body.text()).rejects.toMatchObject({ code: 'UND_ERR_BODY_TIMEOUT' });
  });

  it("lets a detached call's body stay silent while its runner is heard from, and ends it once the runner is not", async () => {
    const runner = httpRunner(
      (
        await scriptedRunner((res) => {
          res.writeHead(202);
          res.flushHeaders();
        })
      ).url,
      { streamIdleTimeout: 150 },
    );
    const response = placedResponse(
      await runner.tryExec(call({ type: 'detached', placerDeadline: clock.now() + 10_000 })),
    );
    const text = response.body.text();
    // Longer than streamIdleTimeout on the gateway's clock, with the runner heard from meanwhile: not cut.
    expect(runner.cutSilentCalls()).toBe(0);
    clock.advance(100);
    runner.markUp();
    clock.advance(100);
    expect(runner.cutSilentCalls()).toBe(0);
    // Silent past the bound: the call ends with GW_RUNNER_STALLED.
    clock.advance(151);
    expect(runner.cutSilentCalls()).toBe(1);
    await expect(text).rejects.toMatchObject({ code: 'GW_RUNNER_STALLED' });
    expect(runner.cutSilentCalls()).toBe(0);
  });

  it('stops waiting for an acknowledgement at the placer deadline, as a failure before commit', async () => {
    const runner = httpRunner((await scriptedRunner(() => {})).url, { responseTimeout: 5_000 });
    const result = await runner.tryExec(call({ placerDeadline: clock.now() + 150 }));
    // Ended by the deadline (its own error), not by the 5 s response bound undici would have hit.
    expect(result).toMatchObject({
      kind: 'failed',
      error: { message: expect.stringContaining('the placer deadline passed before the runner acknowledged the call') },
    });
    // The deadline is the call's business, not a sign the runner is hung.
    expect(runner.health.hung).toBe(false);
  });

  it('opens the breaker after failures in a row, after commit too, and closes nothing on a bare placement', async () => {
    const runner = httpRunner(
      (
        await scriptedRunner((res) => {
          res.writeHead(502, { 'content-type': 'application/json', 'sluice-error': 'RUNNER_ENGINE_FAILED' });
          res.end('{"error":{"message":"engine gone","type":"server_error","code":"RUNNER_ENGINE_FAILED"}}');
        })
      ).url,
      { threshold: 3 },
    );
    for (let i = 0; i < 3; i++) {
      const response = placedResponse(await runner.tryExec(call()));
      await response.body.text();
    }
    expect(runner.breaker.state).toBe('open');
    expect(await runner.tryExec(call())).toMatchObject({
      kind: 'failed',
      error: { message: expect.stringContaining('circuit breaker is open') },
    });
  });

  it('counts a busy answer and a call that ended well as signs of life', async () => {
    const server = await scriptedRunner((res, n) => {
      if (n === 1) {
        res.writeHead(503, { [BUSY_HEADER]: 'slots' });
        return res.end();
      }
      res.end('ok');
    });
    const runner = httpRunner(server.url, { threshold: 2 });
    runner.breaker.failure();
    expect(await runner.tryExec(call())).toEqual({ kind: 'busy' });
    runner.breaker.failure();
    expect(runner.breaker.state).toBe('closed');
    const response = placedResponse(await runner.tryExec(call()));
    await response.body.text();
    runner.breaker.failure();
    expect(runner.breaker.state).toBe('closed');
  });
});

describe('RunnerEntry.load', () => {
  it('takes calls of ours that ended since the report off its running count, and only those', async () => {
    const server = await holdingRunner();
    const runner = httpRunner(server.url);
    const before = placedResponse(await runner.tryExec(call()));
    clock.advance(5);
    // The report is taken while that call runs, and counts it and one from another gateway.
    const at = clock.now();
    runner.probed(statusOf({ slotsInUse: 2, slots: 4, queue: 1, models: {} }));
    clock.advance(5);
    const after = placedResponse(await runner.tryExec(call()));
    expect(runner.load().reported).toMatchObject({ running: 2, waiting: 1, at });

    // Our call that the report counted ends: one fewer running.
    const closedBefore = once(before.body, 'close');
    server.open[0]!.end();
    await before.body.text();
    await closedBefore;
    expect(runner.load()).toMatchObject({ inFlight: 1, slots: 4, reported: { running: 1, waiting: 1 } });

    // One sent after the report was never in it: its end changes nothing.
    const closedAfter = once(after.body, 'close');
    server.open[1]!.end();
    await after.body.text();
    await closedAfter;
    expect(runner.load()).toMatchObject({ inFlight: 0, reported: { running: 1 } });

    // A newer report counts from scratch.
    clock.advance(1);
    runner.probed(statusOf({ slotsInUse: 0, slots: 4, queue: 0, models: {} }));
    expect(runner.load().reported).toMatchObject({ running: 0 });
  });
});
