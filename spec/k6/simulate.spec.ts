import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { BenchOptionError } from '../../k6/driver/index.ts';
import { calibrationHint, resolveSimulateOptions, simulate } from '../../k6/driver/scenarios/simulate.ts';
import {
  checkVerdict,
  compareRun,
  formatCheck,
  parseLiveReport,
  readLiveReport,
  relativeDifference,
} from '../../k6/driver/vsim/check.ts';
import type { ComparedRun, LiveRun } from '../../k6/driver/vsim/check.ts';
import { simulateRun } from '../../k6/driver/vsim/simulation.ts';
import { distribution } from '../../k6/driver/stats.ts';
import { PLACEMENT_WORKLOAD } from '../../k6/driver/workload.ts';
import { createJsonLogger } from '../../placer/kernel/index.ts';
import { H100_8B_PROFILE } from '../../runner/engines/sim/profiles.ts';
import { startService } from '../../gateway/cli/entry.ts';

const FIXTURE = fileURLToPath(new URL('./fixtures/placement-small.json', import.meta.url));

/** A run whose figures are given by their TTFT p50/p90/p99, tokens/s, errors and cache hit share. */
function runWith(
  contender: string,
  [p50, p90, p99]: number[],
  tokensPerSecond: number,
  errorCount: number,
  cacheHitShare: number,
): LiveRun {
  const ttft = { ...distribution([p50!]), p50: p50!, p90: p90!, p99: p99! };
  return {
    level: 0.5,
    rate: 20,
    seed: 100,
    firstSession: 2_000_000,
    contender,
    figures: {
      calls: 100,
      errors: errorCount ? { 'status 429': errorCount } : {},
      errorCount,
      ttft,
      latency: distribution([]),
      tokensPerSecond,
    },
    cacheHitShare,
  };
}

describe('relativeDifference', () => {
  it('returns (simulated - live) / live', () => {
    expect(relativeDifference(110, 100)).toBeCloseTo(0.1, 12);
    expect(relativeDifference(80, 100)).toBeCloseTo(-0.2, 12);
  });

  it('returns 0 when both are 0, and NaN when only live is 0 or either is unknown', () => {
    expect(relativeDifference(0, 0)).toBe(0);
    expect(relativeDifference(3, 0)).toBeNaN();
    expect(relativeDifference(Number.NaN, 5)).toBeNaN();
    expect(relativeDifference(5, Number.NaN)).toBeNaN();
  });
});

describe('compareRun', () => {
  it('marks each figure within 10% or not, and the run as agreeing only when all are', () => {
    const live = runWith('round-robin', [200, 400, 500], 1000, 0, 0.5);
    const simulated = runWith('round-robin', [220, 460, 450], 1000, 0, 0.55);
    const row = compareRun(live, { figures: simulated.figures, cacheHitShare: simulated.cacheHitShare });
    expect(row.figures.map((f) => [f.name, Math.round(f.difference * 1000) / 1000, f.within])).toEqual([
      ['ttft p50', 0.1, true],
      ['ttft p90', 0.15, false],
      ['ttft p99', -0.1, true],
      ['out tok/s', 0, true],
      ['errors', 0, true],
      ['cache hits', 0.1, true],
    ]);
    expect(row.agrees).toBe(false);
  });

  it('counts errors the simulation has and the live run does not as a difference it cannot size', () => {
    const row = compareRun(runWith('nginx least_conn', [1, 1, 1], 1, 0, 0.5), {
      figures: runWith('x', [1, 1, 1], 1, 4, 0.5).figures,
      cacheHitShare: 0.5,
    });
    const errors = row.figures.find((f) => f.name === 'errors')!;
    expect(errors.difference).toBeNaN();
    expect(errors.within).toBe(false);
  });
});

