/**
 * Turning run summaries into what a reader needs: a plain-text table, the ratios that answer
 * "what does sluice cost", and a description of the machine, since figures from a shared
 * 2-core box mean little without it.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { availableParallelism, cpus, loadavg, totalmem, type as osType, release } from 'node:os';
import { join, resolve } from 'node:path';
import type { LoadMode, RunSummary } from './record.ts';
import { ratio } from './stats.ts';

/** Where the figures came from. */
export interface MachineInfo {
  cpus: number;
  cpuModel: string;
  memoryGiB: number;
  os: string;
  node: string;
  /** 1, 5 and 15 minute load averages when the bench started: a busy box skews everything. */
  loadAverage: number[];
}

/** One target's figures relative to a baseline's, for one mode: `subject / baseline`. */
export interface RatioRow {
  mode: LoadMode;
  subject: string;
  baseline: string;
  /** Above 1: more throughput than the baseline. */
  rps: number;
  /** Above 1: slower than the baseline. */
  p50: number;
  p99: number;
}

/** What every scenario starts from: where its output goes, when it started, on what machine. */
export interface ScenarioStart {
  progress: (text: string) => void;
  write: (text: string) => void;
  startedAt: Date;
  machine: MachineInfo;
}

/** Resolves a scenario's output channels (stderr for progress, stdout for figures by default) and stamps its start. */
export function startScenario(ctx: {
  progress?: (text: string) => void;
  write?: (text: string) => void;
}): ScenarioStart {
  return {
    progress: ctx.progress ?? ((t: string) => void process.stderr.write(t)),
    write: ctx.write ?? ((t: string) => void process.stdout.write(t)),
    startedAt: new Date(),
    machine: machineInfo(),
  };
}

/** The head every scenario's JSON report starts with: which scenario ran, when it started, on what machine. */
export interface ReportHead<S extends string = string> {
  scenario: S;
  /** ISO 8601. */
  startedAt: string;
  machine: MachineInfo;
}

/** The {@link ReportHead} of a run of `scenario` that started at `startedAt` on `machine`. */
export function reportHead<S extends string>(scenario: S, startedAt: Date, machine: MachineInfo): ReportHead<S> {
  return { scenario, startedAt: startedAt.toISOString(), machine };
}

/** Describes this machine. */
function machineInfo(): MachineInfo {
  return {
    cpus: availableParallelism(),
    cpuModel: cpus()[0]?.model.trim() ?? 'unknown',
    memoryGiB: Math.round((totalmem() / 2 ** 30) * 10) / 10,
    os: `${osType()} ${release()}`,
    node: process.version,
    loadAverage: loadavg().map((l) => Math.round(l * 100) / 100),
  };
}

/** `subject / baseline` for every mode and baseline present in `summaries`. */
export function ratios(summaries: readonly RunSummary[], subject: string, baselines: readonly string[]): RatioRow[] {
  const rows: RatioRow[] = [];
  for (const mode of ['closed', 'open'] as const) {
    const s = summaries.find((r) => r.mode === mode && r.target === subject);
    if (!s) continue;
    for (const baseline of baselines) {
      const b = summaries.find((r) => r.mode === mode && r.target === baseline);
      if (!b) continue;
      rows.push({
        mode,
        subject,
        baseline,
        rps: ratio(s.rps, b.rps),
        p50: ratio(s.latency.p50, b.latency.p50),
        p99: ratio(s.latency.p99, b.latency.p99),
      });
    }
  }
  return rows;
}

/** A ms figure with the precision that is meaningful at its size. */
export function formatMs(ms: number): string {
  if (!Number.isFinite(ms)) return '-';
  return ms < 10 ? ms.toFixed(2) : ms < 100 ? ms.toFixed(1) : ms.toFixed(0);
}

/** A distribution's p50, p90 and p99 as ms cells of a table. */
export function msCells(d: { readonly p50: number; readonly p90: number; readonly p99: number }): string[] {
  return [formatMs(d.p50), formatMs(d.p90), formatMs(d.p99)];
}

/** A factor as a table shows it, `1.42x`; `-` when there is none (no baseline, or a zero one). */
export function formatRatio(v: number | undefined): string {
  return v !== undefined && Number.isFinite(v) ? `${v.toFixed(2)}x` : '-';
}

/** Describes the load of a run: `32 conn` (closed) or `500/s` (open). */
export function formatLoad(s: Pick<RunSummary, 'mode' | 'connections' | 'rate'>): string {
  return s.mode === 'closed' ? `${s.connections} conn` : `${s.rate ?? '?'}/s`;
}

/** The runs table; with `round` set on rows, a round column comes first. */
export function formatRuns(summaries: readonly (RunSummary & { round?: number })[]): string {
  const withRound = summaries.some((s) => s.round !== undefined);
  const header = [
    ...(withRound ? ['round'] : []),
    'target',
    'mode',
    'load',
    'req/s',
    'p50 ms',
    'p90 ms',
    'p99 ms',
    'max ms',
    'errors',
  ];
  const rows = summaries.map((s) => [
    ...(withRound ? [String(s.round ?? '')] : []),
    s.target,
    s.mode,
    formatLoad(s),
    Number.isFinite(s.rps) ? s.rps.toFixed(0) : '-',
    ...msCells(s.latency),
    formatMs(s.latency.max),
    String(s.errors),
  ]);
  return formatTable(header, rows);
}

/** The ratios table: `x` factors, e.g. `0.42x` req/s means sluice served 42 % of the baseline's rate. */
export function formatRatios(rows: readonly RatioRow[]): string {
  return formatTable(
    ['mode', 'ratio', 'req/s', 'p50', 'p99'],
    rows.map((r) => [r.mode, `${r.subject}/${r.baseline}`, ...[r.rps, r.p50, r.p99].map(formatRatio)]),
  );
}

/** Aligns columns: text left, figures right. */
export function formatTable(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const numeric = header.map((_, i) => rows.length > 0 && rows.every((r) => /^[-\d.x]+$/.test(r[i] ?? '')));
  const line = (cells: readonly string[]): string =>
    cells
      .map((c, i) => (numeric[i] ? c.padStart(widths[i]!) : c.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [line(header), line(widths.map((w) => '-'.repeat(w))), ...rows.map(line)].join('\n');
}

/** Writes the JSON report and the SVG chart into `out`, says where on `write`, and returns their paths. */
export async function writeResults(
  ctx: { cwd?: string },
  out: string,
  name: string,
  startedAt: Date,
  report: unknown,
  svg: string,
  write: (text: string) => void,
): Promise<string[]> {
  const dir = resolve(ctx.cwd ?? process.cwd(), out);
  await mkdir(dir, { recursive: true });
  const stamp = startedAt.toISOString().replace(/[:.]/g, '-');
  const files = [join(dir, `${name}-${stamp}.json`), join(dir, `${name}-${stamp}.svg`)];
  await writeFile(files[0]!, `${JSON.stringify(report, null, 2)}\n`);
  await writeFile(files[1]!, svg);
  write(`wrote ${files.join(' and ')}\n`);
  return files;
}
