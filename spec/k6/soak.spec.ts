import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { describe, expect, it } from 'vitest';
import { BenchOptionError } from '../../k6/driver/index.ts';
import type { MemorySample } from '../../k6/driver/memory-sampler.ts';
import { writeResults } from '../../k6/driver/report.ts';
import type { MachineInfo } from '../../k6/driver/report.ts';
import { soakChart } from '../../k6/driver/soak/chart.ts';
import { SoakClient, kindOf } from '../../k6/driver/soak/client.ts';
import { pollDetached, pollPlan, probeCapacity, runLoad } from '../../k6/driver/soak/drive.ts';
import { runSchedule, targetOf } from '../../k6/driver/soak/faults.ts';
import { startSoakFleet } from '../../k6/driver/soak/fleet.ts';
import type { SoakFleet, SoakNode } from '../../k6/driver/soak/fleet.ts';
import {
  Ledger,
  classify,
  lostBecause,
  outcomeLabel,
  summarizeDetached,
  summarizeRuns,
} from '../../k6/driver/soak/ledger.ts';
import type { LedgerEntry } from '../../k6/driver/soak/ledger.ts';
import { resolveSoakOptions } from '../../k6/driver/soak/options.ts';
import {
  formatSoak,
  judge,
  soakHeadline,
  soakReport,
  soakReportChart,
  summarizeRss,
} from '../../k6/driver/soak/report.ts';
import type { SoakReport, SoakRun } from '../../k6/driver/soak/report.ts';
import { FAULT_KINDS, faultWindow, overlapsWindow, planSchedule } from '../../k6/driver/soak/schedule.ts';
import type { FaultWindow } from '../../k6/driver/soak/schedule.ts';
import { expectThrows } from '../support/throws.ts';
import { startService } from '../../gateway/cli/entry.ts';

const window = (kind: FaultWindow['kind'], injectedMs: number, recoveredMs: number | undefined): FaultWindow =>
  faultWindow(
    { kind, target: 't', plannedMs: injectedMs, injectedMs, note: '' },
    recoveredMs,
    injectedMs + 60_000,
    5_000,
  );

const entry = (seq: number, over: Partial<LedgerEntry> = {}): LedgerEntry => ({
  seq,
  kind: 'sync',
  dueMs: seq * 100,
  sentMs: seq * 100,
  endMs: seq * 100 + 50,
  status: 200,
  ...over,
});

/** A memory sample of `rssKiB` in `phase` at `ms`, its high-water mark the same. */
const sample = (ms: number, phase: string, rssKiB: number): MemorySample => ({
  ms,
  phase,
  rssKiB,
  hwmKiB: rssKiB,
  open: 0,
});

describe('resolveSoakOptions', () => {
  it('returns ten minutes on four nodes with every fault, a 20 s stop and a 60 s idle when given nothing', () => {
    expect(resolveSoakOptions({})).toMatchObject({
      duration: 600_000,
      nodes: 4,
      faults: FAULT_KINDS,
      stopFor: 20_000,
      idle: 60_000,
      probe: 5_000,
      capacity: undefined,
      out: 'bench-results',
    });
  });

  it('derives the stop and the idle from a short duration, and takes --rate as the capacity', () => {
    expect(resolveSoakOptions({ duration: 60_000, rate: 120, nodes: '2' })).toMatchObject({
      duration: 60_000,
      nodes: 2,
      stopFor: 6_000,
      idle: 6_000,
      capacity: 120,
    });
  });

  it('keeps the faults in schedule order whatever order they were given in', () => {
    expect(resolveSoakOptions({ faults: ['redis-restart', 'runner-kill'] }).faults).toEqual([
      'runner-kill',
      'redis-restart',
    ]);
  });

  it.each([
    [{ duration: 10_000 }, 'duration', 'duration must be between 20s and 7200s, got 10s'],
    [{ duration: 3 * 3_600_000 }, 'duration', 'got 10800s'],
    [{ nodes: 1 }, 'nodes', 'nodes must be between 2 and 8, got 1'],
    [{ nodes: 'four' }, 'nodes', 'nodes must be an integer, got "four"'],
    [{ faults: ['runner-kill', 'disk-full'] }, 'faults', 'got "disk-full"'],
    [{ faults: ['runner-kill', 'runner-kill'] }, 'faults', 'faults lists runner-kill twice'],
    [{ faults: [] }, 'faults', 'faults must be a non-empty list'],
    [{ duration: 60_000, stopFor: 30_000 }, 'stopFor', 'stopFor must be between 1s and 12s, got 30s'],
    [{ idle: 500 }, 'idle', 'idle must be between 2s and 300s, got 500 ms'],
    [{ warmup: 60_000 }, 'warmup', 'warmup must be between 1s and 30s, got 60s'],
  ] as const)('refuses %j naming the option and the value', (raw, option, message) => {
    expectThrows(() => resolveSoakOptions(raw as never), BenchOptionError, {
      code: 'BENCH_INVALID_OPTION',
      option,
      message: expect.stringContaining(message),
    });
  });
});

