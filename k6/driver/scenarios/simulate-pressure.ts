/**
 * `bench simulate --workload cache-pressure`: placement measured against an oracle on a workload
 * whose contexts do not fit every engine's cache (k6/driver/workload.ts, `cachePressureWorkload`),
 * with one or several gateways.
 *
 * - The engines start with each tenant's context cached on one engine (`warmSystemPrompts:
 *   'spread'`), as a fleet that had been placing it by cache would hold them; the warm-up then
 *   lets each contender bring the caches to its own steady state before anything is measured.
 * - 100 % load is the oracle's capacity: the rate at which its p90 time to first token crosses
 *   1 s with one gateway, found by simulation on a fleet of at most {@link PROBE_RUNNERS} runners
 *   and scaled per runner (the workload is sized per runner, so the capacity per runner holds).
 *   Round-robin's p90 is never under 1 s here (a context's prefill alone is 1.5 s), so the
 *   placement scenario's reference cannot serve.
 * - Per contender: TTFT p50/p90/p99 of the calls answered, goodput (the share of measured calls
 *   answered with a first token within `ttftTargetMs`), the share shed (refused or timed out), the
 *   engines' cache hit share over the measured calls, and the p90 as a multiple of the oracle's at
 *   the same level and gateways.
 */
import { performance } from 'node:perf_hooks';
import type { KvAwareOptions } from '../../../placer/index.ts';
import { H100_8B_PROFILE } from '../../../runner/index.ts';
import { loadChart } from '../line-chart.ts';
import { formatMs, formatRatio, formatTable, msCells, reportHead, startScenario, writeResults } from '../report.ts';
import type { CallRecord, PlacementFigures } from '../trace-run.ts';
import type { ScenarioContext } from '../types.ts';
import { cacheDemandOf, cachePressureWorkload } from '../workload.ts';
import type { WorkloadShape } from '../workload.ts';
import { DEFAULT_CACHE_PENDING_MS } from '../vsim/cache-truth.ts';
import { GATEWAY_DEFAULTS, ORACLE, simulateRun } from '../vsim/simulation.ts';
import type { CacheChecks, SimFleet, SimHops, SimRunResult, SimRunSpec } from '../vsim/simulation.ts';
import { CAPACITY_TTFT_P90_MS, PLACEMENT_FLEET, crossing, findCapacity } from './placement.ts';
import type { CapacityProbe } from './placement.ts';

/** Warm-up and measured window of every run, virtual ms, unless `--calls` sets the measured one. */
export const PRESSURE_WINDOWS = Object.freeze({ warmupMs: 20_000, measureMs: 20_000, probeMeasureMs: 10_000 });

/** Runners of the fleet the capacity is searched on, at most: the per-runner figure scales. */
export const PROBE_RUNNERS = 64;

/** What the plan reads of the simulate scenario's resolved options (simulate.ts). */
export interface PressureOptions {
  readonly out: string;
  readonly runners: number;
  readonly calls: number;
  /** Whether `calls` was given: otherwise every run measures {@link PRESSURE_WINDOWS}' window. */
  readonly callsGiven: boolean;
  readonly levels: readonly number[];
  readonly contenders: readonly string[];
  readonly gateways: readonly number[];
  readonly capacity: number | undefined;
  readonly hops: SimHops;
  readonly ttftTargetMs: number;
  readonly feedDelayMs: number;
  readonly cacheDemand: number;
  readonly kvAware: KvAwareOptions;
}

/** One contender at one level and gateway count. */
export interface PressureRun {
  level: number;
  rate: number;
  gateways: number;
  contender: string;
  figures: PlacementFigures;
  /** Measured calls answered with a first token within the target, over all measured calls. */
  goodput: number;
  /** Measured calls refused or timed out, over all measured calls. */
  shed: number;
  /** The engines' cached prompt tokens over prompt tokens, for the measured calls. */
  cacheHitShare: number;
  /**
   * Routing checking itself, for the contenders on cache truth: cached tokens placement predicted
   * on the runner that took each call against those its engine found (the table's `over` and
   * `under`, as shares of the found ones).
   */
  checks?: CacheChecks;
  /** TTFT p90 over the oracle's at the same level and gateways; NaN without an oracle run. */
  p90ToOracle: number;
  wallMs: number;
}

