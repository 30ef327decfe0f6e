import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import { createFixedTiming, type SimTimingModel } from '../../../../runner/engines/sim/timing.ts';
import { postJson, readEvents, readMetrics, startEngine } from './helpers.ts';

const chat = (content: string, extra: Record<string, unknown> = {}) => ({
  model: 'sim-small',
  messages: [{ role: 'user', content }],
  stream: true,
  ...extra,
});

describe('sim engine streaming', () => {
  it('writes one chunk per token as it is generated, then [DONE]', async () => {
    const itlMs = 20;
    const tokens = 10;
    // The last token waits a long gap: a body sent as generated has the first chunks out well
    // before it, a buffered one has them all at once. The gap, not the sum of many small gaps,
    // bounds the spread, so a busy machine's late reads cannot eat into it.
    const lastGapMs = 1500;
    const fixed = createFixedTiming({ ttftMs: 10, itlMs });
    const timing: SimTimingModel = {
      plan: (input) => {
        const schedule = fixed.plan(input);
        return {
          tokens: schedule.tokens,
          delayBefore: (index) => (index === schedule.tokens - 1 ? lastGapMs : schedule.delayBefore(index)),
        };
      },
    };
    const { url } = await startEngine({ ttftMs: 10, itlMs, outputTokens: tokens, timing });
    const res = await postJson(`${url}/v1/chat/completions`, chat('stream please'));
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toBe('text/event-stream');
    const events = await readEvents(res.body);
    expect(events.at(-1)?.data).toBe('[DONE]');
    const chunks = events.slice(0, -1).map((event) => JSON.parse(event.data));
    expect(chunks).toHaveLength(tokens + 1);
    expect(chunks[0]).toMatchObject({
      object: 'chat.completion.chunk',
      model: 'sim-small',
      choices: [{ index: 0, delta: { role: 'assistant' } }],
    });
    expect(chunks.slice(1, tokens).every((chunk) => chunk.choices[0].delta.role === undefined)).toBe(true);
    expect(chunks.slice(0, tokens).every((chunk) => chunk.choices[0].finish_reason === null)).toBe(true);
    expect(chunks.at(-1).choices[0]).toEqual({ index: 0, delta: {}, finish_reason: 'stop', logprobs: null });
    expect(new Set(chunks.map((chunk) => chunk.id)).size).toBe(1);
    // Had the body been buffered, every chunk would arrive within a millisecond or two.
    const spread = events[tokens - 1]!.at - events[0]!.at;
    expect(spread).toBeGreaterThanOrEqual(lastGapMs / 2);
  });

  it('streams the same text the non-streaming answer gives, and a usage chunk when asked', async () => {
    const { url } = await startEngine({ ttftMs: 5, itlMs: 2, outputTokens: 8 });
    const whole = await postJson(`${url}/v1/chat/completions`, { ...chat('same prompt'), stream: false });
    const expected = ((await whole.body.json()) as { choices: Array<{ message: { content: string } }> }).choices[0]!
      .message.content;
    const res = await postJson(
      `${url}/v1/chat/completions`,
      chat('same prompt', { max_tokens: 5, stream_options: { include_usage: true } }),
    );
    const chunks = (await readEvents(res.body)).slice(0, -1).map((event) => JSON.parse(event.data));
    const text = chunks.map((chunk) => chunk.choices[0]?.delta?.content ?? '').join('');
    expect(text).toBe(expected.split(' ').slice(0, 5).join(' '));
    expect(chunks.at(-2).choices[0].finish_reason).toBe('length');
    expect(chunks.at(-2).usage).toBeNull();
    expect(chunks.at(-1)).toMatchObject({
      choices: [],
      usage: { completion_tokens: 5, prompt_tokens: 4, total_tokens: 9 },
    });
  });

  it('streams text_completion chunks on /v1/completions', async () => {
    const { url } = await startEngine({ ttftMs: 5, itlMs: 2, outputTokens: 3 });
    const res = await postJson(`${url}/v1/completions`, { prompt: 'abc', stream: true });
    const events = await readEvents(res.body);
    const chunks = events.slice(0, -1).map((event) => JSON.parse(event.data));
    expect(chunks).toHaveLength(4);
    expect(chunks.every((chunk) => chunk.object === 'text_completion')).toBe(true);
    expect(chunks.at(-1).choices[0]).toMatchObject({ text: '', finish_reason: 'stop' });
    expect(events.at(-1)?.data).toBe('[DONE]');
  });
});

