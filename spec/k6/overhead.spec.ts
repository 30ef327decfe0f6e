import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { summarize } from '../../k6/driver/index.ts';
import {
  TRACED_GATEWAY,
  TRACED_RUNNER,
  TRACED_TARGET,
  cpuPerCall,
  formatCpuPerCall,
  formatKeysCost,
  formatTracingCost,
  overhead,
} from '../../k6/driver/scenarios/overhead.ts';
import type { CpuPerCall, OverheadRun } from '../../k6/driver/scenarios/overhead.ts';
import { createJsonLogger } from '../../placer/kernel/index.ts';
import { startService } from '../../gateway/cli/entry.ts';

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

describe('cpuPerCall', () => {
  // 10 % of a core for 1 s is 100 ms; over 1,000 calls, 100 us a call.
  const runs = [
    run('direct', 'closed', 1000, { driver: 50, engine: 10, runner: 20, gateway: 0.5, 'bare-proxy': 0.4 }),
    run('bare-proxy', 'closed', 1000, { driver: 50, engine: 10, runner: 20, gateway: 0.5, 'bare-proxy': 14 }),
    run('sluice', 'closed', 500, { driver: 40, engine: 5, runner: 10, gateway: 21, 'bare-proxy': 0.3 }),
    run('sluice', 'open', 100, { driver: 5, engine: 1, runner: 2, gateway: 3, 'bare-proxy': 0 }),
  ];

  it('pools each proxy over the runs of its own target only, and the runner and engine over every run of the mode', () => {
    const row = cpuPerCall(runs, 'closed');
    // runner: (200 + 200 + 100) ms over 2,500 calls; gateway: 210 ms over 500; bare proxy: 140 ms over 1,000.
    expect(row.usPerCall).toEqual({ engine: 100, runner: 200, gateway: 420, 'bare-proxy': 140 });
    expect(row.ratios['gateway/bare-proxy']).toBeCloseTo(3, 10);
    expect(row.ratios['runner/bare-proxy']).toBeCloseTo(200 / 140, 10);
  });

  it('returns NaN, not a ratio, for a process that carried no run of the mode', () => {
    const row = cpuPerCall(runs, 'open');
    expect(row.usPerCall.gateway).toBeCloseTo(300, 10);
    expect(row.usPerCall['bare-proxy']).toBeNaN();
    expect(row.ratios['gateway/bare-proxy']).toBeNaN();
    expect(row.usPerCall.driver).toBeUndefined();
  });

  it('prints a column per process and per ratio, and a dash for what is unknown', () => {
    const text = formatCpuPerCall([cpuPerCall(runs, 'closed'), cpuPerCall(runs, 'open')]);
    const [, header, , closed, open] = text.split('\n');
    expect(header!.split(/\s+/)).toEqual([
      'mode',
      'engine',
      'runner',
      'gateway',
      'bare-proxy',
      'gateway/bare-proxy',
      'runner/bare-proxy',
    ]);
    expect(closed!.split(/\s+/)).toEqual(['closed', '100', '200', '420', '140', '3.00x', '1.43x']);
    expect(open!.split(/\s+/)).toEqual(['open', '100', '200', '300', '-', '-', '-']);
  });
});

describe('overhead scenario on real processes', () => {
  it('measures the bare proxy beside the runner and the gateway, and prints their cpu per call and ratios', {
    timeout: 120_000,
  }, async () => {
    const out = await mkdtemp(join(tmpdir(), 'sluice-overhead-spec-'));
    let text = '';
    try {
      // The shortest bounded run: 1 s per target and mode, no warm-up, no nginx.
      await overhead.run(
        { duration: 1_000, warmup: 0, rounds: 1, connections: 4, rate: 100, nginx: false, out, logLevel: 'warn' },
        {
          env: process.env,
          startService,
          logger: createJsonLogger({ level: 'silent' }),
          write: (t) => void (text += t),
          progress: () => undefined,
        },
      );
      expect(text).toMatch(/^round\s+target\s+mode/m);
      expect(text).toMatch(/^closed\s+sluice\/bare-proxy\s/m);
      expect(text).toMatch(
        /^mode\s+engine\s+runner\s+gateway\s+bare-proxy\s+gateway\/bare-proxy\s+runner\/bare-proxy$/m,
      );
      expect(text).toMatch(/^closed(\s+\d+){4}\s+\d+\.\d\dx\s+\d+\.\d\dx$/m);
      const [json] = text.match(/\S+overhead-\S+\.json/) ?? [];
      const report = JSON.parse(await readFile(json!, 'utf8')) as {
        combined: { target: string; mode: string; ok: number; errors: number }[];
        cpuPerCall: CpuPerCall[];
      };
      for (const target of ['direct', 'bare-proxy', 'sluice']) {
        for (const mode of ['closed', 'open']) {
          const r = report.combined.find((c) => c.target === target && c.mode === mode);
          expect(r, `${target} ${mode}`).toBeDefined();
          expect(r!.ok).toBeGreaterThan(0);
          expect(r!.errors).toBe(0);
        }
      }
      const closed = report.cpuPerCall.find((r) => r.mode === 'closed')!;
      for (const name of ['engine', 'runner', 'gateway', 'bare-proxy'])
        expect(closed.usPerCall[name], name).toBeGreaterThan(0);
      expect(closed.ratios['gateway/bare-proxy']).toBeGreaterThan(0);
      expect(closed.ratios['runner/bare-proxy']).toBeGreaterThan(0);
    } finally {
      await rm(out, { recursive: true, force: true });
    }
  });
});

describe('formatKeysCost', () => {
  it("prints the keyed gateway's cpu per call minus the open gateway's, per mode", () => {
    const runs = [
      run('sluice', 'closed', 1000, { gateway: 30 }),
      run('sluice-keys', 'closed', 1000, { 'gateway-keys': 30.5 }),
      run('sluice', 'open', 100, { gateway: 3 }),
    ];
    const rows = (['closed', 'open'] as const).map((mode) => cpuPerCall(runs, mode));
    // 300 us against 305 us closed; open has no keyed run.
    expect(formatKeysCost(rows)).toBe(
      'cpu per call a client key and in-memory limits add to the gateway (gateway-keys minus gateway):\n  closed 5.0 us\n  open   - us',
    );
  });
});

// The traced pair (--tracing) against the untraced one, each over its own target's runs. The run
// on real processes is the bench's own (`npm run bench:overhead -- --tracing`); here, the arithmetic.
describe('the overhead scenario with --tracing', () => {
  // 10 % of a core for 1 s is 100 ms; over 1,000 calls, 100 us a call.
  const runs = [
    run('direct', 'closed', 1000, { runner: 10, gateway: 0, [TRACED_GATEWAY]: 0, [TRACED_RUNNER]: 0 }),
    run('sluice', 'closed', 500, { runner: 10, gateway: 20, [TRACED_GATEWAY]: 0.2, [TRACED_RUNNER]: 0.1 }),
    run(TRACED_TARGET, 'closed', 400, { runner: 0.1, gateway: 0.3, [TRACED_GATEWAY]: 20, [TRACED_RUNNER]: 12 }),
  ];

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