describe('planSchedule', () => {
  it('puts each fault at its share of the load, in order', () => {
    expect(planSchedule(600_000, FAULT_KINDS)).toEqual([
      { kind: 'runner-kill', atMs: 90_000 },
      { kind: 'runner-stop', atMs: 210_000 },
      { kind: 'engine-crash', atMs: 330_000 },
      { kind: 'redis-restart', atMs: 450_000 },
    ]);
  });

  it('keeps a fault at its own point when others are left out', () => {
    expect(planSchedule(100_000, ['redis-restart'])).toEqual([{ kind: 'redis-restart', atMs: 75_000 }]);
  });
});

describe('fault windows', () => {
  it('closes a window a grace after recovery, or a grace after the bound when there was none', () => {
    expect(window('runner-kill', 10_000, 13_000).endMs).toBe(18_000);
    expect(window('runner-kill', 10_000, undefined).endMs).toBe(75_000);
  });

  it('counts a call whose life touches a window, at either edge, and no other', () => {
    const windows = [window('runner-stop', 10_000, 12_000)];
    expect(overlapsWindow(windows, 9_000, 10_000)).toBe(true);
    expect(overlapsWindow(windows, 17_000, 20_000)).toBe(true);
    expect(overlapsWindow(windows, 5_000, 30_000)).toBe(true);
    expect(overlapsWindow(windows, 9_000, 9_999)).toBe(false);
    expect(overlapsWindow(windows, 17_001, 20_000)).toBe(false);
    expect(overlapsWindow([], 0, 1e9)).toBe(false);
  });
});

describe('classify and outcomeLabel', () => {
  it.each([
    [{ kind: 'sync', status: 200 }, 'ok', '200'],
    [{ kind: 'stream', status: 200 }, 'ok', '200'],
    [
      { kind: 'stream', status: 200, code: 'GW_RUNNER_FAILED_AFTER_COMMIT' },
      'error',
      '200 GW_RUNNER_FAILED_AFTER_COMMIT',
    ],
    [{ kind: 'detached', status: 202 }, 'ok', '202'],
    [{ kind: 'detached', status: 200 }, 'error', '200'],
    [{ kind: 'sync', status: 503, code: 'PLACER_TIMEOUT' }, 'busy', '503 PLACER_TIMEOUT'],
    [{ kind: 'sync', status: 503, code: 'GW_OVERLOADED' }, 'busy', '503 GW_OVERLOADED'],
    [{ kind: 'detached', status: 503, code: 'STORE_UNAVAILABLE' }, 'error', '503 STORE_UNAVAILABLE'],
    [
      { kind: 'sync', status: 502, code: 'GW_RUNNER_FAILED_AFTER_COMMIT' },
      'error',
      '502 GW_RUNNER_FAILED_AFTER_COMMIT',
    ],
    [{ kind: 'sync', status: 0, code: 'UND_ERR_SOCKET' }, 'error', 'UND_ERR_SOCKET'],
    [{ kind: 'sync', status: 0, code: 'dropped' }, 'dropped', 'dropped'],
  ] as const)('reads %j as %s', (answer, outcome, label) => {
    expect(classify(answer)).toBe(outcome);
    expect(outcomeLabel(answer)).toBe(label);
  });
});