describe('sim engine admission', () => {
  it('makes a second call wait for the first when maxNumSeqs is 1', async () => {
    const ttftMs = 20;
    const itlMs = 10;
    const outputTokens = 6;
    const { url } = await startEngine({ ttftMs, itlMs, outputTokens, maxNumSeqs: 1 });
    const started = performance.now();
    const [first, second] = await Promise.all([
      postJson(`${url}/v1/chat/completions`, chat('one')).then(async (res) => ({
        head: performance.now(),
        events: await readEvents(res.body),
      })),
      postJson(`${url}/v1/chat/completions`, chat('two')).then(async (res) => ({
        head: performance.now(),
        events: await readEvents(res.body),
      })),
    ]);
    const run = ttftMs + (outputTokens - 1) * itlMs;
    const [early, late] = first.head < second.head ? [first, second] : [second, first];
    // The waiter's headers go out only once it holds a slot: after the first call's whole run.
    expect(late.head - started).toBeGreaterThanOrEqual(run - 5);
    expect(late.events[0]!.at).toBeGreaterThanOrEqual(early.events.at(-1)!.at);
  });

  it('answers 429 with Retry-After when the waiting queue is full', async () => {
    const { url, engine } = await startEngine({
      ttftMs: 10,
      itlMs: 200,
      outputTokens: 100,
      maxNumSeqs: 1,
      maxQueue: 1,
    });
    const holder = new AbortController();
    const running = await postJson(`${url}/v1/chat/completions`, chat('first'), holder.signal);
    // Of the next two, whichever reaches the engine second finds the one queue place taken;
    // the first call holds its slot for ~20 s, far longer than both take to arrive.
    const calls = [
      postJson(`${url}/v1/chat/completions`, { ...chat('second'), stream: false, max_tokens: 1 }),
      postJson(`${url}/v1/chat/completions`, { ...chat('third'), stream: false, max_tokens: 1 }),
    ];
    const refused = await Promise.race(calls);
    expect(refused.statusCode).toBe(429);
    expect(refused.headers['retry-after']).toBe('1');
    expect(refused.headers['sluice-engine-id']).toBe(engine.options.engineId);
    expect(await refused.body.json()).toEqual({
      error: { message: expect.stringContaining('queue is full'), type: 'Too Many Requests', param: null, code: 429 },
    });
    holder.abort();
    await running.body.dump().catch(() => undefined);
    const served = (await Promise.all(calls)).find((res) => res !== refused)!;
    expect(served.statusCode).toBe(200);
    await served.body.dump();
    expect(engine.stats()).toMatchObject({ received: 3, completed: 1, aborted: 1, rejected: 1 });
    expect((await readMetrics(url)).get('sluice_sim_requests_rejected_total')).toBe(1);
  });
});

describe('sim engine aborts', () => {
  it('counts a client abort mid-stream and frees the slot at once', async () => {
    const { url, engine } = await startEngine({ ttftMs: 10, itlMs: 200, outputTokens: 100, maxNumSeqs: 1 });
    const controller = new AbortController();
    const res = await postJson(`${url}/v1/chat/completions`, chat('long'), controller.signal);
    const iterator = res.body[Symbol.asyncIterator]();
    await iterator.next();
    controller.abort();
    await expect(iterator.next()).rejects.toThrow();

    // The aborted stream had ~20 s left; the next call must not wait for it. Half that
    // separates "freed at the abort" from "held to the end" whatever the machine's load.
    const started = performance.now();
    const next = await postJson(`${url}/v1/chat/completions`, { ...chat('next'), stream: false, max_tokens: 1 });
    expect(next.statusCode).toBe(200);
    await next.body.dump();
    expect(performance.now() - started).toBeLessThan(10_000);

    const metrics = await readMetrics(url);
    expect(metrics.get('sluice_sim_requests_aborted_total')).toBe(1);
    expect(metrics.get('sluice_sim_requests_completed_total')).toBe(1);
    expect(metrics.get('vllm:num_requests_running')).toBe(0);
    expect(engine.stats().running).toBe(0);
  });

  it('takes a call that is aborted while queued out of the queue', async () => {
    // The first call holds the slot for ~20 s: the queue is read while it still runs.
    const { url, engine } = await startEngine({ ttftMs: 10, itlMs: 200, outputTokens: 100, maxNumSeqs: 1 });
    const running = new AbortController();
    const first = await postJson(`${url}/v1/chat/completions`, chat('hold the slot'), running.signal);
    const queued = new AbortController();
    const waiting = postJson(`${url}/invoke/f`, {}, queued.signal);
    // Reading the gauge over HTTP is the only way to know the call reached the queue.
    while ((await readMetrics(url)).get('vllm:num_requests_waiting') !== 1);
    queued.abort();
    await expect(waiting).rejects.toThrow();
    while ((await readMetrics(url)).get('vllm:num_requests_waiting') !== 0);
    expect(engine.stats()).toMatchObject({ running: 1, waiting: 0, aborted: 1 });
    running.abort();
    await first.body.dump().catch(() => undefined);
  });

  it('aborts in-flight calls and drops idle keep-alive sockets on close', async () => {
    // ~20 s of stream: still in flight when the engine closes.
    const { url, engine } = await startEngine({ ttftMs: 5, itlMs: 200, outputTokens: 100 });
    await (await request(`${url}/health`)).body.dump();
    const res = await postJson(`${url}/v1/completions`, { prompt: 'x', stream: true });
    const reading = res.body.text();
    await engine.close();
    await expect(reading).rejects.toThrow();
    expect(engine.stats()).toMatchObject({ received: 1, aborted: 1, completed: 0, running: 0 });
    await engine.close();
  });
});
