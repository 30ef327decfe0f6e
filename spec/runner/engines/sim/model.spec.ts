import { describe, expect, it } from 'vitest';
import { postJson, readEvents, readEventsLive, readMetrics, startEngine, words, type TimedEvent } from './helpers.ts';

/** Sends a streaming completion and returns its events, stamped, and when it was sent. */
async function stream(url: string, prompt: string, extra: Record<string, unknown> = {}, signal?: AbortSignal): Promise<{ sentAt: number; events: TimedEvent[] }> {
  const sentAt = performance.now();
  const res = await postJson(`${url}/v1/completions`, { prompt, stream: true, ...extra }, signal);
  expect(res.statusCode).toBe(200);
  return { sentAt, events: await readEvents(res.body) };
}

const ttftOf = (run: { sentAt: number; events: TimedEvent[] }): number => run.events[0]!.at - run.sentAt;

/** Gaps between consecutive token events (the finish chunk and [DONE] excluded). */
const gapsOf = (events: TimedEvent[], tokens: number): number[] =>
  events.slice(1, tokens).map((event, index) => event.at - events[index]!.at);

const median = (values: number[]): number => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

describe('sim engine model: queueing', () => {
  it('includes the wait for a slot in the time to first token of a third call when maxNumSeqs is 2', async () => {
    const prefillOverheadMs = 30;
    const itlMs = 10;
    const outputTokens = 5;
    const { url, engine } = await startEngine({ prefillOverheadMs, itlMs, outputTokens, maxNumSeqs: 2 });
    const runs = await Promise.all([stream(url, 'one'), stream(url, 'two'), stream(url, 'three')]);
    const [a, b, late] = [...runs].sort((x, y) => x.events[0]!.at - y.events[0]!.at);
    const run = prefillOverheadMs + (outputTokens - 1) * itlMs;
    // The first two start at once; the third starts its prefill only when one of them has
    // finished, so its time to first token is a whole run of the slot's holder plus its own prefill.
    // (Measured from the send, which client-side delays can only lengthen; the gap between
    // chunk arrivals of different streams is not compared, as a busy client skews it either way.)
    expect(ttftOf(late!)).toBeGreaterThanOrEqual(run + prefillOverheadMs - 5);
    expect(ttftOf(a!)).toBeLessThan(ttftOf(late!));
    expect(ttftOf(b!)).toBeLessThan(ttftOf(late!));
    expect(engine.stats()).toMatchObject({ received: 3, completed: 3, rejected: 0 });
    const metrics = await readMetrics(url);
    expect(metrics.get('vllm:time_to_first_token_seconds_count')).toBe(3);
    // Measured by the engine from each call's arrival: at least the three prefills and the one wait.
    expect(metrics.get('vllm:time_to_first_token_seconds_sum')).toBeGreaterThanOrEqual((3 * prefillOverheadMs + run / 2) / 1000);
  });

  it('answers 429 once maxNumSeqs run and maxQueue wait', async () => {
    const { url, engine } = await startEngine({ profile: 'h100-8b', maxNumSeqs: 1, maxQueue: 1, itlMs: 1000, outputTokens: 100 });
    const holder = new AbortController();
    const running = await postJson(`${url}/v1/completions`, { prompt: 'first', stream: true }, holder.signal);
    const waiter = new AbortController();
    const waiting = postJson(`${url}/v1/completions`, { prompt: 'second', max_tokens: 1 }, waiter.signal).catch(() => undefined);
    while ((await readMetrics(url)).get('vllm:num_requests_waiting') !== 1);
    const refused = await postJson(`${url}/v1/completions`, { prompt: 'third', max_tokens: 1 });
    expect(refused.statusCode).toBe(429);
    expect(refused.headers['retry-after']).toBe('1');
    expect(await refused.body.json()).toMatchObject({ error: { type: 'Too Many Requests', code: 429 } });
    expect(engine.stats()).toMatchObject({ running: 1, waiting: 1, rejected: 1 });
    waiter.abort();
    holder.abort();
    await waiting;
    await running.body.dump().catch(() => undefined);
  });
});

