/**
 * Cache truth end to end, over real sockets on 127.0.0.1: a gateway placing with `kv-aware`, two
 * real runners in front of scripted engines that report `cached_tokens`, registered (with their
 * cache announcement) and fed over HTTP by a scripted runner side, as a runner with KV events
 * would: calls sharing a long prefix go to the runner whose engine holds it, and the cached
 * tokens predicted there stand beside those its engine reported on /metrics and /v1/stats.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPrometheusMetrics } from '../../../gateway/observe/telemetry.ts';
import { PromptMapper } from '../../../gateway/tokens/index.ts';
import { createKvAwarePlacer } from '../../../placer/index.ts';
import { REGISTER_PATH, SIM_TOKENIZER, cacheFeedPath, packBlockKeys } from '../../../runner/protocol/index.ts';
import type { CacheAnnouncement, CacheUpdate, RunnerRegistration } from '../../../runner/protocol/index.ts';
import { createRunner } from '../../../runner/server.ts';
import { asOperator, eventually, getJson, metricValue, metrics, postJson } from '../../support/fleet.ts';
import { startScriptedEngine } from '../../support/scripted-engine.ts';
import { registeringGateway } from '../../support/registrations.ts';
import { SIM_ANNOUNCEMENT } from '../../support/cache-announcement.ts';

const RUNNER_TOKEN = 'cache-truth-spec-runner-token-0123456789';
const MODEL = 'sim-small';
const SYSTEM = 'You are the support assistant for a GPU cloud: be brief, exact and kind. '.repeat(12);
/** What engine A reports cached for every call; engine B reports none. */
const A_CACHED = 160;

const messages = (question: string) => [
  { role: 'system', content: SYSTEM },
  { role: 'user', content: question },
];

/** The bodies the engines were sent, in order. */
const sent: Array<Record<string, unknown>> = [];

/**
 * An engine answering every chat call with a usage block naming `cached` cached tokens; a streamed
 * call gets its usage chunk (and `"usage":null` on every other chunk) only when it asked, as vLLM.
 */
function engineAnswer(cached: number) {
  const usage = { prompt_tokens: 200, completion_tokens: 1, prompt_tokens_details: { cached_tokens: cached } };
  return (req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      sent.push(body);
      if (body.stream !== true) {
        res.setHeader('content-type', 'application/json');
        const choices = [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }];
        return res.end(JSON.stringify({ id: 'x', object: 'chat.completion', choices, usage }));
      }
      const asked = body.stream_options?.include_usage === true;
      const chunk = (fields: object) =>
        `data: ${JSON.stringify({ id: 'x', object: 'chat.completion.chunk', ...fields })}\n\n`;
      const delta = { choices: [{ index: 0, delta: { content: 'ok' }, finish_reason: 'stop' }] };
      res.setHeader('content-type', 'text/event-stream');
      res.write(chunk(asked ? { ...delta, usage: null } : delta));
      if (asked) res.write(chunk({ choices: [], usage }));
      res.end('data: [DONE]\n\n');
    });
  };
}

const cleanups: Array<() => Promise<unknown>> = [];
afterAll(async () => {
  while (cleanups.length > 0) await cleanups.pop()!().catch(() => {});
});

let gw = '';
const engines: Array<{ calls(): number }> = [];
const auth = { authorization: `Bearer ${RUNNER_TOKEN}` };

/** Registers runner `id` at `url` as a runner with a cache feed would. */
async function register(id: string, url: string): Promise<void> {
  const registration: RunnerRegistration & { cache: CacheAnnouncement } = {
    id,
    url,
    version: 'test',
    engines: [],
    models: [MODEL],
    slots: 4,
    gpus: { gpus: [], source: 'none' },
    ready: true,
    load: { slotsInUse: 0, slots: 4, queue: 0, models: {} },
    cache: SIM_ANNOUNCEMENT,
  };
  const answer = await postJson(`${gw}${REGISTER_PATH}`, JSON.stringify(registration), auth);
  expect(answer.status, answer.text).toBe(200);
}

