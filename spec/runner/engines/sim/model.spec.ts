import { describe, expect, it } from 'vitest';
import {
  createSimTiming,
  loadScale,
  type SimTimingModel,
  type SimTimingOptions,
} from '../../../../runner/engines/sim/timing.ts';
import { postJson, readEvents, readEventsLive, readMetrics, startEngine, words, type TimedEvent } from './helpers.ts';

/** Sends a streaming completion and returns its events, stamped, and when it was sent. */
async function stream(
  url: string,
  prompt: string,
  extra: Record<string, unknown> = {},
  signal?: AbortSignal,
): Promise<{ sentAt: number; events: TimedEvent[] }> {
  const sentAt = performance.now();
  const res = await postJson(`${url}/v1/completions`, { prompt, stream: true, ...extra }, signal);
  expect(res.statusCode).toBe(200);
  return { sentAt, events: await readEvents(res.body) };
}

const ttftOf = (run: { sentAt: number; events: TimedEvent[] }): number => run.events[0]!.at - run.sentAt;

/** One delay the engine planned: for which call (in the order calls were planned), before which token, with how many running. */
interface PlannedDelay {
  readonly call: number;
  readonly index: number;
  readonly delay: number;
  readonly running: number;
}

/** The engine's own timing model over `profile` (no jitter), recording every delay it plans. */
function recordingTiming(profile: Partial<SimTimingOptions>): SimTimingModel & { planned: PlannedDelay[] } {
  const model = createSimTiming({
    prefillOverheadMs: 0,
    prefillPerTokenMs: 0,
    prefillJitterStdMs: 0,
    itlMs: 0,
    itlJitterStdMs: 0,
    loadFactor: 1,
    maxNumSeqs: 16,
    random: () => 0.5,
    ...profile,
  });
  const planned: PlannedDelay[] = [];
  let calls = 0;
  return {
    planned,
    plan(input) {
      const call = calls++;
      const schedule = model.plan(input);
      const running = typeof input.running === 'function' ? input.running : () => input.running as number;
      return {
        tokens: schedule.tokens,
        delayBefore(index) {
          const delay = schedule.delayBefore(index);
          planned.push({ call, index, delay, running: running() });
          return delay;
        },
      };
    },
  };
}

/** Resolves once `condition` holds, checking every 5 ms; fails after 10 s. */
async function until(condition: () => boolean): Promise<void> {
  for (const deadline = Date.now() + 10_000; !condition(); await new Promise((r) => setTimeout(r, 5))) {
    if (Date.now() > deadline) throw new Error('condition not met within 10 s');
  }
}

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
    expect(metrics.get('vllm:time_to_first_token_seconds_sum')).toBeGreaterThanOrEqual(
      (3 * prefillOverheadMs + run / 2) / 1000,
    );
  });

  it('answers 429 once maxNumSeqs run and maxQueue wait', async () => {
    const { url, engine } = await startEngine({
      profile: 'h100-8b',
      maxNumSeqs: 1,
      maxQueue: 1,
      itlMs: 1000,
      outputTokens: 100,
    });
    const holder = new AbortController();
    const running = await postJson(`${url}/v1/completions`, { prompt: 'first', stream: true }, holder.signal);
    const waiter = new AbortController();
    const waiting = postJson(`${url}/v1/completions`, { prompt: 'second', max_tokens: 1 }, waiter.signal).catch(
      () => undefined,
    );
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
    const timing = recordingTiming({ prefillOverheadMs: 5, prefillPerTokenMs, itlMs: 1 });
    const { url } = await startEngine({ prefillOverheadMs: 5, prefillPerTokenMs, itlMs: 1, outputTokens: 1, timing });
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
    // Timers never fire early, so the first call's wait is a lower bound a busy machine cannot break.
    expect(ttftOf(first)).toBeGreaterThanOrEqual(5 + 400 * prefillPerTokenMs - 2);
    // Uncached: 5 + 16 x 0.5 = 13 ms against 205 ms, as planned by the engine.
    expect(timing.planned.filter((delay) => delay.index === 0).map((delay) => delay.delay)).toEqual([
      5 + 400 * prefillPerTokenMs,
      5 + 16 * prefillPerTokenMs,
    ]);
    expect(ttftOf(second)).toBeGreaterThanOrEqual(5 + 16 * prefillPerTokenMs - 2);
  });

  it('hits on the shared start of two chats that differ only in their last message', async () => {
    const { url, engine } = await startEngine({ itlMs: 0, prefillOverheadMs: 0 });
    const system = { role: 'system', content: words(100) };
    for (const question of ['what is a sluice?', 'what is a gate?']) {
      const res = await postJson(`${url}/v1/chat/completions`, {
        messages: [system, { role: 'user', content: question }],
        max_tokens: 1,
      });
      await res.body.dump();
    }
    // "system", ":", 100 words, then "user" ... : the first 6 blocks (96 tokens) are shared.
    expect(engine.stats().prefix.hits).toBe(96);
  });
});

