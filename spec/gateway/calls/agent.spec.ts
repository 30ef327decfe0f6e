/**
 * gateway/calls/agent.ts, the LB agent. At unit level first, over a real client socket but with a
 * fake pool and a fake clock: placement, the net latency it records, and how a call that no
 * runner took ends. Then in-process over real sockets with real runners (moved here from
 * hooks.spec.ts): the call overrider, before/after call listeners, what goes over the wire to
 * runner and engine, and the latency sanity check.
 */
import { createServer } from 'node:http';
import type { IncomingHttpHeaders } from 'node:http';
import { PassThrough } from 'node:stream';
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import { LbAgent } from '../../../gateway/calls/agent.ts';
import { waitQueueFor } from '../../../gateway/calls/placement.ts';
import type { GatewayCall } from '../../../gateway/http/call.ts';
import { DetachedCalls } from '../../../gateway/detached/detached.ts';
import { GatewayError } from '../../../gateway/errors.ts';
import type { RunnerResponse } from '../../../gateway/fleet/http-runner.ts';
import { composeGatewayConfig } from '../../../gateway/server.ts';
import type { GatewayOptions } from '../../../gateway/options.ts';
import type { CallResult } from '../../../gateway/http/index.ts';
import type { GatewayPool } from '../../../gateway/fleet/pool.ts';
import type { Clock } from '../../../placer/kernel/index.ts';
import type { Runner, RunnerCall, TryExecResult } from '../../../placer/types.ts';
import { createGateway } from '../../../gateway/server.ts';
import { createPrometheusMetrics } from '../../../gateway/observe/telemetry.ts';
import { createJsonLogger } from '../../../placer/kernel/index.ts';
import { createConsistentHashPlacer } from '../../../placer/consistent-hash/index.ts';
import { CALL_ID_HEADER, CALL_TYPE_HEADER, FUNCTION_HEADER, TIMEOUT_HEADER } from '../../../runner/protocol/index.ts';
import { createRunner } from '../../../runner/server.ts';
import { chatBody, eventually, metricValue, postJson } from '../../support/fleet.ts';
import type { JsonAnswer } from '../../support/fleet.ts';
import { recordingEngine, serversForEach } from '../../support/servers.ts';

const { cleanups, listen } = serversForEach();

/** An OpenAI-ish engine that records the headers of every call it gets. */
async function recordingEngineAt(seen: IncomingHttpHeaders[]): Promise<string> {
  return listen(recordingEngine(seen, { status: 200, body: { object: 'chat.completion', choices: [] } }));
}

async function gatewayWith(runnerUrls: string[], options: Partial<GatewayOptions> = {}) {
  const gateway = createGateway({ runners: runnerUrls, ...options });
  const { url } = await gateway.listen();
  cleanups.push(() => gateway.close());
  return url;
}

async function realRunner(engine: string): Promise<string> {
  const runner = createRunner({ engine });
  const { url } = await runner.listen();
  cleanups.push(() => runner.close({ drainTimeout: 0 }));
  return url;
}

/** A clock the test moves: a runner "executes" by moving it, the walk's pauses move it too. */
function fakeClock(start = 1_700_000_000_000): Clock & { advance(ms: number): void } {
  let now = start;
  return {
    now: () => now,
    advance: (ms) => void (now += ms),
    sleep: (ms, signal) => {
      if (signal?.aborted) return Promise.reject(signal.reason);
      now += ms;
      return new Promise((resolve) => setImmediate(resolve));
    },
  };
}

/** A committed runner's answer: `body`, then a server-timing trailer of `execMs`. */
function answer(body: string, execMs: number): RunnerResponse {
  const stream = Object.assign(new PassThrough(), { text: async () => body });
  const trailers: Record<string, string> = {};
  setImmediate(() => {
    trailers['server-timing'] = `exec;dur=${execMs}`;
    stream.end(body);
  });
  return {
    statusCode: 200,
    headers: { 'content-type': 'application/json' },
    trailers,
    body: stream,
    opaque: null,
    context: {},
  } as unknown as RunnerResponse;
}

/** A pool of the given runners, all serving `m`. */
function poolOf(...runners: Runner<RunnerResponse>[]): GatewayPool {
  return {
    runners: () => runners,
    models: () => ['m'],
    serves: () => 'yes',
    ready: () => true,
    start: async () => {},
    close: async () => {},
  };
}