describe('formatCheck and checkVerdict', () => {
  const agreeing = compareRun(runWith('round-robin', [200, 400, 500], 1000, 0, 0.5), {
    figures: runWith('round-robin', [205, 410, 490], 990, 0, 0.52).figures,
    cacheHitShare: 0.52,
  });
  const differing = compareRun(runWith('least-loaded', [200, 400, 500], 1000, 0, 0.5), {
    figures: runWith('least-loaded', [300, 410, 490], 990, 0, 0.52).figures,
    cacheHitShare: 0.52,
  });

  it('prints a table per run with live, simulated, the difference and the mark', () => {
    const text = formatCheck([agreeing, differing]);
    expect(text).toContain('50% round-robin (20.0 calls/s, seed 100): agrees');
    expect(text).toContain('50% least-loaded (20.0 calls/s, seed 100): differs');
    expect(text).toMatch(/ttft p50\s+200\s+300\s+\+50\.0%\s+no/);
    expect(text).toMatch(/cache hits\s+50\.0%\s+52\.0%\s+\+4\.0%\s+yes/);
  });

  it('sums up runs that agree and figures within 10% by kind in one line', () => {
    const verdict = checkVerdict([agreeing, differing]);
    expect(verdict).not.toContain('\n');
    expect(verdict).toContain('does not agree');
    expect(verdict).toContain('(1 of 2 runs do)');
    expect(verdict).toContain('11 of 12 figures');
    expect(verdict).toContain('ttft p50 1/2');
    expect(checkVerdict([agreeing])).toContain('simulation agrees');
  });

  it('suggests the hops that would close the gap at the lowest level', () => {
    const rows: ComparedRun[] = [agreeing, differing];
    expect(calibrationHint(rows, { sluiceHopMs: 10, nginxHopMs: 1 })).toContain(
      'sluice -52.5 ms (--sluice-hop-ms 0.0 would close it), nginx -',
    );
  });
});

describe('readLiveReport', () => {
  it('reads a placement report, a null written for NaN reading as NaN', async () => {
    const report = await readLiveReport(FIXTURE);
    expect(report.fleet).toMatchObject({ engines: 8, slots: 16, profileName: 'h100-8b' });
    expect(report.runs.map((r) => r.contender)).toEqual(['round-robin', 'nginx least_conn']);
    expect(report.runs[1]!.cacheHitShare).toBeNaN();
    expect(report.runs[1]!.figures.ttft.mean).toBeNaN();
    expect(report.runs[1]!.figures.errorCount).toBe(2);
  });

  it('throws BenchOptionError for check naming what is missing', async () => {
    await expect(readLiveReport('/nonexistent/placement.json')).rejects.toThrow(/check: cannot read/);
    expect(() => parseLiveReport({ scenario: 'streaming' }, 'x.json')).toThrow(BenchOptionError);
    const json = JSON.parse(await readFile(FIXTURE, 'utf8')) as { runs: { seed: unknown }[] };
    json.runs[0]!.seed = 'one';
    expect(() => parseLiveReport(json, 'x.json')).toThrow(/runs\[0\]\.seed is not an integer/);
  });
});