describe('sim engine model: load', () => {
  // The load model is checked on the delays the engine plans, each with the number of sequences
  // running when it was planned: wall-clock gaps on a busy machine stretch either way.
  const itlMs = 30;

  /** An engine of 3 slots slowing to 3 times itlMs when full, recording the delays it plans. */
  async function startLoaded() {
    const timing = recordingTiming({ prefillOverheadMs: 5, itlMs, loadFactor: 3, maxNumSeqs: 3 });
    const { url } = await startEngine({
      prefillOverheadMs: 5,
      itlMs,
      outputTokens: 200,
      maxNumSeqs: 3,
      loadFactor: 3,
      timing,
    });
    return { url, timing };
  }

  it('plans every gap at itlMs times the load scale, and 3 times itlMs with all 3 slots busy', async () => {
    const { url, timing } = await startLoaded();
    const streams = ['a', 'b', 'c'].map(() => new AbortController());
    const reads = streams.map((controller, index) =>
      stream(url, `p${index}`, {}, controller.signal).catch(() => undefined),
    );
    await until(() => timing.planned.some((delay) => delay.index > 0 && delay.running === 3));
    for (const controller of streams) controller.abort();
    await Promise.all(reads);
    const gaps = timing.planned.filter((delay) => delay.index > 0);
    // With 3 of 3 running the formula gives 1 + (3 - 1) x (3 - 1) / (3 - 1) = 3 times the gap.
    for (const gap of gaps) expect(gap.delay).toBeCloseTo(itlMs * loadScale(3, gap.running, 3), 9);
    expect(gaps.find((gap) => gap.running === 3)!.delay).toBeCloseTo(3 * itlMs, 9);
  });

  it('slows a running stream down once others join it', async () => {
    const { url, timing } = await startLoaded();
    const first = new AbortController();
    const res = await postJson(`${url}/v1/completions`, { prompt: 'first', stream: true }, first.signal);
    const others = [new AbortController(), new AbortController()];
    let joined: Promise<unknown> | undefined;
    let seen = 0;
    try {
      for await (const _ of readEventsLive(res.body)) {
        // Three tokens in, the others are sent; the first runs on until one of its gaps is planned with all three.
        if (++seen === 3)
          joined = Promise.all(
            others.map((controller, index) => stream(url, `o${index}`, {}, controller.signal).catch(() => undefined)),
          );
        if (timing.planned.some((delay) => delay.call === 0 && delay.running === 3)) break;
      }
    } finally {
      first.abort();
      for (const controller of others) controller.abort();
      await joined;
    }
    const firstGaps = timing.planned.filter((delay) => delay.call === 0 && delay.index > 0);
    // Alone for the gaps planned before the others were sent (token 3's is planned as token 2 goes out).
    expect(firstGaps.slice(0, 3).map((gap) => [gap.running, gap.delay])).toEqual([
      [1, itlMs],
      [1, itlMs],
      [1, itlMs],
    ]);
    // The same stream, read live: each gap is planned with the sequences running at that moment.
    expect(firstGaps.find((gap) => gap.running === 3)).toMatchObject({ delay: 3 * itlMs });
    for (const gap of firstGaps) expect(gap.delay).toBeCloseTo(itlMs * loadScale(3, gap.running, 3), 9);
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
