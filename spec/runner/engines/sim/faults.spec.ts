import { request } from 'undici';
import { describe, expect, it, vi } from 'vitest';
import { postJson, readMetrics, scriptedRandom, startEngine } from './helpers.ts';

const fast = { prefillOverheadMs: 1, itlMs: 0, outputTokens: 2, engineId: 'sim-faults' };
const chat = { messages: [{ role: 'user', content: 'hi' }] };

/** One call of each kind, so a fault knob is seen to cover them all. */
const callEach = (url: string): Array<ReturnType<typeof postJson>> => [
  postJson(`${url}/v1/chat/completions`, chat),
  postJson(`${url}/v1/completions`, { prompt: 'hi', stream: true }),
  postJson(`${url}/v1/embeddings`, { input: 'hi' }),
  postJson(`${url}/invoke/f`, {}),
];

describe('sim engine faults: failure rates', () => {
  it.each([
    [429, { type: 'Too Many Requests', code: 429 }, '1'],
    [503, { type: 'Service Unavailable', code: 503 }, '1'],
    [500, { type: 'InternalServerError', code: 500 }, undefined],
  ] as const)('answers %i to every call at rate 1, before it takes a slot', async (status, error, retryAfter) => {
    const { url, engine } = await startEngine({ ...fast, failureRate: { [status]: 1 } });
    for (const res of await Promise.all([...callEach(url), ...callEach(url)])) {
      expect(res.statusCode).toBe(status);
      expect(res.headers['retry-after']).toBe(retryAfter);
      expect(res.headers['sluice-engine-id']).toBe('sim-faults');
      expect(await res.body.json()).toEqual({ error: { ...error, message: expect.any(String), param: null } });
    }
    expect(engine.stats()).toMatchObject({ received: 0, faults: { injected: { [status]: 8 } } });
    expect((await readMetrics(url)).get(`sluice_sim_injected_failures_total{status="${status}"}`)).toBe(8);
  });

  it('never fails a call at rate 0', async () => {
    const { url, engine } = await startEngine({ ...fast, failureRate: { 429: 0, 503: 0, 500: 0 } });
    for (let round = 0; round < 5; round += 1) {
      for (const res of await Promise.all(callEach(url))) {
        expect(res.statusCode).toBe(200);
        await res.body.dump();
      }
    }
    expect(engine.stats()).toMatchObject({ completed: 20, faults: { injected: { 429: 0, 503: 0, 500: 0 } } });
  });

  it('decides each call with one draw of random over the rates in order 429, 503, 500', async () => {
    const random = scriptedRandom([0.1, 0.3, 0.55, 0.65]);
    const { url } = await startEngine({ ...fast, random, failureRate: { 429: 0.2, 503: 0.3, 500: 0.1 } });
    const statuses: number[] = [];
    for (let call = 0; call < 4; call += 1) {
      const res = await postJson(`${url}/v1/completions`, { prompt: 'x' });
      statuses.push(res.statusCode);
      await res.body.dump();
    }
    expect(statuses).toEqual([429, 503, 500, 200]);
  });
});

describe('sim engine faults: startup delay', () => {
  it('answers 503 (model loading) on health, models and calls until the delay has passed, then 200', async () => {
    let now = 1_700_000_000_000;
    const { url, engine } = await startEngine({ ...fast, startupDelayMs: 4_500, clock: { now: () => now } });
    for (const res of [
      await request(`${url}/health`),
      await request(`${url}/v1/models`),
      ...(await Promise.all(callEach(url))),
    ]) {
      expect(res.statusCode).toBe(503);
      expect(res.headers['retry-after']).toBe('5');
      expect(await res.body.json()).toEqual({
        error: {
          type: 'Service Unavailable',
          code: 503,
          param: null,
          message: 'model sim-small is loading; retry later',
        },
      });
    }
    // A scraper still sees the engine, idle, while it loads.
    const metrics = await readMetrics(url);
    expect(metrics.get('sluice_sim_loading_rejected_total')).toBe(6);
    expect(metrics.get('vllm:num_requests_running')).toBe(0);

    now += 4_000;
    const almost = await request(`${url}/health`);
    expect([almost.statusCode, almost.headers['retry-after']]).toEqual([503, '1']);
    await almost.body.dump();

    now += 500;
    const health = await request(`${url}/health`);
    expect(health.statusCode).toBe(200);
    await health.body.dump();
    for (const res of await Promise.all(callEach(url))) {
      expect(res.statusCode).toBe(200);
      await res.body.dump();
    }
    expect(engine.stats()).toMatchObject({ received: 4, faults: { loading: 7 } });
  });
});

describe('sim engine faults: crash on call', () => {
  it('calls onCrash on the Nth call exactly once and leaves that call unanswered', async () => {
    const onCrash = vi.fn();
    const { url, engine } = await startEngine({ ...fast, crashOnCall: 3, onCrash });
    const outcomes: Array<number | 'dropped'> = [];
    for (let call = 1; call <= 5; call += 1) {
      try {
        const res = await postJson(`${url}/v1/completions`, { prompt: `call ${call}` });
        outcomes.push(res.statusCode);
        await res.body.dump();
      } catch {
        outcomes.push('dropped');
      }
      if (call === 2) expect(onCrash).not.toHaveBeenCalled();
    }
    expect(outcomes).toEqual([200, 200, 'dropped', 200, 200]);
    expect(onCrash).toHaveBeenCalledTimes(1);
    expect(engine.stats().faults.crashes).toBe(1);
  });

  it('counts only calls made once loaded, and ignores health and metrics', async () => {
    let now = 0;
    const onCrash = vi.fn();
    const { url } = await startEngine({
      ...fast,
      crashOnCall: 1,
      onCrash,
      startupDelayMs: 10,
      clock: { now: () => now },
    });
    await (await postJson(`${url}/v1/completions`, { prompt: 'early' })).body.dump();
    now = 10;
    await (await request(`${url}/health`)).body.dump();
    await (await request(`${url}/metrics`)).body.dump();
    expect(onCrash).not.toHaveBeenCalled();
    await expect(postJson(`${url}/v1/completions`, { prompt: 'first real call' })).rejects.toThrow();
    expect(onCrash).toHaveBeenCalledTimes(1);
  });

  it('by default drops every connection, in-flight streams included, and stops listening', async () => {
    const { url, engine } = await startEngine({ prefillOverheadMs: 0, itlMs: 60_000, outputTokens: 5, crashOnCall: 2 });
    const res = await postJson(`${url}/v1/completions`, { prompt: 'long', stream: true });
    const iterator = res.body[Symbol.asyncIterator]();
    await iterator.next();
    await expect(postJson(`${url}/v1/completions`, { prompt: 'crash' })).rejects.toThrow();
    await expect(iterator.next()).rejects.toThrow();
    await expect(request(`${url}/health`)).rejects.toMatchObject({ code: 'ECONNREFUSED' });
    await engine.close();
    expect(engine.stats()).toMatchObject({ running: 0, aborted: 1, faults: { crashes: 1 } });
  });
});