describe('kindOf', () => {
  it('sends 12 sync, 5 streamed and 3 detached calls of every 20', () => {
    const counts = { sync: 0, stream: 0, detached: 0 };
    for (let seq = 0; seq < 200; seq++) counts[kindOf(seq)]++;
    expect(counts).toEqual({ sync: 120, stream: 50, detached: 30 });
  });
});

describe('targetOf', () => {
  const nodes = (n: number): SoakNode[] =>
    Array.from({ length: n }, (_, i) => ({ index: i, id: `soak-${i + 1}`, supervised: i === 0 }) as SoakNode);

  it('crashes the supervised engine and never kills the supervised runner, whose engine would outlive it', () => {
    for (const n of [2, 4, 8]) {
      expect(targetOf('engine-crash', nodes(n))?.supervised).toBe(true);
      expect(targetOf('runner-kill', nodes(n))?.supervised).toBe(false);
      expect(targetOf('runner-stop', nodes(n))?.supervised).toBe(false);
    }
    expect(targetOf('redis-restart', nodes(4))).toBeUndefined();
  });
});

describe('Ledger.summary', () => {
  it('counts calls by kind and outcome, inside and outside the windows, and keeps the errors outside', () => {
    const ledger = new Ledger();
    ledger.record(entry(0));
    ledger.record(entry(1, { kind: 'stream', status: 200, code: 'GW_RUNNER_FAILED_AFTER_COMMIT' }));
    ledger.record(entry(12, { status: 502, code: 'GW_RUNNER_FAILED_AFTER_COMMIT', callId: 'c-12' }));
    ledger.record(entry(13, { status: 503, code: 'PLACER_TIMEOUT' }));
    ledger.record(entry(14, { kind: 'detached', status: 202, callId: 'd-14' }));
    ledger.record(entry(30, { status: 0, code: 'dropped' }));
    ledger.record(entry(31, { status: 0, code: 'UND_ERR_SOCKET' }));
    // One window from 1.2 s to 1.5 s (recovered) + 0.1 s grace: calls 12, 13 and 14 fall in it.
    const summary = ledger.summary([
      faultWindow(
        { kind: 'runner-kill', target: 'soak-2', plannedMs: 1_200, injectedMs: 1_200, note: '' },
        1_500,
        61_200,
        100,
      ),
    ]);
    expect(summary.byKind.all).toEqual({
      sent: 7,
      ok: 2,
      busy: 1,
      error: 3,
      dropped: 1,
      inWindows: 3,
      errorsOutside: 2,
    });
    expect(summary.byKind.stream).toMatchObject({ sent: 1, error: 1, errorsOutside: 1 });
    expect(summary.byKind.detached).toMatchObject({ sent: 1, ok: 1, inWindows: 1 });
    expect(summary.errorsOutside.map((e) => e.seq)).toEqual([1, 31]);
    expect(summary.outcomes.find((o) => o.label === '502 GW_RUNNER_FAILED_AFTER_COMMIT')).toEqual({
      label: '502 GW_RUNNER_FAILED_AFTER_COMMIT',
      outcome: 'error',
      count: 1,
      inWindows: 1,
      outside: 0,
    });
    expect(summary.timeline.map((t) => [t.second, t.ok, t.busy, t.error])).toEqual([
      [0, 1, 0, 1],
      [1, 1, 1, 1],
      [2, 0, 0, 0],
      [3, 0, 0, 1],
    ]);
    expect(summary.latency.outside.count).toBe(1);
    expect(ledger.accepted().map((e) => e.callId)).toEqual(['d-14']);
  });
});