async function feed(id: string, update: CacheUpdate) {
  return postJson(`${gw}${cacheFeedPath(id)}`, JSON.stringify(update), auth);
}

beforeAll(async () => {
  const telemetry = createPrometheusMetrics();
  cleanups.push(() => telemetry.shutdown());
  const gateway = registeringGateway(RUNNER_TOKEN, {
    placer: createKvAwarePlacer(),
    meterProvider: telemetry.meterProvider,
    renderMetrics: telemetry.render,
    // Nothing here heartbeats or sends keep-alives: time on a loaded machine must not expire them.
    heartbeatInterval: 60_000,
    lostAfter: 600_000,
    cacheFeedStaleAfterMs: 600_000,
    // Pending blocks stay pending for the whole spec, whatever the machine's pace.
    cachePendingMs: 600_000,
  });
  ({ url: gw } = await gateway.listen());
  cleanups.push(() => gateway.close());
  for (const [id, cached] of [
    ['r-a', A_CACHED],
    ['r-b', 0],
  ] as const) {
    const engine = await startScriptedEngine([MODEL], engineAnswer(cached));
    cleanups.push(() => engine.close());
    engines.push(engine);
    const runner = createRunner({ engine: engine.url, id });
    const { url } = await runner.listen();
    cleanups.push(() => runner.close({ drainTimeout: 0 }));
    await register(id, url);
  }
});

