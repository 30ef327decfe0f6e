/**
 * A cold start over real processes: a gateway with `sim-small` deployed and no runner at all
 * takes a call and a streamed call for it, asks for a replica once, and holds both in the wait
 * queue; only then do a simulated engine and a runner start and register, and both calls
 * succeed carrying sluice-cold-start. The reconciler is stood in for by recordingColdStarts.
 */
import { request } from 'undici';
import { afterAll, describe, expect, it } from 'vitest';
import { startService } from '../../../gateway/cli/entry.ts';
import type { ChildService } from '../../../placer/kernel/processes.ts';
import { COLD_START_HEADER } from '../../../gateway/control/cold-start.ts';
import { recordingColdStarts } from '../../support/cold-starts.ts';
import { asOperator, chatBody, eventually, getJson, metricValue } from '../../support/fleet.ts';
import { createPrometheusMetrics } from '../../../gateway/observe/telemetry.ts';
import { registeringGateway } from '../../support/registrations.ts';

const TOKEN = 'cold-start-test-token-0123456789';
const started: ChildService[] = [];
const closers: Array<() => Promise<unknown>> = [];
afterAll(async () => {
  await Promise.all(started.map((s) => s.stop('SIGTERM', 5000)));
  for (const close of closers) await close().catch(() => {});
});

async function service(args: string[]): Promise<ChildService> {
  const s = await startService([...args, '--log-level', 'error'], {
    env: { ...process.env, SLUICE_RUNNER_TOKEN: TOKEN },
  });
  started.push(s);
  return s;
}

/** Sends a chat call; resolves with its status, the cold-start header and the whole body. */
async function send(url: string, extra: Record<string, unknown> = {}) {
  const res = await request(`${url}/v1/chat/completions`, {
    method: 'POST',
    body: chatBody({ max_tokens: 4, ...extra }),
    headers: { 'content-type': 'application/json' },
  });
  return {
    status: res.statusCode,
    cold: res.headers[COLD_START_HEADER],
    type: res.headers['content-type'],
    text: await res.body.text(),
  };
}

describe('a cold start on real processes', () => {
  it('holds calls for a deployed model with no runner until a runner started after them registers, then serves them with the wait', async () => {
    const cold = recordingColdStarts(['sim-small']);
    const telemetry = createPrometheusMetrics();
    closers.push(() => telemetry.shutdown());
    const gateway = registeringGateway(TOKEN, {
      heartbeatInterval: 200,
      placerTimeout: 60_000,
      coldStarts: cold,
      meterProvider: telemetry.meterProvider,
      renderMetrics: () => telemetry.render(),
    });
    const { url } = await gateway.listen();
    closers.push(() => gateway.close());

    const plain = send(url);
    const streamed = send(url, { stream: true });
    await eventually(
      async () => (await getJson(`${url}/v1/queue`, asOperator)).json.waiting === 2,
      10_000,
      'both calls waiting',
    );
    expect(cold.wakes).toEqual(['sim-small']);

    // The replica comes up only now, as the reconciler would start it.
    const engine = await service(['sim-engine', '--port', '0', '--ttft-ms', '0', '--itl-ms', '5']);
    await service([
      'runner',
      '--port',
      '0',
      '--id',
      'late',
      '--engine',
      engine.url,
      '--engine-kind',
      'sim',
      '--gateway',
      url,
      '--heartbeat-interval',
      '200ms',
    ]);

    const [a, b] = await Promise.all([plain, streamed]);
    expect(a.status).toBe(200);
    expect(JSON.parse(a.text).object).toBe('chat.completion');
    expect(b.status).toBe(200);
    expect(b.type).toMatch(/^text\/event-stream/);
    expect(b.text).toContain('data: [DONE]');
    for (const r of [a, b]) expect(Number(r.cold)).toBeGreaterThan(0);
    expect(cold.wakes).toEqual(['sim-small']);
    const page = await telemetry.render();
    expect(metricValue(page, 'sluice_cold_start_calls_total', { model: 'sim-small' })).toBe(2);
    expect(metricValue(page, 'sluice_cold_start_wait_seconds_count', { model: 'sim-small' })).toBe(2);
    expect((await getJson(`${url}/v1/queue`, asOperator)).json.waiting).toBe(0);
  }, 60_000);
});