/** Goodput and shed share of the calls due in the measured window. */
export function goodputOf(
  records: readonly CallRecord[],
  warmupMs: number,
  measureMs: number,
  ttftTargetMs: number,
): { goodput: number; shed: number } {
  let calls = 0;
  let good = 0;
  let shed = 0;
  for (const r of records) {
    if (r.at < warmupMs || r.at >= warmupMs + measureMs) continue;
    calls++;
    if (r.status !== 200) shed++;
    else if (r.ttft <= ttftTargetMs) good++;
  }
  return { goodput: calls > 0 ? good / calls : Number.NaN, shed: calls > 0 ? shed / calls : Number.NaN };
}

/** The cache-pressure plan: capacity (the oracle's), then every contender at every level and gateway count. */
export async function planCachePressure(options: PressureOptions, ctx: ScenarioContext): Promise<{ files: string[] }> {
  const { progress, write, startedAt, machine } = startScenario(ctx);
  const control = ctx.signal ? { signal: ctx.signal } : {};
  const profile = H100_8B_PROFILE;
  const fleet: SimFleet = { runners: options.runners, slots: PLACEMENT_FLEET.slots, profile };
  const shape = cachePressureWorkload(options.runners, profile.cacheBlocks, options.cacheDemand);
  const { warmupMs } = PRESSURE_WINDOWS;
  const started = performance.now();
  const base = (s: WorkloadShape, f: SimFleet): Omit<SimRunSpec, 'contender' | 'rate' | 'seed' | 'measureMs'> => ({
    shape: s,
    fleet: f,
    firstSession: 0,
    warmupMs,
    warmSystemPrompts: 'spread',
    hops: options.hops,
    feedDelayMs: options.feedDelayMs,
    cachePendingMs: DEFAULT_CACHE_PENDING_MS,
    kvAware: options.kvAware,
  });
  progress(
    `cache-pressure: ${shape.systemPrompts.toLocaleString('en')} tenants of ${shape.systemWords + 2} tokens (${percent(cacheDemandOf(shape, options.runners, profile.cacheBlocks))} of ${options.runners} engines' cache), queries of ${shape.userWords + 2} tokens\n`,
  );

  const capacity = await capacityOf(options, control, progress, base);
  const runs: PressureRun[] = [];
  for (const [index, level] of options.levels.entries()) {
    const rate = level * capacity.rate;
    const seed = 100 + index;
    const measureMs = options.callsGiven
      ? Math.max(1_000, Math.floor((options.calls / rate) * 1000 - warmupMs))
      : PRESSURE_WINDOWS.measureMs;
    for (const [gateways, contender] of runsOf(options)) {
      const t0 = performance.now();
      const spec: SimRunSpec = {
        ...base(shape, fleet),
        contender,
        rate,
        seed,
        firstSession: seed * 1_000_000,
        measureMs,
        gateways,
      };
      const result = await simulateRun(spec, control);
      const run = pressureRun(spec, result, options.ttftTargetMs, performance.now() - t0);
      runs.push({ ...run, level });
      progress(
        `  ${percent(level)} (${rate.toFixed(0)}/s) ${gateways} gw ${contender}: ttft p50 ${formatMs(run.figures.ttft.p50)} p90 ${formatMs(run.figures.ttft.p90)} ms, goodput ${percent(run.goodput)}, shed ${percent(run.shed)}, hit ${percent(run.cacheHitShare)}; ${result.records.length} calls in ${seconds(run.wallMs)}\n`,
      );
    }
  }
  for (const run of runs) {
    const oracle = runs.find((o) => o.contender === ORACLE && o.level === run.level && o.gateways === run.gateways);
    run.p90ToOracle = oracle ? run.figures.ttft.p90 / oracle.figures.ttft.p90 : Number.NaN;
  }
  const wallMs = performance.now() - started;

  write(
    `\nsluice bench simulate --workload cache-pressure: ${machine.cpus} cpus, node ${machine.node}, ${startedAt.toISOString()}, ${options.runners} simulated runners (${fleet.slots} slots, ${PLACEMENT_FLEET.profile}), ${shape.systemPrompts.toLocaleString('en')} tenants (cache demand ${percent(options.cacheDemand)}), capacity ${capacity.rate.toFixed(0)} calls/s (${capacity.measured ? "the oracle's, found by simulation" : 'given'}), ${warmupMs / 1000}s warm-up, feed delay ${options.feedDelayMs} ms, goodput = first token within ${options.ttftTargetMs} ms\n\n`,
  );
  write(`${formatPressure(runs)}\n\n`);
  write(`wall time ${seconds(wallMs)}\n`);
  const report = {
    ...reportHead('simulate-cache-pressure', startedAt, machine),
    workload: shape,
    cacheDemand: options.cacheDemand,
    fleet: { runners: options.runners, slots: fleet.slots, profile: PLACEMENT_FLEET.profile },
    gateway: GATEWAY_DEFAULTS,
    hops: options.hops,
    feedDelayMs: options.feedDelayMs,
    cachePendingMs: DEFAULT_CACHE_PENDING_MS,
    kvAware: options.kvAware,
    ttftTargetMs: options.ttftTargetMs,
    warmupMs,
    capacity,
    runs,
    wallMs,
  };
  const subtitle = `${options.runners} simulated runners x ${PLACEMENT_FLEET.profile}, cache demand ${percent(options.cacheDemand)}, 100% = ${capacity.rate.toFixed(0)} calls/s; ${machine.cpus} cpus, node ${machine.node}, ${startedAt.toISOString().slice(0, 16)}Z`;
  const files = await writeResults(
    ctx,
    options.out,
    'simulate-cache-pressure',
    startedAt,
    report,
    pressureChart(runs, subtitle),
    write,
  );
  return { files };
}