describe('placement from cache truth, on a gateway fed over HTTP', () => {
  it('places calls sharing a prefix where the engine holds it, and counts predicted beside reported', async () => {
    const blocks = new PromptMapper().blocksOf({ route: 'chat', messages: messages('first') }, SIM_ANNOUNCEMENT)!;
    // The system prompt's blocks: those every question below shares.
    const shared = blocks.keys.slice(0, 10);
    expect(
      (await feed('r-a', { epoch: 'a1', seq: 1, engineFeed: 'live', reset: true, stored: packBlockKeys(shared) }))
        .status,
    ).toBe(204);
    expect((await feed('r-b', { epoch: 'b1', seq: 1, engineFeed: 'live', reset: true })).status).toBe(204);
    const questions = ['How do I resize a volume?', 'Why was my job preempted?', 'Which regions have H100s?'];
    for (const question of questions) {
      const answer = await postJson(
        `${gw}/v1/chat/completions`,
        JSON.stringify({ model: MODEL, messages: messages(question) }),
      );
      expect(answer.status, answer.text).toBe(200);
    }
    expect(engines.map((e) => e.calls())).toEqual([3, 0]);

    // Each call is predicted the shared blocks r-a's feed reported, or more: the blocks of the
    // calls placed there before it count as pending (held) until its feed confirms them.
    const keysOf = (q: string) =>
      new PromptMapper().blocksOf({ route: 'chat', messages: messages(q) }, SIM_ANNOUNCEMENT)!.keys;
    const leading = (x: readonly string[], y: readonly string[]) => {
      let n = 0;
      while (n < x.length && x[n] === y[n]) n++;
      return n;
    };
    const predicted = questions.map(
      (q, i) => 16 * Math.max(shared.length, ...questions.slice(0, i).map((p) => leading(keysOf(q), keysOf(p)))),
    );
    expect(predicted[1]).toBeGreaterThan(predicted[0]!);
    const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
    const page = await metrics({ url: gw });
    const labels = { runner: 'r-a', model: MODEL };
    expect(metricValue(page, 'sluice_cache_checked_calls_total', labels)).toBe(3);
    expect(metricValue(page, 'sluice_cache_predicted_tokens_total', labels)).toBe(sum(predicted));
    expect(metricValue(page, 'sluice_cache_reported_tokens_total', labels)).toBe(3 * A_CACHED);
    expect(metricValue(page, 'sluice_cache_overpredicted_tokens_total', labels)).toBe(
      sum(predicted.map((p) => Math.max(0, p - A_CACHED))),
    );
    expect(metricValue(page, 'sluice_cache_underpredicted_tokens_total', labels)).toBe(
      sum(predicted.map((p) => Math.max(0, A_CACHED - p))),
    );
    expect(metricValue(page, 'sluice_cache_feed_known', { runner: 'r-a' })).toBe(1);
    expect(metricValue(page, 'sluice_cache_feed_updates_total', { runner: 'r-a', result: 'applied' })).toBe(1);

    const stats = (await getJson(`${gw}/v1/stats`, asOperator)).json.cacheTruth;
    // The placed calls' blocks beyond the shared ones are pending on r-a until its feed confirms them.
    expect(stats.runners.find((r: { runner: string }) => r.runner === 'r-a')).toMatchObject({
      known: true,
      engineFeed: 'live',
      blocks: 10,
    });
    expect(stats.runners.find((r: { runner: string }) => r.runner === 'r-a').pending).toBeGreaterThan(0);
    expect(stats.checks).toEqual([expect.objectContaining({ model: MODEL, runner: 'r-a', calls: 3 })]);
    const listed = (await getJson(`${gw}/v1/runners`, asOperator)).json.data;
    expect(listed.find((r: { id: string }) => r.id === 'r-a').cache).toMatchObject({
      tokenizer: SIM_TOKENIZER,
      blockSize: 16,
      known: true,
      blocks: 10,
    });
  });

  it('checks a detached call too, once its result is in', async () => {
    const body = JSON.stringify({ model: MODEL, messages: messages('Can I pause a node?') });
    const accepted = await postJson(`${gw}/v1/chat/completions`, body, { prefer: 'respond-async' });
    expect(accepted.status, accepted.text).toBe(202);
    const labels = { runner: 'r-a', model: MODEL };
    await eventually(
      async () => metricValue(await metrics({ url: gw }), 'sluice_cache_checked_calls_total', labels) === 4,
      10_000,
      'the detached call checked',
    );
    expect(engines.map((e) => e.calls())).toEqual([4, 0]);
    expect(metricValue(await metrics({ url: gw }), 'sluice_cache_reported_tokens_total', labels)).toBe(4 * A_CACHED);
  });

  it('asks a stream for the usage its client did not ask for, checks it, and keeps it from the client', async () => {
    const labels = { runner: 'r-a', model: MODEL };
    const checked = async () => metricValue(await metrics({ url: gw }), 'sluice_cache_checked_calls_total', labels);
    const before = await checked();
    const streams = [
      { stream: true },
      { stream: true, stream_options: { continuous_usage_stats: false } },
      { stream: true, stream_options: { include_usage: true } },
    ];
    const texts: string[] = [];
    for (const fields of streams) {
      const body = JSON.stringify({ model: MODEL, messages: messages('Where are my logs?'), ...fields });
      const answer = await postJson(`${gw}/v1/chat/completions`, body);
      expect(answer.status, answer.text).toBe(200);
      texts.push(answer.text);
    }
    // Every stream reached the engine asking for usage, the client's other options kept.
    expect(sent.slice(-3).map((b) => b.stream_options)).toEqual([
      { include_usage: true },
      { continuous_usage_stats: false, include_usage: true },
      { include_usage: true },
    ]);
    // The clients that did not ask got no usage; the one that asked got it.
    expect(texts.map((t) => t.includes('"usage"'))).toEqual([false, false, true]);
    expect(texts.every((t) => t.includes('"content":"ok"') && t.endsWith('data: [DONE]\n\n'))).toBe(true);
    expect(await checked()).toBe(before + 3);
  });

  it('answers a gap with 409 and takes the reset that follows', async () => {
    const gap = await feed('r-b', { epoch: 'b1', seq: 5, engineFeed: 'live' });
    expect(gap.status).toBe(409);
    expect(gap.json.error.code).toBe('GW_CACHE_FEED_OUT_OF_ORDER');
    expect((await feed('r-b', { epoch: 'b2', seq: 1, engineFeed: 'live', reset: true })).status).toBe(204);
    expect((await feed('r-b', { epoch: 'b2', seq: 2, engineFeed: 'live' })).status).toBe(204);
  });
});
