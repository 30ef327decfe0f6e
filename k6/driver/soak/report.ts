/**
 * The soak's report: the JSON written to --out, the goals judged from it, and the text tables
 * printed. Goals are figures with a target, printed as met or missed; like every benchmark the
 * soak never fails on them, it says what it saw.
 */
import { countCallRuns } from '../../../runner/index.ts';
import type { MemorySample } from '../memory-sampler.ts';
import { formatMs, formatTable, reportHead } from '../report.ts';
import type { MachineInfo, ReportHead } from '../report.ts';
import { soakChart } from './chart.ts';
import type { CapacityProbe } from './drive.ts';
import { SOAK_FLEET } from './fleet.ts';
import { CALL_KINDS, summarizeDetached, summarizeRuns } from './ledger.ts';
import type { DetachedFate, DetachedSummary, Ledger, LedgerSummary, TwiceSummary } from './ledger.ts';
import type { FaultWindow, PlannedFault } from './schedule.ts';

/** The share of capacity the load runs at. */
export const SOAK_LOAD = 0.8;

/** How the calls were mixed, as the report states it. */
const MIX = 'of every 20 calls: 12 sync, 5 streamed, 3 detached (Prefer: respond-async)';

/** Examples of each failure printed; the JSON keeps more. */
const PRINTED = 5;

/** How far above its start the gateway's memory may end and still count as back. */
const RSS_TOLERANCE = 0.1;

/** The gateway's memory over the soak, KiB. */
export interface RssSummary {
  /** At the load's start. */
  startKiB: number;
  /** The highest reading from the load's start on. */
  peakKiB: number;
  /** The median of the idle phase's last ten seconds: where memory settled after the load. */
  endKiB: number;
  /** (end - start) / start. */
  growth: number;
  /** True when the end is within {@link RSS_TOLERANCE} of the start. */
  back: boolean;
}

/** The goals and whether each was met. */
export interface SoakGoals {
  callsRunTwice: { value: number; goal: 0; met: boolean };
  detachedLost: { value: number; goal: 0; met: boolean };
  errorsOutsideWindows: { value: number; goal: 0; met: boolean };
  rssBack: { value: number; goal: number; met: boolean };
  /** Every fault planned was injected and recovered within its bound. */
  faultsRecovered: { value: number; goal: number; met: boolean };
}

/** The JSON report. */
export interface SoakReport extends ReportHead<'soak'> {
  fleet: {
    nodes: number;
    slots: number;
    itlMs: number;
    maxTokens: number;
    profile: string;
    placer: string;
    placerTimeout: string;
    store: 'redis';
  };
  capacity: { rate: number; measured: boolean; probe?: CapacityProbe };
  load: { share: number; rate: number; durationMs: number; mix: string };
  schedule: PlannedFault[];
  windows: FaultWindow[];
  calls: LedgerSummary;
  /** With the longest the driver polled for them after the load: a call still running then is lost. */
  detached: DetachedSummary & { pollBoundMs: number };
  runs: TwiceSummary;
  rss: RssSummary & { samples: MemorySample[] };
  goals: SoakGoals;
}

/**
 * The memory figures, from samples tagged `load`, `drain` and `idle` (the phases from the load's
 * start on); NaN figures and `back: false` when a phase has no sample.
 */
/** How much of the idle phase's end the settled RSS is read from, ms. */
const RSS_SETTLED_MS = 10_000;

export function summarizeRss(samples: readonly MemorySample[]): RssSummary {
  const from = samples.filter((s) => s.phase === 'load' || s.phase === 'drain' || s.phase === 'idle');
  // The end is where memory settled: the idle phase's last ten seconds. V8 gives memory back
  // some tens of seconds after the load stops (its memory reducer), not at once.
  const idleSamples = samples.filter((s) => s.phase === 'idle');
  const lastMs = idleSamples.at(-1)?.ms ?? 0;
  const idle = idleSamples
    .filter((s) => s.ms >= lastMs - RSS_SETTLED_MS)
    .map((s) => s.rssKiB)
    .sort((a, b) => a - b);
  const startKiB = from[0]?.rssKiB ?? Number.NaN;
  const peakKiB = from.length > 0 ? Math.max(...from.map((s) => s.rssKiB)) : Number.NaN;
  const endKiB = idle.length > 0 ? idle[Math.floor((idle.length - 1) / 2)]! : Number.NaN;
  const growth = (endKiB - startKiB) / startKiB;
  return { startKiB, peakKiB, endKiB, growth, back: Number.isFinite(growth) && growth <= RSS_TOLERANCE };
}