/** An agent serving POST /v1/chat/completions on port 0, with its metrics and every call's result. */
async function agentWith(pool: GatewayPool, options: Partial<GatewayOptions> = {}) {
  const telemetry = createPrometheusMetrics();
  cleanups.push(() => telemetry.shutdown());
  const results: CallResult[] = [];
  const config = composeGatewayConfig({
    pool,
    meterProvider: telemetry.meterProvider,
    listeners: [{ afterCall: (_call, result) => void results.push(result) }],
    ...options,
  });
  const detached = DetachedCalls.forGateway(config, config.logger);
  // The gateway's own wiring: the queue is made beside the agent and handed to it.
  const queue = waitQueueFor(config);
  const agent = new LbAgent(config, pool, detached, queue);
  const url = await listen(createServer((req, res) => void agent.serve('chat', undefined, req, res)));
  return { url: `${url}/v1/chat/completions`, agent, queue, results, metrics: () => telemetry.render() };
}

/** A runner that answers busy to every call. */
const alwaysBusy = (): Runner<RunnerResponse> => ({ id: 'r1', tryExec: async () => ({ kind: 'busy' }) });

/**
 * Checks a 503 refusal with `code` and Retry-After `retryAfter`, and that the after-call listener
 * heard it as the one server_busy call.
 */
async function expectServerBusy(
  res: JsonAnswer,
  results: CallResult[],
  code: string,
  retryAfter: string,
): Promise<void> {
  expect(res.status).toBe(503);
  expect(res.headers['retry-after']).toBe(retryAfter);
  expect(res.json.error.code).toBe(code);
  await eventually(() => results.length === 1, 10_000, 'the after-call listener');
  expect(results[0]).toMatchObject({ outcome: 'server_busy', status: 503 });
}

const body = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] });

