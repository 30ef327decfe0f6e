/**
 * The overhead scenario's tracing figures (--tracing): the traced pair's CPU per call against the
 * untraced pair's, each over its own target's runs. The run on real processes is the bench's own
 * (`npm run bench:overhead -- --tracing`); here, the arithmetic.
 */
import { describe, expect, it } from 'vitest';
import { summarize } from '../../k6/driver/index.ts';
import {
  TRACED_GATEWAY,
  TRACED_RUNNER,
  TRACED_TARGET,
  cpuPerCall,
  formatTracingCost,
} from '../../k6/driver/scenarios/overhead.ts';
import type { OverheadRun } from '../../k6/driver/scenarios/overhead.ts';

/** A run of `target` in `mode` that served `ok` calls in 1 s with the given CPU (% of one core). */
function run(target: string, mode: 'closed' | 'open', ok: number, cpu: Record<string, number>): OverheadRun {
  const s = summarize({
    target,
    mode,
    connections: 1,
    durationMs: 1000,
    elapsedMs: 1000,
    sent: ok,
    dropped: 0,
    latencies: [1],
    ttfb: [1],
    sendLag: [],
    statuses: { '200': ok },
    errors: {},
  });
  return { ...s, round: 1, cpu, cpuPerRequestUs: {} };
}

// 10 % of a core for 1 s is 100 ms; over 1,000 calls, 100 us a call.
const runs = [
  run('direct', 'closed', 1000, { runner: 10, gateway: 0, [TRACED_GATEWAY]: 0, [TRACED_RUNNER]: 0 }),
  run('sluice', 'closed', 500, { runner: 10, gateway: 20, [TRACED_GATEWAY]: 0.2, [TRACED_RUNNER]: 0.1 }),
  run(TRACED_TARGET, 'closed', 400, { runner: 0.1, gateway: 0.3, [TRACED_GATEWAY]: 20, [TRACED_RUNNER]: 12 }),
];

describe('the overhead scenario with --tracing', () => {
  it('pools the traced processes over the traced runs only, and leaves those runs out of the plain runner', () => {
    const row = cpuPerCall(runs, 'closed');
    // runner: (100 + 100) ms over 1,500 calls, not the traced run's 400; the traced pair: 200 and 120 ms over 400.
    expect(row.usPerCall.runner).toBeCloseTo(200_000 / 1500, 6);
    expect(row.usPerCall[TRACED_GATEWAY]).toBeCloseTo(500, 6);
    expect(row.usPerCall[TRACED_RUNNER]).toBeCloseTo(300, 6);
  });

  it('prints each side off and on, from the sluice and traced runs alone, with what tracing adds', () => {
    const text = formatTracingCost(runs, { exports: 3, bytes: 2_500_000 });
    // Off: gateway 200 ms and runner 100 ms over 500 calls; on: 200 and 120 ms over 400.
    expect(text).toContain('closed gateway 400 us off, 500 us on (+100 us); runner 200 us off, 300 us on (+100 us)');
    expect(text).toContain('received 3 exports, 2.5 MB');
  });
});