describe('detached fates', () => {
  it.each([
    [{ id: 'a', status: 'succeeded', result: true }, undefined],
    [{ id: 'a', status: 'succeeded', result: false }, 'succeeded without a result'],
    [{ id: 'a', status: 'failed', code: 'GW_OWNER_LOST' }, undefined],
    [{ id: 'a', status: 'failed' }, 'failed without an error code'],
    [{ id: 'a', status: 'cancelled', code: 'GW_CALL_CANCELLED' }, undefined],
    [{ id: 'a', status: 'running' }, 'still running'],
    [{ id: 'a', status: 'not-found' }, 'not found'],
    [{ id: 'a', status: 'unreadable' }, 'status unreadable'],
  ] as const)('judges %j lost because %s', (fate, why) => {
    expect(lostBecause(fate)).toBe(why);
  });

  it('summarises by final status and counts the lost by reason', () => {
    const summary = summarizeDetached([
      { id: 'a', status: 'succeeded', result: true },
      { id: 'b', status: 'succeeded', result: true },
      { id: 'c', status: 'failed', code: 'RUNNER_ENGINE_FAILED' },
      { id: 'd', status: 'not-found' },
      { id: 'e', status: 'running' },
    ]);
    expect(summary).toMatchObject({
      accepted: 5,
      lost: 2,
      byStatus: { succeeded: 2, 'failed RUNNER_ENGINE_FAILED': 1, 'not-found': 1, running: 1 },
      lostBy: { 'not found': 1, 'still running': 1 },
    });
    expect(summary.lostExamples.map((f) => f.id)).toEqual(['d', 'e']);
  });
});

describe('summarizeRuns', () => {
  it('counts ids run more than once, and 503 answers for calls an engine ran', () => {
    const runs = new Map([
      ['a', 1],
      ['b', 2],
      ['c', 0],
      ['d', 1],
    ]);
    const summary = summarizeRuns(runs, [
      entry(1, { status: 503, code: 'STORE_UNAVAILABLE', callId: 'd' }),
      entry(2, { status: 503, code: 'PLACER_TIMEOUT', callId: 'c' }),
    ]);
    expect(summary).toEqual({
      ran: 3,
      twice: 1,
      examples: [{ id: 'b', runs: 2 }],
      ranButAnswered503: 1,
      ranButAnswered503Examples: [{ id: 'd', code: 'STORE_UNAVAILABLE' }],
    });
  });
});

describe('summarizeRss and judge', () => {
  it("takes the start at the load, the peak from then on and the end as the median of the idle phase's last ten seconds", () => {
    const rss = summarizeRss([
      sample(0, 'probe', 500_000),
      sample(1, 'load', 100_000),
      sample(2, 'load', 130_000),
      sample(3, 'drain', 120_000),
      sample(4, 'idle', 112_000),
      sample(5, 'idle', 108_000),
      sample(6, 'idle', 200_000),
    ]);
    expect(rss).toMatchObject({ startKiB: 100_000, peakKiB: 200_000, endKiB: 112_000, back: false });
    expect(rss.growth).toBeCloseTo(0.12);
    expect(summarizeRss([sample(1, 'load', 100_000), sample(2, 'idle', 110_000)]).back).toBe(true);
    // Memory given back late in the idle phase counts; what came before its last ten seconds does not.
    const late = summarizeRss([
      sample(1, 'load', 100_000),
      sample(2_000, 'idle', 150_000),
      sample(20_000, 'idle', 150_000),
      sample(35_000, 'idle', 90_000),
      sample(40_000, 'idle', 92_000),
    ]);
    expect(late).toMatchObject({ endKiB: 90_000, back: true });
    expect(summarizeRss([sample(1, 'load', 100_000)]).back).toBe(false);
  });

  it('meets the goals only at zero, zero, zero, back and every fault recovered', () => {
    const ledger = new Ledger();
    ledger.record(entry(0));
    const calls = ledger.summary([]);
    const detached = summarizeDetached([]);
    const runs = summarizeRuns(new Map([['x', 1]]));
    const rss = summarizeRss([sample(1, 'load', 100), sample(2, 'idle', 100)]);
    const schedule = planSchedule(100_000, ['runner-kill', 'runner-stop']);
    const good = judge(calls, detached, runs, rss, schedule, [
      window('runner-kill', 15_000, 16_000),
      window('runner-stop', 35_000, 36_000),
    ]);
    expect(Object.values(good).every((g) => g.met)).toBe(true);
    const bad = judge(calls, detached, summarizeRuns(new Map([['x', 2]])), rss, schedule, [
      window('runner-kill', 15_000, undefined),
    ]);
    expect(bad.callsRunTwice).toEqual({ value: 1, goal: 0, met: false });
    expect(bad.faultsRecovered).toEqual({ value: 0, goal: 2, met: false });
  });
});

