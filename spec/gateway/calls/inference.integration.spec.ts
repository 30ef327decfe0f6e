/**
 * Inference metrics end to end, in process over real sockets: a gateway with its own Prometheus
 * page, a real runner, and a simulated engine. A streamed call that asks for usage
 * (`stream_options.include_usage`) and a JSON call show up in the GenAI histograms of /metrics
 * and in GET /v1/stats, and the stream reaches the client untouched, usage chunk included.
 */
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createGateway } from '../../../gateway/server.ts';
import type { GatewayOptions } from '../../../gateway/options.ts';
import { createPrometheusMetrics } from '../../../gateway/observe/telemetry.ts';
import {
  OPERATOR_TOKEN,
  asOperator,
  chatBody,
  eventually,
  getJson,
  metricValue,
  postJson,
} from '../../support/fleet.ts';
import { startSimRunner } from '../../support/sim-runner.ts';
import type { Cleanups } from '../../support/sim-runner.ts';

/** The simulated engine's delay before the first token, ms: the TTFT the gateway sees is at least this. */
const TTFT_MS = 60;

const cleanups: Cleanups = [];
afterAll(async () => {
  while (cleanups.length > 0) await cleanups.pop()!().catch(() => {});
});

/** A gateway over `runnerUrl` with Prometheus metrics, it and its telemetry closed by `undo`. */
async function meteredGateway(
  undo: Cleanups,
  runnerUrl: string,
  options: Partial<GatewayOptions> = {},
): Promise<string> {
  const telemetry = createPrometheusMetrics();
  undo.push(() => telemetry.shutdown());
  const gateway = createGateway({
    runners: [runnerUrl],
    operatorTokens: [OPERATOR_TOKEN],
    meterProvider: telemetry.meterProvider,
    renderMetrics: telemetry.render,
    ...options,
  });
  const { url } = await gateway.listen();
  undo.push(() => gateway.close());
  return url;
}

let gw = '';
let runnerId = '';
beforeAll(async () => {
  const { runnerUrl } = await startSimRunner(cleanups, { id: 'r1' }, { ttftMs: TTFT_MS, itlMs: 5, outputTokens: 6 });
  gw = await meteredGateway(cleanups, runnerUrl);
  runnerId = (await getJson(`${gw}/v1/runners`, asOperator)).json.data[0].id;
});