/** The oracle's capacity: given, or searched on a fleet of at most PROBE_RUNNERS runners and scaled. */
async function capacityOf(
  options: PressureOptions,
  control: { signal?: AbortSignal },
  progress: (text: string) => void,
  base: (s: WorkloadShape, f: SimFleet) => Omit<SimRunSpec, 'contender' | 'rate' | 'seed' | 'measureMs'>,
): Promise<{ rate: number; measured: boolean; probeRunners: number; probes: CapacityProbe[] }> {
  if (options.capacity !== undefined) {
    progress(`capacity taken from --capacity: ${options.capacity} calls/s\n`);
    return { rate: options.capacity, measured: false, probeRunners: 0, probes: [] };
  }
  const runners = Math.min(options.runners, PROBE_RUNNERS);
  const fleet: SimFleet = { runners, slots: PLACEMENT_FLEET.slots, profile: H100_8B_PROFILE };
  const shape = cachePressureWorkload(runners, H100_8B_PROFILE.cacheBlocks, options.cacheDemand);
  const scale = runners / PLACEMENT_FLEET.engines;
  progress(
    `finding the oracle's capacity on ${runners} runners: raising its rate until its p90 time to first token passes ${CAPACITY_TTFT_P90_MS} ms\n`,
  );
  let seed = 1;
  const probes = await findCapacity(async (liveRate) => {
    const rate = liveRate * scale;
    const result = await simulateRun(
      {
        ...base(shape, fleet),
        contender: ORACLE,
        rate,
        seed: seed++,
        measureMs: PRESSURE_WINDOWS.probeMeasureMs,
      },
      control,
    );
    const f = result.figures;
    const p90 = f.errorCount > f.calls * 0.01 ? Infinity : f.ttft.p90;
    progress(`  ${rate.toFixed(0)} calls/s: p90 ${formatMs(p90)} ms, ${f.errorCount} errors\n`);
    return p90;
  });
  const perRunner = (crossing(probes, CAPACITY_TTFT_P90_MS) * scale) / runners;
  const rate = perRunner * options.runners;
  progress(`capacity: ${rate.toFixed(0)} calls/s (${perRunner.toFixed(2)} per runner)\n`);
  return {
    rate,
    measured: true,
    probeRunners: runners,
    probes: probes.map((p) => ({ rate: p.rate * scale, p90: p.p90 })),
  };
}