describe('LbAgent (fake pool, fake clock)', () => {
  it('places the call, relays the answer, and records its latency net of the reported execution time', async () => {
    const clock = fakeClock();
    const offered: RunnerCall[] = [];
    const runner: Runner<RunnerResponse> = {
      id: 'r1',
      async tryExec(call): Promise<TryExecResult<RunnerResponse>> {
        offered.push(call);
        clock.advance(100);
        return { kind: 'placed', value: answer('{"ok":true}', 60) };
      },
    };
    const { url, results, metrics } = await agentWith(poolOf(runner), { clock });
    const res = await postJson(url, body);
    expect(res.status).toBe(200);
    expect(res.json).toEqual({ ok: true });
    expect(offered).toHaveLength(1);
    expect(offered[0]).toMatchObject({ fn: 'm', type: 'sync' });
    await eventually(() => results.length === 1, 10_000, 'the after-call listener');
    expect(results[0]).toEqual({
      outcome: 'completed',
      status: 200,
      runner: 'r1',
      execMs: 60,
      totalMs: 100,
      latencyMs: 40,
    });
    const page = await metrics();
    expect(metricValue(page, 'sluice_calls_completed_total')).toBe(1);
    expect(metricValue(page, 'sluice_call_overhead_seconds_sum', { outcome: 'completed' })).toBeCloseTo(0.04, 9);
    expect(metricValue(page, 'sluice_runner_execution_seconds_sum', { outcome: 'completed' })).toBeCloseTo(0.06, 9);
    expect(metricValue(page, 'sluice_calls_queued')).toBe(0);
    expect(metricValue(page, 'sluice_calls_running')).toBe(0);
    // The inference histograms: a JSON answer has a duration (on the fake clock) and no first token.
    const on = { gen_ai_request_model: 'm', sluice_runner_id: 'r1' };
    expect(metricValue(page, 'gen_ai_server_request_duration_sum', on)).toBe(0.1);
    expect(metricValue(page, 'gen_ai_server_time_to_first_token_count', on)).toBe(0);
    expect(metricValue(page, 'sluice_request_queue_wait_seconds_sum', on)).toBe(0);
  });

  it('answers 503 PLACER_TIMEOUT with Retry-After when no runner takes the call before the placer deadline', async () => {
    const runner = alwaysBusy();
    const { url, results, metrics } = await agentWith(poolOf(runner), {
      clock: fakeClock(),
      placerTimeout: 100,
      retryAfter: 3,
    });
    const res = await postJson(url, body);
    await expectServerBusy(res, results, 'PLACER_TIMEOUT', '3');
    const page = await metrics();
    expect(metricValue(page, 'sluice_calls_server_busy_total')).toBe(1);
    expect(metricValue(page, 'sluice_calls_queued')).toBe(0);
    expect(metricValue(page, 'sluice_calls_failed_total', { code: 'PLACER_TIMEOUT' })).toBe(1);
  });

  it('answers 503 GW_QUEUE_FULL with Retry-After at once when every runner is busy and the queue is at maxQueued', async () => {
    const runner = alwaysBusy();
    const { url, queue, results, metrics, agent } = await agentWith(poolOf(runner), { maxQueued: 1, retryAfter: 4 });
    const first = new AbortController();
    const waiting = request(url, { method: 'POST', body, signal: first.signal }).catch(() => undefined);
    await eventually(() => queue.waiting === 1, 10_000, 'the first call waiting');
    const res = await postJson(url, body, { 'sluice-flow': 'another' });
    await expectServerBusy(res, results, 'GW_QUEUE_FULL', '4');
    const page = await metrics();
    expect(metricValue(page, 'sluice_queue_refused_total', { scope: 'total' })).toBe(1);
    expect(metricValue(page, 'sluice_calls_rejected_total', { code: 'GW_QUEUE_FULL' })).toBe(1);
    expect(metricValue(page, 'sluice_queue_depth', { model: 'm', priority: 'interactive' })).toBe(1);
    // A refusal is counted once: in the rejected counter, not again among failed calls.
    expect(metricValue(page, 'sluice_calls_failed_total')).toBe(0);
    expect(agent.stats().errors.byCode).toEqual({ GW_QUEUE_FULL: 1 });
    first.abort();
    await waiting;
    await eventually(() => queue.size === 0, 10_000, 'the first call leaving the queue');
  });

  it('refuses a sluice-priority that names no class with 400 GW_INVALID_PRIORITY, before any offer', async () => {
    let offers = 0;
    const runner: Runner<RunnerResponse> = { id: 'r1', tryExec: async () => (offers++, { kind: 'busy' }) };
    const { url } = await agentWith(poolOf(runner), { clock: fakeClock() });
    const res = await postJson(url, body, { 'sluice-priority': 'urgent' });
    expect(res.status).toBe(400);
    expect(res.json.error.code).toBe('GW_INVALID_PRIORITY');
    expect(offers).toBe(0);
  });

  it('answers 500 GW_INTERNAL without the message of a placer that threw a plain error', async () => {
    const runner = alwaysBusy();
    const placer = {
      name: 'broken',
      order(): never {
        throw new Error('token s3cr3t in a message');
      },
    };
    const { url, results } = await agentWith(poolOf(runner), { clock: fakeClock(), placer });
    const res = await postJson(url, body);
    expect(res.status).toBe(500);
    expect(res.json.error).toMatchObject({ code: 'GW_INTERNAL', message: 'internal gateway error' });
    expect(JSON.stringify(res.json)).not.toContain('s3cr3t');
    await eventually(() => results.length === 1, 10_000, 'the after-call listener');
    expect(results[0]).toMatchObject({ outcome: 'errors', status: 500 });
  });

  it("ends a call whose client left during placement as cancelled, counted under Fn's name", async () => {
    let offered = false;
    const runner: Runner<RunnerResponse> = {
      id: 'r1',
      // Holds the offer until the call's signal fires: the client is gone by then.
      tryExec: (call) =>
        new Promise((resolve) => {
          offered = true;
          call.signal.addEventListener('abort', () => resolve({ kind: 'busy' }), { once: true });
        }),
    };
    const { url, results, metrics } = await agentWith(poolOf(runner), { clock: fakeClock() });
    const client = new AbortController();
    const gone = request(url, {
      method: 'POST',
      body,
      headers: { 'content-type': 'application/json' },
      signal: client.signal,
    }).catch(() => 'aborted');
    await eventually(() => offered, 10_000, 'the offer');
    client.abort();
    expect(await gone).toBe('aborted');
    await eventually(() => results.length === 1, 10_000, 'the after-call listener');
    expect(results[0]).toMatchObject({ outcome: 'cancelled', status: 0 });
    const page = await metrics();
    expect(metricValue(page, 'sluice_calls_canceled_total')).toBe(1);
    expect(metricValue(page, 'sluice_calls_queued')).toBe(0);
  });
});