describe('inference metrics on a gateway with a real runner and a simulated engine', () => {
  let streamed = '';
  let json: { usage: { prompt_tokens: number; completion_tokens: number } };

  beforeAll(async () => {
    const res = await request(`${gw}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: chatBody({ stream: true, stream_options: { include_usage: true }, max_tokens: 6 }),
    });
    expect(res.statusCode).toBe(200);
    streamed = await res.body.text();
    const answer = await postJson(`${gw}/v1/chat/completions`, chatBody({ max_tokens: 6 }));
    expect(answer.status).toBe(200);
    json = answer.json;
    expect((await postJson(`${gw}/v1/chat/completions`, chatBody({ model: 'no-such-model' }))).status).toBe(404);
  });

  it('passes the stream through untouched: the usage chunk, then [DONE]', () => {
    const events = streamed.trim().split('\n\n');
    expect(events.at(-1)).toBe('data: [DONE]');
    const last = JSON.parse(events.at(-2)!.slice('data: '.length));
    expect(last.choices).toEqual([]);
    expect(last.usage.completion_tokens).toBe(6);
    // Every chunk before it carries `usage: null`, as OpenAI sends them.
    expect(JSON.parse(events[0]!.slice('data: '.length)).usage).toBeNull();
  });

  it('shows the histograms and token counts on /metrics, per model and runner', async () => {
    const page = (await getJson(`${gw}/metrics`, asOperator)).text;
    const on = { gen_ai_request_model: 'sim-small', sluice_runner_id: runnerId };
    // TTFT and the time between events for the stream alone; duration and queue wait for both.
    expect(metricValue(page, 'gen_ai_server_time_to_first_token_count', on)).toBe(1);
    expect(metricValue(page, 'gen_ai_server_time_to_first_token_sum', on)).toBeGreaterThanOrEqual(TTFT_MS / 1000);
    expect(metricValue(page, 'gen_ai_server_time_per_output_token_count', on)).toBe(1);
    expect(metricValue(page, 'gen_ai_server_request_duration_count', on)).toBe(2);
    expect(metricValue(page, 'sluice_request_queue_wait_seconds_count', on)).toBe(2);
    // Neither call waited in the queue: a runner had a free slot for each.
    expect(metricValue(page, 'sluice_request_queue_wait_seconds_sum', on)).toBe(0);
    // Seconds, as the conventions say: a bucket boundary below one second exists.
    expect(page).toMatch(/gen_ai_server_time_to_first_token_bucket\{[^}]*le="0\.1"\}/);
    // Tokens: the stream's usage chunk and the JSON answer's usage block.
    const streamUsage = JSON.parse(streamed.trim().split('\n\n').at(-2)!.slice('data: '.length)).usage;
    expect(metricValue(page, 'gen_ai_client_token_usage_sum', { ...on, gen_ai_token_type: 'output' })).toBe(
      streamUsage.completion_tokens + json.usage.completion_tokens,
    );
    expect(metricValue(page, 'gen_ai_client_token_usage_sum', { ...on, gen_ai_token_type: 'input' })).toBe(
      streamUsage.prompt_tokens + json.usage.prompt_tokens,
    );
    expect(metricValue(page, 'gen_ai_client_token_usage_count', { ...on, gen_ai_token_type: 'output' })).toBe(2);
  });

  it('shows the TTFT per model, the calls and the errors by code in GET /v1/stats', async () => {
    const stats = await getJson(`${gw}/v1/stats`, asOperator);
    expect(stats.status).toBe(200);
    const { at, windowSeconds, calls, errors, models, queue } = stats.json;
    expect(typeof at).toBe('number');
    expect(windowSeconds).toBe(300);
    expect(calls.total).toBe(2);
    expect(calls.perSecond).toBeGreaterThan(0);
    expect(calls.byOutcome).toEqual({ completed: 2, cancelled: 0, timeouts: 0, errors: 0, server_busy: 0 });
    expect(errors.byCode).toEqual({ GW_UNKNOWN_MODEL: 1 });
    const model = models['sim-small'];
    expect(model.ttftMs.p50).toBeGreaterThanOrEqual(TTFT_MS);
    expect(model.ttftMs.p90).toBeGreaterThanOrEqual(model.ttftMs.p50);
    expect(model.series).toHaveLength(30);
    expect(model.series.reduce((n: number, p: { calls: number }) => n + p.calls, 0)).toBe(2);
    expect(queue).toEqual((await getJson(`${gw}/v1/queue`, asOperator)).json);
  });

  it('refuses GET /v1/stats without the operator token', async () => {
    const res = await getJson(`${gw}/v1/stats`);
    expect(res.status).toBe(401);
  });
});

describe('queue wait and failures by code, with a runner of one slot', () => {
  const local: Cleanups = [];
  afterAll(async () => {
    while (local.length > 0) await local.pop()!().catch(() => {});
  });

  it('records the wait of a call that queued behind another, and counts a placer timeout by code in /v1/stats', async () => {
    const one = { id: 'one-slot', slots: 1 };
    const { runnerUrl } = await startSimRunner(local, one, { ttftMs: 1000, itlMs: 0, outputTokens: 1 });
    const patient = await meteredGateway(local, runnerUrl, { placerTimeout: 30_000 });
    const hasty = await meteredGateway(local, runnerUrl, { placerTimeout: 100 });
    const busy = async () =>
      metricValue(await (await request(`${runnerUrl}/metrics`)).body.text(), 'sluice_runner_slots_in_use') === 1;

    // The first call takes the slot; the second waits in the queue for it, then runs.
    const first = postJson(`${patient}/v1/chat/completions`, chatBody());
    await eventually(busy, 5000, 'the first call in the slot');
    const second = postJson(`${patient}/v1/chat/completions`, chatBody());
    // Meanwhile another gateway, whose placer gives up after 100 ms, finds the slot taken (the
    // first call holds it for a second, the second one after it).
    const refused = await postJson(`${hasty}/v1/chat/completions`, chatBody());
    expect(refused.status).toBe(503);
    expect(refused.json.error.code).toBe('PLACER_TIMEOUT');
    expect((await first).status).toBe(200);
    expect((await second).status).toBe(200);

    const page = (await getJson(`${patient}/metrics`, asOperator)).text;
    expect(metricValue(page, 'sluice_request_queue_wait_seconds_count')).toBe(2);
    expect(metricValue(page, 'sluice_request_queue_wait_seconds_sum')).toBeGreaterThan(0);
    const stats = (await getJson(`${hasty}/v1/stats`, asOperator)).json;
    expect(stats.errors.byCode).toEqual({ PLACER_TIMEOUT: 1 });
    expect(stats.calls.byOutcome.server_busy).toBe(1);
    // A call no runner answered is not a call of the model's series.
    expect(stats.models).toEqual({});
    expect(
      metricValue((await getJson(`${hasty}/metrics`, asOperator)).text, 'sluice_calls_failed_total', {
        code: 'PLACER_TIMEOUT',
      }),
    ).toBe(1);
  });
});

describe('detached calls in GET /v1/stats', () => {
  it('counts a detached call accepted, then succeeded, and none left placing or running', async () => {
    const before = (await getJson(`${gw}/v1/stats`, asOperator)).json.detached;
    expect(before).toEqual({ queued: 0, running: 0, accepted: 0, succeeded: 0, failed: 0, cancelled: 0, expired: 0 });
    const accepted = await postJson(`${gw}/v1/chat/completions`, chatBody({ max_tokens: 6 }), {
      prefer: 'respond-async',
    });
    expect(accepted.status).toBe(202);
    await eventually(
      async () => (await getJson(`${gw}/v1/stats`, asOperator)).json.detached.succeeded === 1,
      10_000,
      'the detached call counted succeeded',
    );
    expect((await getJson(`${gw}/v1/stats`, asOperator)).json.detached).toEqual({
      queued: 0,
      running: 0,
      accepted: 1,
      succeeded: 1,
      failed: 0,
      cancelled: 0,
      expired: 0,
    });
  });
});