/** Judges the goals. */
export function judge(
  calls: LedgerSummary,
  detached: DetachedSummary,
  runs: TwiceSummary,
  rss: RssSummary,
  schedule: readonly PlannedFault[],
  windows: readonly FaultWindow[],
): SoakGoals {
  const recovered = windows.filter((w) => w.recoveredMs !== undefined).length;
  return {
    callsRunTwice: { value: runs.twice, goal: 0, met: runs.twice === 0 },
    detachedLost: { value: detached.lost, goal: 0, met: detached.lost === 0 },
    errorsOutsideWindows: { value: calls.byKind.all.errorsOutside, goal: 0, met: calls.byKind.all.errorsOutside === 0 },
    rssBack: { value: rss.growth, goal: RSS_TOLERANCE, met: rss.back },
    faultsRecovered: { value: recovered, goal: schedule.length, met: recovered === schedule.length },
  };
}

/** The printed tables: faults, calls by kind, outcomes, detached fates, goals. */
export function formatSoak(report: SoakReport): string {
  const s = (ms: number | undefined): string => (ms === undefined ? '-' : (ms / 1000).toFixed(1));
  const faults = formatTable(
    ['fault', 'target', 'planned s', 'injected s', 'recovered s', 'window ends s', 'what happened'],
    report.windows.map((w) => [
      w.kind,
      w.target,
      s(w.plannedMs),
      s(w.injectedMs),
      s(w.recoveredMs),
      s(w.endMs),
      w.note,
    ]),
  );
  const kinds = formatTable(
    ['kind', 'sent', 'ok', 'busy', 'error', 'dropped', 'in windows', 'errors outside'],
    [...CALL_KINDS, 'all' as const].map((k) => {
      const c = report.calls.byKind[k];
      return [
        k,
        String(c.sent),
        String(c.ok),
        String(c.busy),
        String(c.error),
        String(c.dropped),
        String(c.inWindows),
        String(c.errorsOutside),
      ];
    }),
  );
  const outcomes = formatTable(
    ['answer', 'outcome', 'calls', 'in windows', 'outside'],
    report.calls.outcomes.map((o) => [o.label, o.outcome, String(o.count), String(o.inWindows), String(o.outside)]),
  );
  const lat = report.calls.latency;
  const latencyRow = (label: string, l: typeof lat.outside): string[] => [
    label,
    String(l.count),
    ...[l.p50, l.p90, l.p99, l.max].map((ms) => formatMs(ms)),
  ];
  const latency = formatTable(
    ['ok sync+stream calls', 'calls', 'p50 ms', 'p90 ms', 'p99 ms', 'max ms'],
    [latencyRow('outside windows', lat.outside), latencyRow('in windows', lat.inWindows)],
  );
  const detached = formatTable(
    [`detached status (polled up to ${report.detached.pollBoundMs / 1000}s)`, 'calls'],
    Object.entries(report.detached.byStatus)
      .sort((a, b) => b[1] - a[1])
      .map(([k, v]) => [k, String(v)]),
  );
  const g = report.goals;
  const mib = (kib: number): string => (Number.isFinite(kib) ? (kib / 1024).toFixed(1) : '-');
  const mark = (met: boolean): string => (met ? 'met' : 'MISSED');
  const rss = report.rss;
  const goals = formatTable(
    ['goal', 'value', 'target', ''],
    [
      ['calls run twice', String(g.callsRunTwice.value), '0', mark(g.callsRunTwice.met)],
      ['detached calls lost', `${g.detachedLost.value} of ${report.detached.accepted}`, '0', mark(g.detachedLost.met)],
      [
        'non-busy errors outside fault windows',
        String(g.errorsOutsideWindows.value),
        '0',
        mark(g.errorsOutsideWindows.met),
      ],
      [
        'gateway RSS after the load vs its start',
        Number.isFinite(rss.growth) ? `${rss.growth >= 0 ? '+' : ''}${(rss.growth * 100).toFixed(1)}%` : '-',
        `<= +${RSS_TOLERANCE * 100}%`,
        mark(g.rssBack.met),
      ],
      [
        'faults recovered',
        `${g.faultsRecovered.value} of ${g.faultsRecovered.goal}`,
        'all',
        mark(g.faultsRecovered.met),
      ],
    ],
  );
  const lines = [
    faults,
    '',
    kinds,
    '',
    outcomes,
    '',
    latency,
    '',
    detached,
    '',
    `gateway RSS: start ${mib(rss.startKiB)} MiB, peak ${mib(rss.peakKiB)} MiB, end ${mib(rss.endKiB)} MiB (median of the idle phase's last 10 s)`,
    `calls the engines ran (the capacity probe's included): ${report.runs.ran} distinct ids, ${report.runs.twice} more than once; ${report.runs.ranButAnswered503} answered 503 though an engine ran them`,
    '',
    goals,
  ];
  // The text shows the first few of each; the JSON keeps up to EXAMPLES, with the totals.
  const listed = <T>(heading: string, items: readonly T[], total: number, line: (item: T) => string): void => {
    if (items.length === 0) return;
    lines.push('', heading);
    for (const item of items.slice(0, PRINTED)) lines.push(`  ${line(item)}`);
    if (total > PRINTED) lines.push(`  ... ${total - PRINTED} more (the JSON lists up to ${items.length})`);
  };
  listed(
    'first errors outside the fault windows:',
    report.calls.errorsOutside,
    report.calls.byKind.all.errorsOutside,
    (e) =>
      `#${e.seq} ${e.kind} sent ${s(e.sentMs)}s ended ${s(e.endMs)}s: ${e.status === 0 ? '' : `${e.status} `}${e.code ?? ''}${e.callId ? ` (call ${e.callId})` : ''}`,
  );
  listed('first detached calls lost:', report.detached.lostExamples, report.detached.lost, (f) => `${f.id}: ${f.why}`);
  listed(
    'first calls answered 503 that an engine ran (a client retrying them runs them twice):',
    report.runs.ranButAnswered503Examples,
    report.runs.ranButAnswered503,
    (r) => `${r.id}: 503 ${r.code}`,
  );
  listed('first calls run more than once:', report.runs.examples, report.runs.twice, (r) => `${r.id}: ${r.runs} runs`);
  return lines.join('\n');
}