/** Every gateway count with every contender; nginx, which has no gateway, with the first count only. */
export function runsOf(options: Pick<PressureOptions, 'gateways' | 'contenders'>): (readonly [number, string])[] {
  return options.gateways.flatMap((gateways, i) =>
    options.contenders.filter((c) => i === 0 || !c.startsWith('nginx')).map((c) => [gateways, c] as const),
  );
}

/** A run's figures, goodput, shed share and hit share; the oracle ratio is filled in later. */
function pressureRun(
  spec: SimRunSpec,
  result: SimRunResult,
  ttftTargetMs: number,
  wallMs: number,
): Omit<PressureRun, 'level'> {
  return {
    rate: spec.rate,
    gateways: spec.gateways ?? 1,
    contender: spec.contender,
    figures: result.figures,
    ...goodputOf(result.records, spec.warmupMs, spec.measureMs, ttftTargetMs),
    cacheHitShare: result.measuredHitShare,
    ...(result.cacheChecks ? { checks: result.cacheChecks } : {}),
    p90ToOracle: Number.NaN,
    wallMs,
  };
}

/** The runs as a table, a row per level, gateway count and contender. */
export function formatPressure(runs: readonly PressureRun[]): string {
  const header = [
    'load',
    'gw',
    'contender',
    'calls',
    'p50 ms',
    'p90 ms',
    'p99 ms',
    'goodput',
    'shed',
    'hit',
    'over',
    'under',
    'p90/oracle',
  ];
  const rows = runs.map((r) => [
    percent(r.level),
    String(r.gateways),
    r.contender,
    String(r.figures.calls),
    ...msCells(r.figures.ttft),
    tenths(r.goodput),
    tenths(r.shed),
    tenths(r.cacheHitShare),
    r.checks ? tenths(r.checks.overTokens / r.checks.reportedTokens) : '-',
    r.checks ? tenths(r.checks.underTokens / r.checks.reportedTokens) : '-',
    formatRatio(r.p90ToOracle),
  ]);
  return formatTable(header, rows);
}

/** TTFT p90 and goodput by load, a line per contender and gateway count. */
function pressureChart(runs: readonly PressureRun[], subtitle: string): string {
  return loadChart(
    runs,
    label,
    [
      { heading: 'time to first token, p90', yLabel: 'ms', value: (r) => r.figures.ttft.p90 },
      { heading: 'goodput', yLabel: '%', value: (r) => r.goodput * 100 },
    ],
    'sluice bench simulate --workload cache-pressure',
    subtitle,
  );
}

function label(run: PressureRun): string {
  return run.gateways === 1 ? run.contender : `${run.contender} x${run.gateways} gw`;
}

function percent(share: number): string {
  return Number.isFinite(share) ? `${Math.round(share * 100)}%` : '-';
}

/** A share to a tenth of a percent, for the table's goodput, shed and hit columns. */
function tenths(share: number): string {
  return Number.isFinite(share) ? `${(share * 100).toFixed(1)}%` : '-';
}

function seconds(ms: number): string {
  return `${(ms / 1000).toFixed(1)}s`;
}