describe('resolveSimulateOptions', () => {
  it('fills in the defaults: 1,000 runners, every contender, one level, about a million calls in all', () => {
    const o = resolveSimulateOptions({});
    expect(o.runners).toBe(1_000);
    // The six placers, prefix-affinity with a sized index, the oracle, and nginx's two balancers.
    expect(o.contenders).toHaveLength(10);
    expect(o.workload).toBe('placement');
    expect(o.gateways).toEqual([1]);
    expect(o.ttftTargetMs).toBe(1_000);
    expect(o.feedDelayMs).toBe(50);
    expect(o.cacheDemand).toBe(0.73);
    expect(o.kvAware).toEqual({});
    expect(resolveSimulateOptions({ kvAware: { loadWeight: 2 } }).kvAware).toEqual({ loadWeight: 2 });
    expect(o.levels).toEqual([0.8]);
    expect(o.calls * o.contenders.length * o.levels.length).toBeGreaterThanOrEqual(1_000_000);
    expect(o.hops).toEqual({ sluiceHopMs: 10, nginxHopMs: 1 });
  });

  it('reads numbers given as strings, as the command line gives them', () => {
    const o = resolveSimulateOptions({
      runners: '16',
      levels: ['1', '0.5'],
      contenders: ['nginx least_conn', 'round-robin'],
    });
    expect(o.runners).toBe(16);
    expect(o.levels).toEqual([0.5, 1]);
    expect(o.contenders).toEqual(['round-robin', 'nginx least_conn']);
    expect(resolveSimulateOptions({ gateways: ['3', '1'] }).gateways).toEqual([1, 3]);
  });

  it.each([
    [{ runners: 0 }, 'runners'],
    [{ runners: 'many' }, 'runners'],
    [{ calls: 10 }, 'calls'],
    [{ levels: ['x'] }, 'levels'],
    [{ levels: [3] }, 'levels'],
    [{ contenders: ['random'] }, 'contenders'],
    [{ sluiceHopMs: -1 }, 'sluiceHopMs'],
    [{ capacity: 0 }, 'capacity'],
    [{ workload: 'sessions' }, 'workload'],
    [{ gateways: [0] }, 'gateways'],
    [{ gateways: [] }, 'gateways'],
    [{ ttftTarget: 0 }, 'ttftTarget'],
    [{ feedDelayMs: -5 }, 'feedDelayMs'],
    [{ cacheDemand: 3 }, 'cacheDemand'],
    [{ kvAware: { loadWeight: -1 } }, 'kvAware'],
    [{ kvAware: JSON.parse('{"bogus":1}') }, 'kvAware'],
    [{ kvAware: JSON.parse('[]') }, 'kvAware'],
  ])('throws BenchOptionError naming the option for %j', (raw, option) => {
    let caught: unknown;
    try {
      resolveSimulateOptions(raw);
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(BenchOptionError);
    expect((caught as BenchOptionError).option).toBe(option);
  });
});

describe('simulate --check', () => {
  it("agrees exactly with a report of the simulator's own runs: same runs, same seeds, same figures", async () => {
    const out = await mkdtemp(join(tmpdir(), 'sluice-simulate-'));
    let text = '';
    try {
      const fixture = JSON.parse(await readFile(FIXTURE, 'utf8')) as {
        runs: LiveRun[];
        warmupMs: number;
        measureMs: number;
      };
      for (const run of fixture.runs) {
        const own = await simulateRun({
          shape: PLACEMENT_WORKLOAD,
          fleet: { runners: 8, slots: 16, profile: H100_8B_PROFILE },
          contender: run.contender,
          rate: run.rate,
          seed: run.seed,
          firstSession: run.firstSession,
          warmupMs: fixture.warmupMs,
          measureMs: fixture.measureMs,
        });
        Object.assign(run, { figures: own.figures, cacheHitShare: own.cacheHitShare });
      }
      const path = join(out, 'own.json');
      await writeFile(path, JSON.stringify(fixture));
      await simulate.run({ check: path, out } as never, {
        env: {},
        logger: createJsonLogger({ level: 'silent' }),
        startService,
        write: (t) => (text += t),
        progress: () => {},
      });
      expect(text).toContain(
        'simulation agrees with the live run within 10% on every figure (2 of 2 runs do); 12 of 12 figures',
      );
      expect(text).toContain('+0.0%');
    } finally {
      await rm(out, { recursive: true, force: true });
    }
  });

  it('simulates every run of the report and prints the comparison, the verdict and the files', async () => {
    const out = await mkdtemp(join(tmpdir(), 'sluice-simulate-'));
    let text = '';
    try {
      const { files } = await simulate.run({ check: FIXTURE, out } as never, {
        env: {},
        logger: createJsonLogger({ level: 'silent' }),
        startService,
        write: (t) => (text += t),
        progress: () => {},
      });
      expect(text).toContain('50% round-robin (20.0 calls/s, seed 100)');
      expect(text).toContain('50% nginx least_conn (20.0 calls/s, seed 100)');
      expect(text).toMatch(/^verdict: the 8-runner simulation /m);
      expect(files).toHaveLength(2);
      const report = JSON.parse(await readFile(files[0]!, 'utf8')) as { rows: unknown[] };
      expect(report.rows).toHaveLength(2);
      expect(await readFile(files[1]!, 'utf8')).toContain('<svg');
    } finally {
      await rm(out, { recursive: true, force: true });
    }
  });
});
