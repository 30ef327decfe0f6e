/**
 * Calls through real processes: gateway -> runner -> simulated engine, all on 127.0.0.1.
 */
import { connect } from 'node:net';
import { afterAll, describe, expect, it } from 'vitest';
import { request } from 'undici';
import { chatBody, fleetForSuite, metrics, metricValue, postJson, startFleet } from '../../support/fleet.ts';
import type { Fleet } from '../../support/fleet.ts';

describe('gateway calls', () => {
  const suite = fleetForSuite({
    nodes: 2,
    engineArgs: ['--ttft-ms', '5', '--itl-ms', '25', '--output-tokens', '8'],
    gatewayArgs: ['--max-body-bytes', '4096', '--body-read-timeout', '300ms'],
  });

  it('returns an OpenAI chat completion for a sync call', async () => {
    const res = await postJson(`${suite.gw}/v1/chat/completions`, chatBody());
    expect(res.status).toBe(200);
    expect(res.json.object).toBe('chat.completion');
    expect(res.json.choices[0].message.role).toBe('assistant');
    expect(res.json.usage.completion_tokens).toBe(8);
    expect(res.headers['sluice-call-id']).toMatch(/^[0-9a-f-]{36}$/);
    expect(String(res.headers['sluice-runner-id'])).toMatch(/^runner-[12]$/);
  });

  it('serves completions, embeddings, /invoke and /v1/models', async () => {
    const completion = await postJson(
      `${suite.gw}/v1/completions`,
      JSON.stringify({ model: 'sim-small', prompt: 'hi', max_tokens: 2 }),
    );
    expect(completion.status).toBe(200);
    expect(completion.json.object).toBe('text_completion');
    const embedding = await postJson(
      `${suite.gw}/v1/embeddings`,
      JSON.stringify({ model: 'sim-small', input: ['a', 'b'] }),
    );
    expect(embedding.status).toBe(200);
    expect(embedding.json.data).toHaveLength(2);
    const invoke = await request(`${suite.gw}/invoke/resize`, {
      method: 'POST',
      body: 'raw bytes',
      headers: { 'content-type': 'application/octet-stream' },
    });
    expect(invoke.statusCode).toBe(200);
    expect(await invoke.body.json()).toMatchObject({ fn: 'resize', bytes: 9 });
    const models = await request(`${suite.gw}/v1/models`);
    expect(((await models.body.json()) as any).data.map((m: any) => m.id)).toEqual(['sim-small']);
  });

  it('answers health and readiness', async () => {
    expect((await request(`${suite.gw}/healthz`)).statusCode).toBe(200);
    const ready = await request(`${suite.gw}/readyz`);
    expect(ready.statusCode).toBe(200);
    expect(await ready.body.json()).toMatchObject({ ready: true });
  });

  describe('bad input', () => {
    it.each([
      ['malformed JSON', '{"model":', 400, 'GW_INVALID_JSON'],
      ['a body that is not an object', '[1,2]', 400, 'GW_INVALID_BODY'],
      ['a missing model', '{"messages":[]}', 400, 'GW_MISSING_MODEL'],
      ['an unknown model', '{"model":"no-such-model","messages":[]}', 404, 'GW_UNKNOWN_MODEL'],
      [
        'a body over the limit',
        JSON.stringify({ model: 'sim-small', pad: 'x'.repeat(5000) }),
        413,
        'GW_BODY_TOO_LARGE',
      ],
    ])('answers %s with its status and code', async (_what, body, status, code) => {
      const res = await postJson(`${suite.gw}/v1/chat/completions`, body);
      expect(res.status).toBe(status);
      expect(res.json.error.code).toBe(code);
      expect(typeof res.json.error.message).toBe('string');
      expect(typeof res.json.error.type).toBe('string');
    });

    it('answers 408 to a client that stalls mid-body, and keeps serving others', async () => {
      const { port } = new URL(suite.gw);
      const answer = await new Promise<string>((resolve, reject) => {
        const socket = connect(Number(port), '127.0.0.1');
        let data = '';
        socket.on('data', (d) => (data += d.toString()));
        socket.on('close', () => resolve(data));
        socket.on('error', reject);
        socket.write(
          'POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{"model":',
        );
      });
      expect(answer).toMatch(/^HTTP\/1.1 408/);
      expect(answer).toContain('GW_BODY_TIMEOUT');
      const after = await postJson(`${suite.gw}/v1/chat/completions`, chatBody());
      expect(after.status).toBe(200);
    });

    it('answers an unknown route 404 and a wrong method 405, in the same error shape', async () => {
      const missing = await request(`${suite.gw}/nope`);
      expect(missing.statusCode).toBe(404);
      expect(((await missing.body.json()) as any).error.code).toBe('GW_ROUTE_NOT_FOUND');
      const wrong = await request(`${suite.gw}/v1/chat/completions`);
      expect(wrong.statusCode).toBe(405);
      expect(((await wrong.body.json()) as any).error.code).toBe('GW_METHOD_NOT_ALLOWED');
    });
  });

  it('counts calls by outcome at /metrics', async () => {
    const page = await metrics(suite.fleet.gateway);
    expect(metricValue(page, 'sluice_calls_total')).toBeGreaterThanOrEqual(4);
    expect(metricValue(page, 'sluice_calls_completed_total')).toBeGreaterThanOrEqual(4);
    expect(metricValue(page, 'sluice_call_overhead_seconds_count', { outcome: 'completed' })).toBeGreaterThanOrEqual(4);
    // Requests refused before placement are counted by code, not as calls.
    expect(metricValue(page, 'sluice_calls_rejected_total', { code: 'GW_INVALID_JSON' })).toBe(1);
    expect(metricValue(page, 'sluice_calls_rejected_total', { code: 'GW_BODY_TIMEOUT' })).toBe(1);
  });
});