describe('sim engine model: prefix cache', () => {
  it('returns a shorter time to first token for a repeated long prompt, and counts the hit', async () => {
    const prefillPerTokenMs = 0.5;
    const { url } = await startEngine({ prefillOverheadMs: 5, prefillPerTokenMs, itlMs: 1, outputTokens: 1 });
    const prompt = words(400);
    const first = await stream(url, prompt);
    const afterFirst = await readMetrics(url);
    expect(afterFirst.get('vllm:prefix_cache_queries_total')).toBe(400);
    expect(afterFirst.get('vllm:prefix_cache_hits_total')).toBe(0);
    const second = await stream(url, prompt);
    const afterSecond = await readMetrics(url);
    // 25 full blocks, but the last token is always computed: 24 blocks hit.
    expect(afterSecond.get('vllm:prefix_cache_queries_total')).toBe(800);
    expect(afterSecond.get('vllm:prefix_cache_hits_total')).toBe(384);
    expect(ttftOf(first)).toBeGreaterThanOrEqual(5 + 400 * prefillPerTokenMs - 2);
    // Uncached: 5 + 16 x 0.5 = 13 ms against 205 ms.
    expect(ttftOf(second)).toBeLessThan(ttftOf(first) / 2);
  });

  it('hits on the shared start of two chats that differ only in their last message', async () => {
    const { url, engine } = await startEngine({ itlMs: 0, prefillOverheadMs: 0 });
    const system = { role: 'system', content: words(100) };
    for (const question of ['what is a sluice?', 'what is a gate?']) {
      const res = await postJson(`${url}/v1/chat/completions`, { messages: [system, { role: 'user', content: question }], max_tokens: 1 });
      await res.body.dump();
    }
    // "system", ":", 100 words, then "user" ... : the first 6 blocks (96 tokens) are shared.
    expect(engine.stats().prefix.hits).toBe(96);
  });
});

describe('sim engine model: load', () => {
  // Timers never fire early but may fire late on a busy machine, so the model's figure is a
  // lower bound; the upper bounds only have to tell one load level from the next.
  it('slows every stream down by about the load factor when all slots are busy', async () => {
    const itlMs = 30;
    const outputTokens = 8;
    const { url } = await startEngine({ prefillOverheadMs: 5, itlMs, outputTokens, maxNumSeqs: 3, loadFactor: 3 });
    await stream(url, 'warm up', { max_tokens: 1 });
    const alone = median(gapsOf((await stream(url, 'alone')).events, outputTokens));
    const together = await Promise.all(['a', 'b', 'c'].map((prompt) => stream(url, prompt)));
    const loaded = median(together.flatMap((run) => gapsOf(run.events, outputTokens)));
    // With 3 of 3 running the formula gives 1 + (3 - 1) x (3 - 1) / (3 - 1) = 3 times the gap.
    expect(alone).toBeGreaterThanOrEqual(itlMs - 2);
    expect(alone).toBeLessThan(2 * itlMs);
    expect(loaded).toBeGreaterThanOrEqual(3 * itlMs - 2);
    expect(loaded).toBeLessThan(4 * itlMs);
  });

  it('slows a running stream down once others join it', async () => {
    const itlMs = 30;
    const outputTokens = 12;
    const { url } = await startEngine({ prefillOverheadMs: 5, itlMs, outputTokens, maxNumSeqs: 3, loadFactor: 3 });
    const res = await postJson(`${url}/v1/completions`, { prompt: 'first', stream: true });
    const events: TimedEvent[] = [];
    let joined: Promise<unknown> | undefined;
    for await (const event of readEventsLive(res.body)) {
      events.push(event);
      if (events.length === 3) joined = Promise.all([stream(url, 'b'), stream(url, 'c')]);
    }
    await joined;
    const gaps = gapsOf(events, outputTokens);
    // Alone for its first gaps; three running from about the fifth on.
    expect(median(gaps.slice(0, 2))).toBeLessThan(2 * itlMs);
    expect(median(gaps.slice(5))).toBeGreaterThanOrEqual(3 * itlMs - 2);
  });

  it('publishes the KV blocks running sequences hold over kvBlocks', async () => {
    const { url } = await startEngine({ prefillOverheadMs: 0, itlMs: 60_000, outputTokens: 10, kvBlocks: 10 });
    const controller = new AbortController();
    const res = await postJson(`${url}/v1/completions`, { prompt: words(40), stream: true }, controller.signal);
    const iterator = res.body[Symbol.asyncIterator]();
    await iterator.next();
    // 40 prompt tokens and 1 generated: ceil(41 / 16) = 3 of 10 blocks.
    expect((await readMetrics(url)).get('vllm:kv_cache_usage_perc')).toBeCloseTo(0.3, 9);
    controller.abort();
    await iterator.next().catch(() => undefined);
    while ((await readMetrics(url)).get('vllm:num_requests_running') !== 0);
    expect((await readMetrics(url)).get('vllm:kv_cache_usage_perc')).toBe(0);
  });
});
