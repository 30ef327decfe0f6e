/**
 * The simulator's check against the live placement scenario: the same runs (level, rate, seed,
 * first session, contender) on the same eight-runner fleet, simulated instead of measured, and
 * each figure side by side with its relative difference. The simulator is only worth planning
 * with where it agrees with what it models, so the check says run by run and figure by figure
 * which differences are within the tolerance (10 %), and sums that up in one line. It judges
 * nothing else: a benchmark prints figures, it does not pass or fail.
 */
import { readFile } from 'node:fs/promises';
import { SIM_PROFILES, isSimProfileName } from '../../../runner/index.ts';
import type { SimProfile } from '../../../runner/index.ts';
import { BenchOptionError } from '../errors.ts';
import { formatMs, formatTable } from '../report.ts';
import type { PlacementFigures } from '../trace-run.ts';
import type { WorkloadShape } from '../workload.ts';

/** The largest relative difference counted as agreement. */
export const CHECK_TOLERANCE = 0.1;

/** One live run as the placement report has it; only what the check reads. */
export interface LiveRun {
  readonly level: number;
  readonly rate: number;
  readonly seed: number;
  readonly firstSession: number;
  readonly contender: string;
  readonly figures: PlacementFigures;
  readonly cacheHitShare: number;
}

/** What the check reads from a placement report. */
export interface LiveReport {
  readonly workload: WorkloadShape;
  readonly fleet: {
    readonly engines: number;
    readonly slots: number;
    readonly profile: SimProfile;
    readonly profileName: string;
  };
  readonly warmupMs: number;
  readonly measureMs: number;
  readonly runs: readonly LiveRun[];
}

/** One figure of one run, live and simulated. */
export interface ComparedFigure {
  readonly name: string;
  readonly live: number;
  readonly simulated: number;
  /** (simulated - live) / live; 0 when both are 0; NaN when live is 0 and simulated is not, or either is unknown. */
  readonly difference: number;
  readonly within: boolean;
}

/** One run, compared. */
export interface ComparedRun {
  readonly level: number;
  readonly rate: number;
  readonly seed: number;
  readonly contender: string;
  readonly figures: readonly ComparedFigure[];
  /** Every figure within the tolerance. */
  readonly agrees: boolean;
}

/** What the simulator produced for one run, in the live report's terms. */
export interface SimulatedFigures {
  readonly figures: PlacementFigures;
  readonly cacheHitShare: number;
}

/**
 * `(simulated - live) / live`: 0 when both are 0, NaN when either is not a finite number or only
 * live is 0 (no relative difference exists from nothing).
 */
export function relativeDifference(simulated: number, live: number): number {
  if (!Number.isFinite(simulated) || !Number.isFinite(live)) return Number.NaN;
  if (live === 0) return simulated === 0 ? 0 : Number.NaN;
  return (simulated - live) / live;
}

/** Compares the figures the check covers: TTFT p50, p90 and p99, output tokens/s, errors and cache hit share. */
export function compareRun(
  live: LiveRun,
  simulated: SimulatedFigures,
  tolerance: number = CHECK_TOLERANCE,
): ComparedRun {
  const pairs: [string, number, number][] = [
    ['ttft p50', live.figures.ttft.p50, simulated.figures.ttft.p50],
    ['ttft p90', live.figures.ttft.p90, simulated.figures.ttft.p90],
    ['ttft p99', live.figures.ttft.p99, simulated.figures.ttft.p99],
    ['out tok/s', live.figures.tokensPerSecond, simulated.figures.tokensPerSecond],
    ['errors', live.figures.errorCount, simulated.figures.errorCount],
    ['cache hits', live.cacheHitShare, simulated.cacheHitShare],
  ];
  const figures = pairs.map(([name, l, s]): ComparedFigure => {
    const difference = relativeDifference(s, l);
    // The epsilon keeps a difference of exactly the tolerance (0.55 vs 0.5) from failing on float error.
    return { name, live: l, simulated: s, difference, within: Math.abs(difference) <= tolerance + 1e-12 };
  });
  return {
    level: live.level,
    rate: live.rate,
    seed: live.seed,
    contender: live.contender,
    figures,
    agrees: figures.every((f) => f.within),
  };
}

/** One table per run: each figure live and simulated, the difference, and whether it is within the tolerance. */
export function formatCheck(rows: readonly ComparedRun[], tolerance: number = CHECK_TOLERANCE): string {
  return rows
    .map((r) => {
      const head = `${Math.round(r.level * 100)}% ${r.contender} (${r.rate.toFixed(1)} calls/s, seed ${r.seed}): ${r.agrees ? 'agrees' : 'differs'}`;
      const table = formatTable(
        ['figure', 'live', 'simulated', 'difference', `within ${Math.round(tolerance * 100)}%`],
        r.figures.map((f) => [
          f.name,
          formatFigure(f.name, f.live),
          formatFigure(f.name, f.simulated),
          formatDifference(f.difference),
          f.within ? 'yes' : 'no',
        ]),
      );
      return `${head}\n${table}`;
    })
    .join('\n\n');
}

/** The one-line summary: runs that agree on every figure, and figures within the tolerance by kind. */
export function checkVerdict(rows: readonly ComparedRun[], tolerance: number = CHECK_TOLERANCE): string {
  const names = rows[0]?.figures.map((f) => f.name) ?? [];
  const byName = names.map((name) => {
    const within = rows.filter((r) => r.figures.find((f) => f.name === name)?.within).length;
    return `${name} ${within}/${rows.length}`;
  });
  const agreeing = rows.filter((r) => r.agrees).length;
  const figures = rows.reduce((n, r) => n + r.figures.length, 0);
  const within = rows.reduce((n, r) => n + r.figures.filter((f) => f.within).length, 0);
  const pct = Math.round(tolerance * 100);
  const word = agreeing === rows.length && rows.length > 0 ? 'agrees' : 'does not agree';
  return `verdict: the 8-runner simulation ${word} with the live run within ${pct}% on every figure (${agreeing} of ${rows.length} runs do); ${within} of ${figures} figures are within ${pct}% (${byName.join(', ')})`;
}