describe('formatSoak', () => {
  it('marks a missed goal and prints the first few examples of a failure, saying how many more', () => {
    const ledger = new Ledger();
    for (let seq = 0; seq < 8; seq++) ledger.record(entry(seq, { status: 0, code: 'UND_ERR_SOCKET' }));
    const calls = ledger.summary([]);
    const detached = { ...summarizeDetached([{ id: 'gone', status: 'not-found' }]), pollBoundMs: 10_000 };
    const runs = summarizeRuns(new Map());
    const rss = summarizeRss([]);
    const report = {
      windows: [],
      calls,
      detached,
      runs,
      rss: { ...rss, samples: [] },
      goals: judge(calls, detached, runs, rss, [], []),
    } as unknown as SoakReport;
    const text = formatSoak(report);
    expect(text).toMatch(/non-busy errors outside fault windows\s+8\s+0\s+MISSED/);
    expect(text).toMatch(/detached calls lost\s+1 of 1\s+0\s+MISSED/);
    expect(text).toContain('#4 sync sent 0.4s ended 0.5s: UND_ERR_SOCKET');
    expect(text).not.toContain('#5 sync');
    expect(text).toContain('... 3 more (the JSON lists up to 8)');
    expect(text).toContain('gone: not found');
  });
});

describe('soakChart', () => {
  it('shades every window and draws both panels', () => {
    const svg = soakChart(
      {
        rss: [
          { s: -5, mib: 100 },
          { s: 0, mib: 110 },
          { s: 40, mib: 105 },
        ],
        timeline: [{ second: 0, ok: 10, busy: 0, error: 1 }],
        windows: [window('runner-kill', 5_000, 7_000), window('redis-restart', 20_000, 22_000)],
        loadEndS: 30,
      },
      'title <x>',
      'sub',
    );
    expect(svg.startsWith('<svg')).toBe(true);
    expect(svg.match(/fill-opacity="0.12"/g)).toHaveLength(2);
    expect(svg).toContain('gateway resident memory');
    expect(svg).toContain('calls by outcome');
    expect(svg).toContain('title &lt;x&gt;');
  });
});

