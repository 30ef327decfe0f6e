/**
 * Cold starts (gateway/control/cold-start.ts, through placement.ts): a call for a deployed model that no
 * runner serves waits in the queue for a replica, and goes out when a runner serving the model
 * registers or turns ready. An agent over a real FleetPool (no probes, registered runners only)
 * wired to its queue as the gateway wires them, on a fake clock with the queue's fallback off,
 * so only the pool's capacity signal can wake a waiting call; the runner is a real HTTP server
 * on port 0 that answers every call.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import { LbAgent } from '../../../gateway/calls/agent.ts';
import { COLD_START_HEADER, ColdStartWaits } from '../../../gateway/control/cold-start.ts';
import { recordingColdStarts } from '../../support/cold-starts.ts';
import type { RecordingColdStarts } from '../../support/cold-starts.ts';
import { DetachedCalls } from '../../../gateway/detached/detached.ts';
import { composeGatewayConfig } from '../../../gateway/server.ts';
import type { GatewayOptions } from '../../../gateway/options.ts';
import type { CallResult } from '../../../gateway/http/index.ts';
import { waitQueueFor } from '../../../gateway/calls/placement.ts';
import { FleetPool } from '../../../gateway/fleet/pool.ts';
import type { RunnerEntry } from '../../../gateway/fleet/runner-entry.ts';
import { createPrometheusMetrics } from '../../../gateway/observe/telemetry.ts';
import { WaitQueue } from '../../../gateway/calls/wait-queue.ts';
import { silentLogger } from '../../../placer/kernel/index.ts';
import type { ReportedLoad, RunnerRegistration } from '../../../runner/protocol/index.ts';
import { chatBody, eventually, metricValue } from '../../support/fleet.ts';
import { FakeClock } from '../../placer/fake.ts';
import { serversForEach } from '../../support/servers.ts';

const { cleanups } = serversForEach();

async function listen(handler: Parameters<typeof createServer>[1]): Promise<string> {
  const server = createServer(handler);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  cleanups.push(() => new Promise((r) => server.close(r)));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

const load = (slots = 8): ReportedLoad => ({ slotsInUse: 0, slots, queue: 0, models: {} });

function registration(id: string, url: string, models: string[], ready: boolean): RunnerRegistration {
  return { id, url, version: '1', engines: [], models, slots: 8, gpus: null, ready, load: load() };
}

interface Setup {
  url: string;
  clock: FakeClock;
  queue: WaitQueue;
  cold: RecordingColdStarts;
  /** Every time the agent asked whether a model is deployed. */
  asked: string[];
  results: CallResult[];
  /** A runner of `models` in the pool, registered `ready` or still starting. */
  runner(id: string, models: string[], ready?: boolean): RunnerEntry;
  metrics(): Promise<string>;
}

/** An agent on POST /v1/chat/completions over an empty FleetPool, with `m` deployed. */
async function setup(options: Partial<GatewayOptions> = {}, withColdStarts = true): Promise<Setup> {
  const clock = new FakeClock();
  const telemetry = createPrometheusMetrics();
  cleanups.push(() => telemetry.shutdown());
  const cold = recordingColdStarts(['m']);
  const asked: string[] = [];
  const results: CallResult[] = [];
  const runnerUrl = await listen((req, res) => {
    req.resume();
    req.on('end', () => {
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ object: 'chat.completion', choices: [] }));
    });
  });
  let queue: WaitQueue | undefined;
  const fleet = new FleetPool({
    urls: [],
    connectTimeout: 1000,
    responseTimeout: 5000,
    streamIdleTimeout: 5000,
    clock,
    statusInterval: 60_000,
    breaker: { threshold: 5, openFor: 1000, closeAfter: 1 },
    logger: silentLogger,
    // As gateway/server.ts wires it.
    room: { freed: (runner, models, free) => queue!.freed(runner, models, free) },
  });
  cleanups.push(() => fleet.close({ abortCalls: true }));
  const config = composeGatewayConfig({
    pool: fleet,
    clock,
    // The queue's fallback off: only the pool's capacity signal wakes a waiting call.
    retryAllDelay: 0,
    meterProvider: telemetry.meterProvider,
    listeners: [{ afterCall: (_call, result) => void results.push(result) }],
    ...(withColdStarts
      ? {
          coldStarts: {
            deployed: (model: string) => (asked.push(model), cold.deployed(model)),
            wake: (model: string) => cold.wake(model),
            failed: (model: string) => cold.failed!(model),
          },
        }
      : {}),
    ...options,
  });
  queue = waitQueueFor(config);
  const agent = new LbAgent(config, fleet, DetachedCalls.forGateway(config, config.logger), queue);
  const url = await listen((req, res) => void agent.serve('chat', undefined, req, res));
  return {
    url: `${url}/v1/chat/completions`,
    clock,
    queue,
    cold,
    asked,
    results,
    runner(id, models, ready = true) {
      const entry = fleet.createRunner(new URL(runnerUrl), id);
      void fleet.add(entry)?.close({ abortCalls: true });
      entry.register(registration(id, runnerUrl, models, ready));
      return entry;
    },
    metrics: () => telemetry.render(),
  };
}

