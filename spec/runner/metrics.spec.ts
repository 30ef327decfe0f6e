/**
 * The runner's GET /metrics over real sockets on 127.0.0.1, with an in-process simulated engine:
 * admission and busy answers by reason, calls served, slots, the engine's state and its load as
 * read, and a resource that names the runner and nothing else. The page takes no credential,
 * as the runner's other GET routes (docs/security.md).
 */
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import { BUSY_HEADER } from '../../runner/protocol/index.ts';
import type { RunnerOptions } from '../../runner/options.ts';
import { eventually, metricValue } from '../support/fleet.ts';
import { serversForEach } from '../support/servers.ts';
import { startSimRunner } from '../support/sim-runner.ts';

const { cleanups } = serversForEach();

async function start(options: Partial<RunnerOptions> = {}): Promise<string> {
  const oneSlot = { id: 'r-metrics', slots: 1, loadInterval: 50, ...options };
  return (await startSimRunner(cleanups, oneSlot, { ttftMs: 1000, itlMs: 0, outputTokens: 1 })).runnerUrl;
}

const page = async (url: string): Promise<{ status: number; type: string; text: string }> => {
  const res = await request(`${url}/metrics`);
  return { status: res.statusCode, type: String(res.headers['content-type']), text: await res.body.text() };
};

const chat = JSON.stringify({ model: 'sim-small', messages: [{ role: 'user', content: 'hi' }] });
const post = (url: string) =>
  request(`${url}/v1/chat/completions`, {
    method: 'POST',
    body: chat,
    headers: { 'content-type': 'application/json' },
  });

describe('the runner GET /metrics', () => {
  it('counts calls admitted, busy answers by reason and calls served, with the slots', async () => {
    const url = await start();
    // The first scrape loads the SDK: done before the call, so the page answers fast while it runs.
    expect(metricValue((await page(url)).text, 'sluice_runner_calls_admitted_total')).toBe(0);
    const first = post(url);
    // The one slot is taken (for a second): the second call is answered busy.
    await eventually(
      async () => metricValue((await page(url)).text, 'sluice_runner_slots_in_use') === 1,
      5000,
      'the first call in its slot',
    );
    const second = await post(url);
    expect(second.statusCode).toBe(503);
    expect(second.headers[BUSY_HEADER]).toBe('slots');
    await second.body.dump();
    expect((await (await first).body.json()) as object).toMatchObject({ object: 'chat.completion' });

    const { status, type, text } = await page(url);
    expect(status).toBe(200);
    expect(type).toBe('text/plain; version=0.0.4; charset=utf-8');
    expect(metricValue(text, 'sluice_runner_calls_admitted_total')).toBe(1);
    expect(metricValue(text, 'sluice_runner_busy_total', { reason: 'slots' })).toBe(1);
    expect(metricValue(text, 'sluice_runner_calls_served_total')).toBe(1);
    expect(metricValue(text, 'sluice_runner_calls_failed_total')).toBe(0);
    expect(metricValue(text, 'sluice_runner_slots')).toBe(1);
    expect(metricValue(text, 'sluice_runner_slots_in_use')).toBe(0);
  });

  it('shows the engine state, one state at 1, and the engine load as read', async () => {
    const url = await start();
    await eventually(
      async () => (await page(url)).text.includes('sluice_runner_engine_kv_cache_usage_ratio'),
      5000,
      'the engine load read',
    );
    const { text } = await page(url);
    expect(metricValue(text, 'sluice_runner_engine_state', { state: 'ready' })).toBe(1);
    expect(metricValue(text, 'sluice_runner_engine_state')).toBe(1);
    expect(text).toMatch(/^sluice_runner_engine_running\{[^}]*\} 0$/m);
    expect(text).toMatch(/^sluice_runner_engine_waiting\{[^}]*\} 0$/m);
    // A runner behind an engine it did not launch has no restarts to report.
    expect(text).not.toContain('sluice_runner_engine_restarts');
  });

  it('names the runner in target_info and nothing of its host or command line', async () => {
    const url = await start();
    const info = (await page(url)).text.split('\n').filter((line) => line.startsWith('target_info{'));
    expect(info).toEqual([
      expect.stringMatching(
        /^target_info\{service_name="sluice-runner",service_version="[^"]+",service_instance_id="r-metrics"\} 1$/,
      ),
    ]);
  });

  it('answers without a credential on a runner whose calls need a signature', async () => {
    const url = await start({ callSecret: 'metrics-spec-call-secret-0123456789' });
    const unsigned = await post(url);
    expect(unsigned.statusCode).toBe(401);
    await unsigned.body.dump();
    const { status, text } = await page(url);
    expect(status).toBe(200);
    expect(metricValue(text, 'sluice_runner_calls_unauthorized_total')).toBe(1);
    expect(metricValue(text, 'sluice_runner_calls_admitted_total')).toBe(0);
  });
});