describe('soakReport', () => {
  const machine: MachineInfo = {
    cpus: 2,
    cpuModel: 'test',
    memoryGiB: 4,
    os: 'Linux',
    node: 'v20.0.0',
    loadAverage: [0, 0, 0],
  };
  const schedule = planSchedule(100_000, FAULT_KINDS);
  const windows = schedule.map((f) => window(f.kind, f.atMs, f.atMs + 2_000));

  /** A run with two sync calls, a stream and two detached calls, every fault recovered. */
  function run(over: Partial<SoakRun> = {}): SoakRun {
    const ledger = new Ledger();
    ledger.record(entry(0, { callId: 's-0' }));
    ledger.record(entry(1, { kind: 'stream', callId: 's-1' }));
    ledger.record(entry(2, { kind: 'detached', status: 202, callId: 'd-2' }));
    ledger.record(entry(3, { kind: 'detached', status: 202, callId: 'd-3' }));
    ledger.record(entry(4, { status: 503, code: 'PLACER_TIMEOUT' }));
    return {
      startedAt: new Date('2026-12-03T09:55:00.000Z'),
      machine,
      nodes: 2,
      durationMs: 100_000,
      capacity: { rate: 50, measured: true, probe: { rate: 50, calls: 100, errors: 0, ms: 2_000, connections: 16 } },
      rate: 40,
      schedule,
      windows,
      ledger,
      fates: [
        { id: 'd-2', status: 'succeeded', result: true },
        { id: 'd-3', status: 'succeeded', result: true },
      ],
      pollBoundMs: 25_000,
      // A probe call ran too, and the engines refused s-1 once before running it.
      callLogs: ['p-9 start\ns-0 start\ns-1 start\ns-1 refused\n', 's-1 start\nd-2 start\nd-3 start\n'],
      samples: [
        sample(0, 'probe', 90_000),
        sample(1_000, 'load', 100_000),
        sample(2_000, 'drain', 110_000),
        sample(3_000, 'idle', 104_000),
      ],
      ...over,
    };
  }

  it('assembles the figures of a run: windows, capacity, calls, detached fates, runs, memory and goals', () => {
    const report = soakReport(run());
    expect(report).toMatchObject({
      scenario: 'soak',
      startedAt: '2026-12-03T09:55:00.000Z',
      capacity: { rate: 50, measured: true },
      load: { share: 0.8, rate: 40, durationMs: 100_000 },
    });
    expect(report.fleet).toMatchObject({ nodes: 2, slots: 8, store: 'redis' });
    expect(report.windows.map((w) => w.kind)).toEqual([...FAULT_KINDS]);
    expect(report.calls.byKind.all).toMatchObject({ sent: 5, ok: 4, busy: 1 });
    expect(report.calls.byKind.detached.sent).toBeGreaterThan(0);
    expect(report.detached).toMatchObject({ accepted: 2, lost: 0, pollBoundMs: 25_000 });
    expect(report.detached.accepted).toBe(report.calls.byKind.detached.ok);
    expect(report.runs).toMatchObject({ ran: 5, twice: 0 });
    expect(report.runs.ran).toBeGreaterThanOrEqual(report.calls.byKind.all.ok);
    expect(report.rss.samples.some((s) => s.phase === 'idle')).toBe(true);
    expect(report.rss).toMatchObject({ startKiB: 100_000, endKiB: 104_000, back: true });
    expect(Object.keys(report.goals).sort()).toEqual([
      'callsRunTwice',
      'detachedLost',
      'errorsOutsideWindows',
      'faultsRecovered',
      'rssBack',
    ]);
    expect(Object.values(report.goals).every((g) => g.met)).toBe(true);
  });

  it('judges a call run twice, a detached call lost and a fault not recovered', () => {
    const lost = soakReport(
      run({
        fates: [
          { id: 'd-2', status: 'succeeded', result: true },
          { id: 'd-3', status: 'running' },
        ],
        callLogs: ['s-0 start\ns-0 start\n'],
        windows: [window('runner-kill', 15_000, undefined)],
      }),
    );
    expect(lost.goals.callsRunTwice).toEqual({ value: 1, goal: 0, met: false });
    expect(lost.goals.detachedLost).toEqual({ value: 1, goal: 0, met: false });
    expect(lost.goals.faultsRecovered).toEqual({ value: 0, goal: 4, met: false });
  });

  it('prints every fault, the goals and the headline, and keeps no secret in the JSON', () => {
    const report = soakReport(run());
    const text = [soakHeadline(report), formatSoak(report)].join('\n');
    for (const heading of [
      'runner-kill',
      'redis-restart',
      'calls run twice',
      'detached calls lost',
      'non-busy errors outside fault windows',
    ])
      expect(text).toContain(heading);
    expect(soakHeadline(report)).toBe(
      'sluice bench soak: 2 cpus, node v20.0.0, 2026-12-03T09:55:00.000Z, 2 nodes, 100s at 80% of 50.0 calls/s (measured) = 40 calls/s',
    );
    expect(JSON.stringify(report)).not.toMatch(/SLUICE_RUNNER_TOKEN|authorization/i);
  });

  it('writes the report and its chart, as the scenario does, with no secret in the file', async () => {
    const out = await mkdtemp(join(tmpdir(), 'soak-spec-'));
    try {
      const report = soakReport(run());
      const written: string[] = [];
      const files = await writeResults(
        {},
        out,
        'soak',
        run().startedAt,
        report,
        soakReportChart(report, 100),
        (t) => void written.push(t),
      );
      expect(files).toHaveLength(2);
      const text = await readFile(files[0]!, 'utf8');
      expect((JSON.parse(text) as SoakReport).scenario).toBe('soak');
      expect(text).not.toMatch(/SLUICE_RUNNER_TOKEN|authorization/i);
      expect((await readFile(files[1]!, 'utf8')).startsWith('<svg')).toBe(true);
      expect(written.join('')).toContain(files[0]!);
    } finally {
      await rm(out, { recursive: true, force: true });
    }
  });

  it("charts the memory from the load's start, every window shaded", () => {
    const svg = soakReportChart(soakReport(run()), 100);
    expect(svg.startsWith('<svg')).toBe(true);
    expect(svg.match(/fill-opacity="0.12"/g)).toHaveLength(FAULT_KINDS.length);
    expect(svg).toContain('2 nodes, 40 calls/s for 100s');
  });
});