/** Sends a chat call for `model`; resolves with its status, headers and body. */
async function call(url: string, model = 'm', headers: Record<string, string> = {}, signal?: AbortSignal) {
  const res = await request(url, {
    method: 'POST',
    body: chatBody({ model }),
    headers: { 'content-type': 'application/json', ...headers },
    ...(signal ? { signal } : {}),
  });
  const text = await res.body.text();
  return { status: res.statusCode, headers: res.headers, json: text ? JSON.parse(text) : undefined };
}

describe('cold starts: a call for a deployed model with no runner', () => {
  it('waits in the queue, asks for a replica, and goes out with the wait in sluice-cold-start once a runner registers for the model', async () => {
    const s = await setup();
    const answer = call(s.url);
    await eventually(() => s.queue.waiting === 1, 10_000, 'the call waiting');
    expect(s.cold.wakes).toEqual(['m']);
    expect(s.queue.waitingFor('m')).toBe(1);
    expect(s.queue.snapshot().models).toEqual([expect.objectContaining({ model: 'm', waiting: 1 })]);
    s.clock.advance(1500);
    s.runner('r1', ['m']);
    const res = await answer;
    expect(res.status).toBe(200);
    expect(res.headers[COLD_START_HEADER]).toBe('1500');
    expect(s.queue.size).toBe(0);
    await eventually(() => s.results.length === 1, 10_000, 'the after-call listener');
    expect(s.results[0]).toMatchObject({ outcome: 'completed', status: 200, runner: 'r1' });
    const page = await s.metrics();
    expect(metricValue(page, 'sluice_cold_start_calls_total', { model: 'm' })).toBe(1);
    expect(metricValue(page, 'sluice_cold_start_wait_seconds_count', { model: 'm' })).toBe(1);
    expect(metricValue(page, 'sluice_cold_start_wait_seconds_sum', { model: 'm' })).toBe(1.5);
  });

  it('waits while the only runner of the model is still starting, and goes out when a heartbeat says it is ready', async () => {
    const s = await setup();
    const entry = s.runner('r1', ['m'], false);
    const answer = call(s.url);
    await eventually(() => s.queue.waiting === 1, 10_000, 'the call waiting');
    expect(s.cold.wakes).toEqual(['m']);
    s.clock.advance(250);
    // Still starting: no wake, the call keeps waiting.
    entry.heartbeat({ ready: false, state: 'serving', models: [], load: load() });
    expect(s.queue.waiting).toBe(1);
    entry.heartbeat({ ready: true, state: 'serving', models: ['m'], load: load() });
    const res = await answer;
    expect(res.status).toBe(200);
    expect(res.headers[COLD_START_HEADER]).toBe('250');
  });

  it('goes out when a ready runner that served other models starts serving this one', async () => {
    const s = await setup();
    const entry = s.runner('r1', ['other']);
    const answer = call(s.url);
    await eventually(() => s.queue.waiting === 1, 10_000, 'the call waiting');
    entry.heartbeat({ ready: true, state: 'serving', models: ['other', 'm'], load: load() });
    const res = await answer;
    expect(res.status).toBe(200);
    expect(res.headers[COLD_START_HEADER]).toBe('0');
  });

  it('answers 503 PLACER_TIMEOUT naming the cold start, with Retry-After and the wait, when no replica comes before the placer deadline', async () => {
    const s = await setup({ placerTimeout: 1000, retryAfter: 3 });
    const answer = call(s.url);
    await eventually(() => s.queue.waiting === 1, 10_000, 'the call waiting');
    s.clock.advance(1000);
    const res = await answer;
    expect(res.status).toBe(503);
    expect(res.headers['retry-after']).toBe('3');
    expect(res.headers[COLD_START_HEADER]).toBe('1000');
    expect(res.json.error.code).toBe('PLACER_TIMEOUT');
    expect(res.json.error.message).toContain(
      'model "m" had no ready replica, and none became ready in time (a cold start',
    );
    expect(s.queue.size).toBe(0);
    await eventually(() => s.results.length === 1, 10_000, 'the after-call listener');
    expect(s.results[0]).toMatchObject({ outcome: 'server_busy', status: 503 });
    const page = await s.metrics();
    expect(metricValue(page, 'sluice_calls_server_busy_total')).toBe(1);
    expect(metricValue(page, 'sluice_cold_start_calls_total', { model: 'm' })).toBe(1);
    expect(metricValue(page, 'sluice_cold_start_wait_seconds_sum', { model: 'm' })).toBe(1);
  });

  it("answers a waiting call 503 GW_DEPLOYMENT_FAILED with Retry-After once its model's start failed, and a new call at once", async () => {
    const s = await setup({ retryAfter: 4 });
    const answer = call(s.url);
    await eventually(() => s.queue.waiting === 1, 2000, 'the call waiting');
    s.clock.advance(700);
    // As the gateway does when the reconciler sees a start fail: the model's waiting calls walk once.
    s.cold.failures.set('m', { reason: 'the engine exited with code 1', retryInMs: 29_500 });
    s.queue.wake(1, ['m']);
    const res = await answer;
    expect(res.status).toBe(503);
    expect(res.json.error.code).toBe('GW_DEPLOYMENT_FAILED');
    expect(res.json.error.message).toBe(
      'model "m" has no replica: its last start failed (the engine exited with code 1) and none is starting; the next start is in about 30 s',
    );
    expect(res.headers['retry-after']).toBe('30');
    expect(res.headers[COLD_START_HEADER]).toBe('700');
    expect(s.queue.size).toBe(0);
    await eventually(() => s.results.length === 1, 2000, 'the after-call listener');
    expect(s.results[0]).toMatchObject({ outcome: 'errors', status: 503 });

    // Blocked: no attempt is due, so Retry-After is the gateway's; a new call never joins the queue.
    s.cold.failures.set('m', { reason: 'the engine exited with code 1' });
    const later = await call(s.url);
    expect(later.status).toBe(503);
    expect(later.json.error.message).toMatch(/no start is due until the deployment changes$/);
    expect(later.headers['retry-after']).toBe('4');
    expect(s.cold.wakes).toEqual(['m']);
    expect(s.queue.size).toBe(0);
    expect(metricValue(await s.metrics(), 'sluice_calls_rejected_total', { code: 'GW_DEPLOYMENT_FAILED' })).toBe(2);
  });

  it('asks for a replica once for a burst of waiting calls, and again for the next burst', async () => {
    const s = await setup();
    const answers = [0, 1, 2, 3, 4].map((i) => call(s.url, 'm', { 'sluice-flow': `client-${i}` }));
    await eventually(() => s.queue.waiting === 5, 10_000, 'five calls waiting');
    expect(s.cold.wakes).toEqual(['m']);
    s.runner('r1', ['m']);
    const done = await Promise.all(answers);
    expect(done.map((r) => r.status)).toEqual([200, 200, 200, 200, 200]);
    for (const r of done) expect(r.headers[COLD_START_HEADER]).toBe('0');
    // The replica goes away; the next call starts a burst of its own.
    s.runner('r1', ['other']);
    const later = call(s.url);
    await eventually(() => s.queue.waiting === 1, 10_000, 'the next call waiting');
    expect(s.cold.wakes).toEqual(['m', 'm']);
    s.runner('r2', ['m']);
    expect((await later).status).toBe(200);
    const page = await s.metrics();
    expect(metricValue(page, 'sluice_cold_start_calls_total', { model: 'm' })).toBe(6);
  });

  it('takes a call whose client hung up out of the queue at once, and its burst with it', async () => {
    const s = await setup();
    const client = new AbortController();
    const gone = call(s.url, 'm', {}, client.signal).catch(() => 'aborted');
    await eventually(() => s.queue.waiting === 1, 10_000, 'the call waiting');
    client.abort();
    expect(await gone).toBe('aborted');
    await eventually(() => s.queue.size === 0, 10_000, 'the call leaving the queue');
    await eventually(() => s.results.length === 1, 10_000, 'the after-call listener');
    expect(s.results[0]).toMatchObject({ outcome: 'cancelled', status: 0 });
    // No call of the burst is left: the next one asks for a replica again.
    const next = call(s.url);
    await eventually(() => s.queue.waiting === 1, 10_000, 'the next call waiting');
    expect(s.cold.wakes).toEqual(['m', 'm']);
    s.runner('r1', ['m']);
    expect((await next).status).toBe(200);
  });

  it('refuses a call for a model that is not deployed with 404 GW_UNKNOWN_MODEL, as without cold starts', async () => {
    const s = await setup();
    s.runner('r1', ['m']);
    const res = await call(s.url, 'nobody-deployed-me');
    expect(res.status).toBe(404);
    expect(res.json.error.code).toBe('GW_UNKNOWN_MODEL');
    expect(res.headers[COLD_START_HEADER]).toBeUndefined();
    expect(s.cold.wakes).toEqual([]);
    expect(s.queue.size).toBe(0);
  });

  it('places an ordinary call without asking the cold starts anything, and without the header', async () => {
    const s = await setup();
    s.runner('r1', ['m']);
    const res = await call(s.url);
    expect(res.status).toBe(200);
    expect(res.headers[COLD_START_HEADER]).toBeUndefined();
    expect(s.asked).toEqual([]);
    expect(s.cold.wakes).toEqual([]);
    const page = await s.metrics();
    expect(metricValue(page, 'sluice_cold_start_calls_total')).toBe(0);
  });

  it('refuses a call for a model no runner serves with 404 GW_UNKNOWN_MODEL when no cold starts were given', async () => {
    const s = await setup({}, false);
    s.runner('r1', ['other']);
    const res = await call(s.url);
    expect(res.status).toBe(404);
    expect(res.json.error.code).toBe('GW_UNKNOWN_MODEL');
    expect(s.queue.size).toBe(0);
  });

  it('answers a detached call that waited for a replica with its 202 carrying the wait', async () => {
    const s = await setup();
    const answer = call(s.url, 'm', { prefer: 'respond-async' });
    await eventually(() => s.queue.waiting === 1, 10_000, 'the call waiting');
    s.clock.advance(700);
    s.runner('r1', ['m']);
    const res = await answer;
    expect(res.status).toBe(202);
    expect(res.headers[COLD_START_HEADER]).toBe('700');
  });
});