describe('gateway streaming', () => {
  // Four tokens 400 ms apart: a stream relayed as it comes spreads over about 1.2 s, one
  // collected and then sent arrives in one burst. Any stall shorter than the 600 ms slack below
  // (a busy machine's) only merges neighbouring chunks; it cannot make the spread vanish.
  const suite = fleetForSuite({ nodes: 1, engineArgs: ['--ttft-ms', '5', '--itl-ms', '400', '--output-tokens', '4'] });

  it('streams SSE chunks as the engine emits them, ending with [DONE]', async () => {
    const res = await request(`${suite.gw}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: chatBody({ stream: true }),
    });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toContain('text/event-stream');
    const arrivals: number[] = [];
    let text = '';
    for await (const chunk of res.body) {
      arrivals.push(performance.now());
      text += chunk.toString();
    }
    const events = text.split('\n\n').filter((e) => e.startsWith('data: '));
    expect(events.at(-1)).toBe('data: [DONE]');
    expect(events.length).toBeGreaterThanOrEqual(5);
    expect(arrivals.length).toBeGreaterThanOrEqual(2);
    expect(arrivals.at(-1)! - arrivals[0]!).toBeGreaterThan(3 * 400 - 600);
  });
});

describe('gateway latency', () => {
  let fleet: Fleet;
  afterAll(() => fleet?.stop());

  it('records latency net of the execution time the runner reported', async () => {
    // A second of execution per call: far more than a busy machine adds outside the gateway.
    const ttftMs = 1000;
    fleet = await startFleet({
      nodes: 1,
      engineArgs: ['--ttft-ms', String(ttftMs), '--itl-ms', '0', '--output-tokens', '1'],
    });
    let wallSum = 0;
    for (let i = 0; i < 3; i++) {
      const sent = performance.now();
      const res = await postJson(`${fleet.gateway.url}/v1/chat/completions`, chatBody());
      wallSum += performance.now() - sent;
      expect(res.status).toBe(200);
    }
    const page = await metrics(fleet.gateway);
    // The histograms are in seconds; the client's times here are in ms.
    const execCount = metricValue(page, 'sluice_runner_execution_seconds_count');
    const execSum = metricValue(page, 'sluice_runner_execution_seconds_sum') * 1000;
    const latencyCount = metricValue(page, 'sluice_call_overhead_seconds_count', { outcome: 'completed' });
    const latencySum = metricValue(page, 'sluice_call_overhead_seconds_sum', { outcome: 'completed' }) * 1000;
    expect(execCount).toBe(3);
    expect(latencyCount).toBe(3);
    expect(execSum / execCount).toBeGreaterThanOrEqual(ttftMs);
    // Each call's time in the gateway lies inside the time this client saw it take, so latency
    // net of execution is at most the client's time less the runner's reported execution; had
    // the gateway recorded the whole call, it would exceed that by the execution time.
    expect(latencySum).toBeLessThanOrEqual(wallSum - execSum);
    expect(latencySum).toBeGreaterThan(0);
  });
});