function formatFigure(name: string, value: number): string {
  if (!Number.isFinite(value)) return '-';
  if (name === 'cache hits') return `${(value * 100).toFixed(1)}%`;
  if (name === 'errors' || name === 'out tok/s') return value.toFixed(0);
  return formatMs(value);
}

function formatDifference(difference: number): string {
  if (!Number.isFinite(difference)) return '-';
  return `${difference >= 0 ? '+' : ''}${(difference * 100).toFixed(1)}%`;
}

/**
 * Reads a placement report (the live scenario's JSON) for the check.
 * @throws {BenchOptionError} for `check` when the file cannot be read, is not JSON, or lacks what
 *   the check needs, naming the field.
 */
export async function readLiveReport(path: string): Promise<LiveReport> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (error) {
    throw new BenchOptionError(
      'check',
      `check: cannot read ${path} (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`,
    );
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    throw new BenchOptionError('check', `check: ${path} is not JSON (${(error as Error).message})`);
  }
  return parseLiveReport(json, path);
}

/** Validates a parsed placement report; see {@link readLiveReport}. JSON's null (a NaN written out) reads as NaN. */
export function parseLiveReport(json: unknown, path: string): LiveReport {
  const fail = (what: string): never => {
    throw new BenchOptionError('check', `check: ${path} is not a placement report: ${what}`);
  };
  const report = object(json) ?? fail('not a JSON object');
  if (report.scenario !== 'placement') fail(`scenario is ${JSON.stringify(report.scenario)}, not "placement"`);
  const fleet = object(report.fleet) ?? fail('no fleet');
  const profileName = fleet.profile;
  if (!isSimProfileName(profileName))
    fail(`fleet.profile ${JSON.stringify(profileName)} is not a sim profile (${Object.keys(SIM_PROFILES).join(', ')})`);
  const workload = object(report.workload) ?? fail('no workload');
  const shapeNumbers = ['systemPrompts', 'systemWords', 'turns', 'userWords', 'outputTokens', 'thinkMs'] as const;
  for (const key of shapeNumbers) if (!positive(workload[key])) fail(`workload.${key} is not a positive number`);
  if (typeof workload.model !== 'string') fail('workload.model is not a string');
  for (const key of ['engines', 'slots'] as const)
    if (!positive(fleet[key])) fail(`fleet.${key} is not a positive number`);
  for (const key of ['warmupMs', 'measureMs'] as const)
    if (!(typeof report[key] === 'number' && report[key] >= 0)) fail(`${key} is not a number of ms`);
  const runs = report.runs;
  if (!Array.isArray(runs) || runs.length === 0) fail('no runs');
  return {
    workload: workload as unknown as WorkloadShape,
    fleet: {
      engines: fleet.engines as number,
      slots: fleet.slots as number,
      profile: SIM_PROFILES[profileName as keyof typeof SIM_PROFILES],
      profileName: profileName as string,
    },
    warmupMs: report.warmupMs as number,
    measureMs: report.measureMs as number,
    runs: (runs as unknown[]).map((run, i) => parseRun(run, (what) => fail(`runs[${i}].${what}`))),
  };
}

function parseRun(json: unknown, fail: (what: string) => never): LiveRun {
  const run = object(json) ?? fail('is not an object');
  for (const key of ['level', 'rate'] as const) if (!positive(run[key])) fail(`${key} is not a positive number`);
  for (const key of ['seed', 'firstSession'] as const)
    if (!Number.isSafeInteger(run[key])) fail(`${key} is not an integer`);
  if (typeof run.contender !== 'string') fail('contender is not a string');
  const figures = object(run.figures) ?? fail('figures is missing');
  if (!object(figures.ttft)) fail('figures.ttft is missing');
  return {
    level: run.level as number,
    rate: run.rate as number,
    seed: run.seed as number,
    firstSession: run.firstSession as number,
    contender: run.contender as string,
    figures: {
      calls: numberOrNaN(figures.calls),
      errors: (object(figures.errors) ?? {}) as Record<string, number>,
      errorCount: numberOrNaN(figures.errorCount),
      ttft: parseDistribution(figures.ttft),
      latency: parseDistribution(figures.latency),
      tokensPerSecond: numberOrNaN(figures.tokensPerSecond),
    },
    cacheHitShare: numberOrNaN(run.cacheHitShare),
  };
}

function parseDistribution(json: unknown): PlacementFigures['latency'] {
  const d = object(json) ?? {};
  return {
    count: numberOrNaN(d.count),
    min: numberOrNaN(d.min),
    mean: numberOrNaN(d.mean),
    p50: numberOrNaN(d.p50),
    p90: numberOrNaN(d.p90),
    p99: numberOrNaN(d.p99),
    max: numberOrNaN(d.max),
  };
}

function object(value: unknown): Record<string, unknown> | undefined {
  return value !== null && typeof value === 'object' && !Array.isArray(value)
    ? (value as Record<string, unknown>)
    : undefined;
}

function positive(value: unknown): boolean {
  return typeof value === 'number' && Number.isFinite(value) && value > 0;
}

function numberOrNaN(value: unknown): number {
  return typeof value === 'number' ? value : Number.NaN;
}