describe('ColdStartWaits', () => {
  it('wakes once per burst, counts the calls waiting per model (in the queue), and reads a throwing reconciler as not deployed', async () => {
    const clock = new FakeClock();
    const queue = new WaitQueue({ maxQueued: 100, maxQueuedPerFlow: 100, retryAllDelay: 0, clock });
    // A call of `model` in its line, as placement has it when it begins to wait for a replica.
    const waiting = (model: string) => {
      const waiter = queue.waiter(
        { model, priority: 'interactive', flow: 'f' },
        new AbortController().signal,
        clock.now() + 60_000,
      );
      void waiter.wait();
      return waiter;
    };
    const cold = recordingColdStarts(['a', 'b']);
    const waits = new ColdStartWaits(cold, silentLogger);
    const [a1, a2, b1] = [waiting('a'), waiting('a'), waiting('b')];
    waits.begin(a1);
    waits.begin(a2);
    waits.begin(b1);
    // The same call's later wait counts it once.
    waits.begin(a1);
    expect(cold.wakes).toEqual(['a', 'b']);
    expect([queue.waitingForReplica('a'), queue.waitingForReplica('b'), queue.waitingForReplica('c')]).toEqual([
      2, 1, 0,
    ]);
    a1.leave();
    a2.leave();
    waits.begin(waiting('a'));
    expect(cold.wakes).toEqual(['a', 'b', 'a']);
    const broken = new ColdStartWaits(
      {
        deployed: () => {
          throw new Error('down');
        },
        wake: () => {
          throw new Error('down');
        },
      },
      silentLogger,
    );
    expect(broken.deployed('a')).toBe(false);
    expect(() => broken.begin(waiting('c'))).not.toThrow();
    expect(queue.waitingForReplica('c')).toBe(1);
  });
});
