/**
 * SGLang's cache truth end to end on 127.0.0.1: two runners launch the simulated engine as a real
 * process publishing SGLang's KV events (pages of 1 and of 16 tokens, SGLang's own hashes), name
 * the blocks anew from their tokens and feed a real gateway placing with `kv-aware`. The gateway's
 * index holds exactly the blocks its PromptMapper names for the prompts each engine served, and
 * calls sharing a prefix go to the engine that holds it.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PromptMapper } from '../../gateway/tokens/index.ts';
import { createKvAwarePlacer } from '../../placer/index.ts';
import type { Placer, PromptCache, RunnerCall } from '../../placer/index.ts';
import { SLUICE_BIN } from '../../gateway/cli/entry.ts';
import { freePort } from '../../placer/kernel/processes.ts';
import { RUNNER_ID_HEADER } from '../../runner/protocol/index.ts';
import { createRunner } from '../../runner/server.ts';
import { asOperator, eventually, getJson, postJson } from '../support/fleet.ts';
import { registeringGateway } from '../support/registrations.ts';
import { SIM_ANNOUNCEMENT } from '../support/cache-announcement.ts';

const TOKEN = 'sglang-feed-spec-runner-token-0123456789';
const MODEL = 'sim-small';
const PAGE_SIZES = { 'r-page1': 1, 'r-page16': 16 } as const;

const cleanups: Array<() => Promise<unknown>> = [];
afterAll(async () => {
  while (cleanups.length > 0) await cleanups.pop()!().catch(() => {});
});

/** The cache view of each call kv-aware placed, in order. */
const views: Array<PromptCache | undefined> = [];
const kvAware = createKvAwarePlacer();
const spy: Placer = {
  ...kvAware,
  name: 'kv-aware',
  order(call: RunnerCall, runners) {
    views.push(call.cache);
    return kvAware.order(call, runners);
  },
};

let gw = '';

/** The gateway's GET /v1/stats. */
async function stats(): Promise<any> {
  const answer = await getJson(`${gw}/v1/stats`, asOperator);
  expect(answer.status, answer.text).toBe(200);
  return answer.json;
}

beforeAll(async () => {
  const gateway = registeringGateway(TOKEN, {
    placer: spy,
    // Only the engines' own events count: no placement is taken as held before its feed says so.
    cachePendingMs: 0,
    cacheFeedStaleAfterMs: 600_000,
    lostAfter: 600_000,
  });
  ({ url: gw } = await gateway.listen());
  cleanups.push(() => gateway.close());
  for (const [id, pageSize] of Object.entries(PAGE_SIZES)) {
    const runner = createRunner(
      {
        id,
        profile: {
          kind: 'sim',
          model: MODEL,
          port: await freePort(),
          args: ['--ttft-ms', '0', '--itl-ms', '0', '--kv-events-style', 'sglang', '--page-size', String(pageSize)],
        },
        simCommand: [process.execPath, SLUICE_BIN],
        gateways: [gw],
        runnerToken: TOKEN,
        cacheFeedInterval: 20,
      },
      { readInventory: async () => ({ gpus: [], source: 'none', reason: 'no GPUs in this spec' }) },
    );
    await runner.listen(0, '127.0.0.1');
    cleanups.push(() => runner.close({ drainTimeout: 0 }));
  }
  await eventually(
    async () => {
      const feeds = (await stats()).cacheTruth.runners as Array<{ engineFeed: string; known: boolean }>;
      return feeds.length === 2 && feeds.every((feed) => feed.engineFeed === 'live' && feed.known);
    },
    30_000,
    'both feeds live',
  );
}, 60_000);

const SYSTEMS = [
  'You answer questions about GPU clusters: queues, quotas and preemption, briefly. '.repeat(8),
  'You review pull requests for a storage engine and say what is wrong with each. '.repeat(8),
];
const messages = (system: string, question: string) => [
  { role: 'system', content: system },
  { role: 'user', content: question },
];

/** Sends a chat call; the runner that served it. */
async function ask(system: string, question: string): Promise<string> {
  const res = await postJson(
    `${gw}/v1/chat/completions`,
    JSON.stringify({ model: MODEL, max_tokens: 1, messages: messages(system, question) }),
  );
  expect(res.status, res.text).toBe(200);
  return String(res.headers[RUNNER_ID_HEADER]);
}

const mapper = new PromptMapper();
const keysOf = (system: string, question: string): readonly string[] =>
  mapper.blocksOf({ route: 'chat', messages: messages(system, question) }, SIM_ANNOUNCEMENT)!.keys;

/** Each runner's block count in the gateway's index. */
async function indexed(): Promise<Record<string, number>> {
  const feeds = (await stats()).cacheTruth.runners as Array<{ runner: string; blocks: number }>;
  return Object.fromEntries(feeds.map((feed) => [feed.runner, feed.blocks]));
}

describe('SGLang-style KV events, named anew by the runners, on a kv-aware gateway', () => {
  it('indexes exactly the blocks the gateway names for each prompt, and places a shared prefix where it is held', async () => {
    // One family per system prompt: the first call goes where load says; the two after it follow it.
    const served: Record<string, Set<string>> = { 'r-page1': new Set(), 'r-page16': new Set() };
    const homes: string[] = [];
    for (const system of SYSTEMS) {
      const home = await ask(system, 'first question');
      homes.push(home);
      for (const key of keysOf(system, 'first question')) served[home]!.add(key);
      const expected = () => Object.fromEntries(Object.entries(served).map(([id, keys]) => [id, keys.size]));
      await eventually(
        async () => JSON.stringify(await indexed()) === JSON.stringify(expected()),
        10_000,
        'the index holds the prompt',
      );
      for (const question of ['second question', 'third question']) {
        views.length = 0;
        expect(await ask(system, question)).toBe(home);
        // The gateway saw the home holding the system prompt's blocks: every leading block its
        // PromptMapper names for this call that the first call shared.
        const mine = keysOf(system, question);
        const first = keysOf(system, 'first question');
        let shared = 0;
        while (shared < mine.length && mine[shared] === first[shared]) shared += 1;
        expect(shared).toBeGreaterThanOrEqual(5);
        const view = views[0]!;
        expect((view.floor ?? 0) + (view.holders.get(home) ?? 0)).toBe(shared * 16);
        for (const key of mine) served[home]!.add(key);
        await eventually(
          async () => JSON.stringify(await indexed()) === JSON.stringify(expected()),
          10_000,
          'the index holds the call',
        );
      }
    }
  });
});