describe('the soak on a real fleet, briefly', () => {
  // The one property that needs real processes: each fault, done to real children, is injected
  // and seen to recover, with calls in flight; the load's records, the detached calls' polling
  // and the engines' call logs then agree. The pauses are short; the scenario's are its own.
  it('injects every fault with calls in flight, sees each recover, and accounts for every call', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'soak-spec-'));
    let fleet: SoakFleet | undefined;
    let client: SoakClient | undefined;
    try {
      fleet = await startSoakFleet({ env: process.env, startService, logLevel: 'error', nodes: 2, dir });
      client = new SoakClient(fleet.gateway.url, 64);
      const probe = await probeCapacity(client, 4, 1_000);
      expect(probe.calls).toBeGreaterThan(0);

      const ledger = new Ledger();
      const start = performance.now();
      const schedule = FAULT_KINDS.map((kind) => ({ kind, atMs: 0 }));
      const running = runLoad(client, ledger, { rate: 20, durationMs: 3_000, maxInFlight: 64, maxCalls: 1_000 }, start);
      const [windows] = await Promise.all([
        runSchedule(schedule, {
          fleet,
          now: () => performance.now() - start,
          stopForMs: 500,
          restartPauseMs: 100,
          progress: () => {},
        }),
        running.done,
      ]);
      expect(windows.map((w) => w.kind)).toEqual([...FAULT_KINDS]);
      for (const w of windows) {
        expect(w.injectedMs).toBeGreaterThanOrEqual(w.plannedMs - 1);
        expect(w.recoveredMs, `${w.kind}: ${w.note}`).toBeGreaterThan(w.injectedMs);
      }

      const accepted = ledger.accepted().map((e) => e.callId!);
      const fates = await pollDetached(client, accepted, pollPlan(20_000));
      const callLogs = await Promise.all(fleet.callLogs.map((path) => readFile(path, 'utf8').catch(() => '')));
      const report = soakReport({
        startedAt: new Date(),
        machine: {} as MachineInfo,
        nodes: 2,
        durationMs: 3_000,
        capacity: { rate: probe.rate, measured: true, probe },
        rate: 20,
        schedule,
        windows,
        ledger,
        fates,
        pollBoundMs: 10_000,
        callLogs,
        samples: [],
      });
      expect(report.calls.byKind.all.sent).toBeGreaterThan(0);
      expect(report.calls.byKind.all.ok).toBeGreaterThan(0);
      expect(report.calls.byKind.detached.sent).toBeGreaterThan(0);
      expect(report.detached.accepted).toBe(report.calls.byKind.detached.ok);
      expect(report.runs.ran).toBeGreaterThanOrEqual(report.calls.byKind.all.ok);
      // The runner token is this run's secret: it must not reach the report.
      expect(JSON.stringify(report)).not.toMatch(/SLUICE_RUNNER_TOKEN|authorization/i);
    } finally {
      await client?.close().catch(() => undefined);
      await fleet?.stop();
      await rm(dir, { recursive: true, force: true });
    }
  }, 120_000);
});