/** What one soak saw, from its start to the end of the idle spell. */
export interface SoakRun {
  readonly startedAt: Date;
  readonly machine: MachineInfo;
  readonly nodes: number;
  readonly durationMs: number;
  readonly capacity: SoakReport['capacity'];
  /** The open loop's rate, calls/s. */
  readonly rate: number;
  readonly schedule: readonly PlannedFault[];
  readonly windows: readonly FaultWindow[];
  /** Every call the load sent. */
  readonly ledger: Ledger;
  /** What the polling found of each accepted detached call. */
  readonly fates: readonly DetachedFate[];
  readonly pollBoundMs: number;
  /** The text of every engine's call log. */
  readonly callLogs: readonly string[];
  readonly samples: readonly MemorySample[];
}

/** The report of `run`: every figure summarised and the goals judged. */
export function soakReport(run: SoakRun): SoakReport {
  const calls = run.ledger.summary(run.windows);
  const detached = summarizeDetached(run.fates);
  const runs = summarizeRuns(countCallRuns(run.callLogs), run.ledger.entries);
  const rss = summarizeRss(run.samples);
  const { slots, itlMs, maxTokens, profile, placer, placerTimeout } = SOAK_FLEET;
  return {
    ...reportHead('soak', run.startedAt, run.machine),
    fleet: { nodes: run.nodes, slots, itlMs, maxTokens, profile, placer, placerTimeout, store: 'redis' },
    capacity: run.capacity,
    load: { share: SOAK_LOAD, rate: run.rate, durationMs: run.durationMs, mix: MIX },
    schedule: [...run.schedule],
    windows: [...run.windows],
    calls,
    detached: { ...detached, pollBoundMs: run.pollBoundMs },
    runs,
    rss: { ...rss, samples: [...run.samples] },
    goals: judge(calls, detached, runs, rss, run.schedule, run.windows),
  };
}

/** The line printed above the tables: machine, start, fleet and load. */
export function soakHeadline(report: SoakReport): string {
  const { machine, capacity, load } = report;
  return `sluice bench soak: ${machine.cpus} cpus, node ${machine.node}, ${report.startedAt}, ${report.fleet.nodes} nodes, ${load.durationMs / 1000}s at ${load.share * 100}% of ${capacity.rate.toFixed(1)} calls/s (${capacity.measured ? 'measured' : 'given'}) = ${load.rate} calls/s`;
}

/** The report's chart: RSS from the load's start (`loadEndS` when it stopped sending), calls by second, windows shaded. */
export function soakReportChart(report: SoakReport, loadEndS: number): string {
  const { machine, load } = report;
  const samples = report.rss.samples;
  const loadStartMs = samples.find((s) => s.phase === 'load')?.ms ?? 0;
  const subtitle = `${machine.cpus} cpus, node ${machine.node}, ${report.startedAt.slice(0, 16)}Z, ${report.fleet.nodes} nodes, ${load.rate} calls/s for ${load.durationMs / 1000}s`;
  return soakChart(
    {
      rss: samples.map((s) => ({ s: (s.ms - loadStartMs) / 1000, mib: s.rssKiB / 1024 })),
      timeline: report.calls.timeline,
      windows: report.windows,
      loadEndS,
    },
    'sluice bench soak: gateway memory and calls, faults shaded',
    subtitle,
  );
}
