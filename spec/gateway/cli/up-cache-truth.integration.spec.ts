/**
 * Cache truth end to end through `sluice up` (real processes on 127.0.0.1): simulated engines
 * publish vLLM's KV events, their runners carry them to the gateway, and `kv-aware` places calls
 * sharing a long prefix where an engine holds it, whichever runner served it first; the engines'
 * reported cached tokens stand beside placement's predictions on /metrics.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startService } from '../../../gateway/cli/entry.ts';
import type { ChildService } from '../../../placer/kernel/processes.ts';
import { RUNNER_ID_HEADER } from '../../../runner/protocol/index.ts';
import {
  OPERATOR_TOKEN,
  asOperator,
  eventually,
  getJson,
  metricValue,
  metrics,
  postJson,
} from '../../support/fleet.ts';

const SYSTEM = 'You are the support assistant of a GPU cloud. Answer briefly, exactly and kindly. '.repeat(16);

let up: ChildService;
let tokens: string;

beforeAll(async () => {
  // up keeps its viewer token in a folder of the run's, which this spec makes and removes.
  tokens = await mkdtemp(join(tmpdir(), 'sluice-up-cache-'));
  up = await startService(
    // No pending placements: only the engines' own reports can bring calls back to a runner.
    ['up', '--port', '0', '--runners', '2', '--placer', 'kv-aware', '--cache-pending-ms', '0', '--log-level', 'warn'],
    {
      env: { ...process.env, XDG_RUNTIME_DIR: tokens, SLUICE_OPERATOR_TOKEN: OPERATOR_TOKEN },
    },
  );
}, 60_000);

afterAll(async () => {
  await up?.stop('SIGTERM', 15_000);
  await rm(tokens, { recursive: true, force: true });
});

/** A chat call on the shared system prompt; resolves to the runner that served it and the cached tokens reported. */
async function ask(question: string, system = SYSTEM): Promise<{ runner: string; cached: number }> {
  const res = await postJson(
    `${up.url}/v1/chat/completions`,
    JSON.stringify({
      model: 'sim-small',
      messages: [
        { role: 'system', content: system },
        { role: 'user', content: question },
      ],
    }),
  );
  expect(res.status).toBe(200);
  return {
    runner: String(res.headers[RUNNER_ID_HEADER]),
    cached: (res.json as any).usage.prompt_tokens_details.cached_tokens,
  };
}

describe('sluice up with kv-aware', () => {
  it('sends calls sharing a prefix to the runner whose engine holds it, and checks each placement', async () => {
    const first = await ask('How do I resize a volume?');
    expect(first.cached).toBe(0);
    // The engine's BlockStored events reach the gateway through the runner's feed.
    await eventually(
      async () => {
        const stats = (await getJson(`${up.url}/v1/stats`, asOperator)).json as any;
        return stats.cacheTruth.blocks > 0;
      },
      10_000,
      'the first call’s blocks in the gateway’s index',
    );
    // Six in a row on one runner of two: 1 in 64 by chance without the truth.
    const questions = ['Why was my job preempted?', 'Which regions have H100s?', 'Can I pause a node?'];
    for (const question of [...questions, ...questions.map((q) => `${q} Again.`)]) {
      const next = await ask(question);
      expect(next.runner).toBe(first.runner);
      expect(next.cached).toBeGreaterThanOrEqual(16 * 16);
    }
    const page = await metrics(up);
    const labels = { runner: first.runner };
    expect(metricValue(page, 'sluice_cache_checked_calls_total', labels)).toBeGreaterThanOrEqual(6);
    const reported = metricValue(page, 'sluice_cache_reported_tokens_total', labels);
    expect(reported).toBeGreaterThanOrEqual(6 * 16 * 16);
    expect(metricValue(page, 'sluice_cache_predicted_tokens_total', labels)).toBe(reported);
  });
});