describe('call hooks', () => {
  it('runs the overrider and before-call listeners after buffering, and after-call listeners with the result', async () => {
    const seen: IncomingHttpHeaders[] = [];
    const runner = await realRunner(await recordingEngineAt(seen));
    const events: string[] = [];
    let before: GatewayCall | undefined;
    let after: { call: GatewayCall; result: CallResult } | undefined;
    const url = await gatewayWith([runner], {
      placer: createConsistentHashPlacer(),
      overrideCall: (call) => {
        events.push(`override:${call.body.length > 0}`);
        return { key: `tenant-${call.fn}`, timeout: 5000 };
      },
      listeners: [
        { beforeCall: (call) => void (events.push('before'), (before = call)) },
        { afterCall: (call, result) => void (events.push('after'), (after = { call, result })) },
      ],
    });
    const res = await postJson(`${url}/v1/chat/completions`, chatBody());
    expect(res.status).toBe(200);
    await expect.poll(() => events).toEqual(['override:true', 'before', 'after']);
    expect(before!.key).toBe('tenant-sim-small');
    expect(before!.timeout).toBe(5000);
    // The runner by its own id, as its status says it, not by its URL.
    expect(after!.result).toMatchObject({
      outcome: 'completed',
      status: 200,
      runner: expect.stringMatching(/^runner-/),
    });
    expect(after!.result.latencyMs).toBeGreaterThanOrEqual(0);
    expect(after!.call.startedAt).toBeGreaterThanOrEqual(after!.call.createdAt);
    // The overridden timeout travels as the budget the runner enforces, relative to its arrival.
    expect(seen[0]![TIMEOUT_HEADER]).toBe('5000');
  });

  it('answers with the status of a SluiceError a before-call listener throws, and 500 for any other error', async () => {
    const runner = await realRunner(await recordingEngineAt([]));
    let refuse: Error = new GatewayError('AUTH_DENIED', 403, 'invalid_request_error', 'tenant over quota');
    const url = await gatewayWith([runner], {
      listeners: [
        {
          beforeCall: () => {
            throw refuse;
          },
        },
      ],
    });
    const denied = await postJson(`${url}/v1/chat/completions`, chatBody());
    expect(denied.status).toBe(403);
    expect(denied.json.error).toEqual({
      message: 'tenant over quota',
      type: 'invalid_request_error',
      code: 'AUTH_DENIED',
    });
    refuse = new TypeError('boom');
    const failed = await postJson(`${url}/v1/chat/completions`, chatBody());
    expect(failed.status).toBe(500);
    expect(failed.json.error.code).toBe('GW_LISTENER_FAILED');
  });

  it('keeps the client answer when an after-call listener throws', async () => {
    const runner = await realRunner(await recordingEngineAt([]));
    const url = await gatewayWith([runner], {
      listeners: [
        {
          afterCall: () => {
            throw new Error('audit sink down');
          },
        },
      ],
    });
    expect((await postJson(`${url}/v1/chat/completions`, chatBody())).status).toBe(200);
    expect((await postJson(`${url}/v1/chat/completions`, chatBody())).status).toBe(200);
  });
});

describe('the wire', () => {
  it('sends the call id, type, function, budget and trace context through the runner to the engine', async () => {
    const seen: IncomingHttpHeaders[] = [];
    const runner = await realRunner(await recordingEngineAt(seen));
    const url = await gatewayWith([runner]);
    const traceparent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
    const res = await postJson(`${url}/v1/chat/completions`, chatBody(), {
      traceparent,
      authorization: 'Bearer t',
      'sluice-session': 'conversation-7',
      'idempotency-key': 'k-1',
      'sluice-priority': 'batch',
      'sluice-flow': 'tenant-3',
    });
    expect(res.status).toBe(200);
    const headers = seen[0]!;
    expect(headers[CALL_ID_HEADER]).toBe(res.headers[CALL_ID_HEADER]);
    expect(headers[CALL_TYPE_HEADER]).toBe('sync');
    expect(headers[FUNCTION_HEADER]).toBe('sim-small');
    expect(headers[TIMEOUT_HEADER]).toBe('600000');
    expect(headers.traceparent).toContain('0af7651916cd43dd8448eb211c80319c');
    // The client's key is the gateway's to check; an engine's key is its runner's to send.
    expect(headers.authorization).toBeUndefined();
    // Gateway-only headers steer placement and detached calls; they are not the engine's.
    expect(headers['sluice-session']).toBeUndefined();
    expect(headers['idempotency-key']).toBeUndefined();
    expect(headers['sluice-priority']).toBeUndefined();
    expect(headers['sluice-flow']).toBeUndefined();
  });
});

describe('latency sanity check', () => {
  it('logs and does not record a call whose reported execution time exceeds its total', async () => {
    // A runner that claims the call ran far longer than it could have.
    const fakeRunner = await listen(
      createServer((req, res) => {
        if (req.url === '/status') return res.end(JSON.stringify({ models: ['sim-small'] }));
        req.resume();
        req.on('end', () => {
          res.writeHead(200, { 'content-type': 'application/json', trailer: 'server-timing' });
          res.write('{"object":"chat.completion"}');
          res.addTrailers({ 'server-timing': 'exec;dur=999999' });
          res.end();
        });
      }),
    );
    const telemetry = createPrometheusMetrics();
    cleanups.push(() => telemetry.shutdown());
    const lines: string[] = [];
    const url = await gatewayWith([fakeRunner], {
      meterProvider: telemetry.meterProvider,
      logger: createJsonLogger({ level: 'warn', write: (line) => lines.push(line) }),
    });
    expect((await postJson(`${url}/v1/chat/completions`, chatBody())).status).toBe(200);
    const page = await telemetry.render();
    expect(metricValue(page, 'sluice_calls_completed_total')).toBe(1);
    expect(metricValue(page, 'sluice_call_overhead_seconds_count')).toBe(0);
    expect(lines.some((l) => l.includes('runner reported more execution time than the call took'))).toBe(true);
  });
});
