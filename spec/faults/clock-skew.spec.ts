/**
 * Fault: a runner whose clock is ten minutes ahead. The deadline used to travel as an absolute
 * time, so such a runner stopped every call at once with a timeout and stayed in the pool; the
 * budget now travels as a relative time (`sluice-timeout`), which no clock can misread.
 *
 * The skew is real: the runner process runs under libfaketime (Debian's faketime package, which
 * .ci/run installs), with the wall clock moved and the monotonic clock left alone.
 */
import { existsSync, readdirSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { request } from 'undici';
import { startService } from '../../gateway/cli/entry.ts';
import type { ChildService } from '../../placer/kernel/processes.ts';
import { chatBody, metrics, metricValue, postJson } from '../support/fleet.ts';
import { commandLine } from '../support/command-line.ts';

const SKEW_S = 600;

/** libfaketime's path on this machine; throws with the install command when it is missing. */
function libfaketime(): string {
  for (const dir of ['/usr/lib', ...readdirSync('/usr/lib').map((d) => `/usr/lib/${d}`)]) {
    const path = `${dir}/faketime/libfaketime.so.1`;
    if (existsSync(path)) return path;
  }
  throw new Error('libfaketime is not installed: apt-get install -y faketime (.ci/run does this)');
}

describe('a runner whose clock is ten minutes ahead', () => {
  const services: ChildService[] = [];
  let engine: ChildService;
  let runner: ChildService;
  let gateway: ChildService;

  /** A gateway over the skewed runner that gives each call `callTimeout`. */
  const gatewayArgs = (callTimeout: string) =>
    commandLine('gateway', { runners: runner.url, 'call-timeout': callTimeout, 'log-level': 'warn' });

  beforeAll(async () => {
    engine = await startService(
      commandLine('sim-engine', { 'itl-ms': 20, 'ttft-ms': 0, 'output-tokens': 400, 'log-level': 'warn' }),
    );
    services.push(engine);
    runner = await startService(
      commandLine('runner', { engine: engine.url, 'engine-kind': 'sim', id: 'skewed', 'log-level': 'warn' }),
      {
        env: { ...process.env, LD_PRELOAD: libfaketime(), FAKETIME: `+${SKEW_S}`, FAKETIME_DONT_FAKE_MONOTONIC: '1' },
      },
    );
    services.push(runner);
    gateway = await startService(gatewayArgs('60s'));
    services.push(gateway);
  }, 60_000);
  afterAll(async () => {
    await Promise.all(services.map((s) => s.stop('SIGTERM', 5000)));
  });

  it('really is ahead', async () => {
    const res = await request(`${runner.url}/healthz`);
    await res.body.dump();
    const skew = Date.parse(String(res.headers.date)) - Date.now();
    expect(skew).toBeGreaterThan((SKEW_S - 60) * 1000);
  });

  it('runs calls to their end, each once', async () => {
    const before = metricValue(await metrics(engine), 'sluice_sim_requests_total');
    for (let i = 0; i < 5; i++) {
      const res = await postJson(`${gateway.url}/v1/chat/completions`, chatBody({ max_tokens: 5 }));
      expect(res.status).toBe(200);
      expect(res.json.object).toBe('chat.completion');
    }
    expect(metricValue(await metrics(engine), 'sluice_sim_requests_total') - before).toBe(5);
  });

  it('still stops a call at the end of its budget, counted from its arrival', async () => {
    const slow = await startService(gatewayArgs('800ms'));
    services.push(slow);
    const started = Date.now();
    const res = await postJson(`${slow.url}/v1/chat/completions`, chatBody({ max_tokens: 400 }));
    const elapsed = Date.now() - started;
    expect(res.status).toBe(504);
    expect(res.json.error.code).toBe('GW_CALL_TIMEOUT');
    // Neither at once (a deadline misread as past) nor late: about the budget.
    expect(elapsed).toBeGreaterThanOrEqual(700);
  });
});
