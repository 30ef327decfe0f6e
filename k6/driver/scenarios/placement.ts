/**
 * The placement scenario: how much faster tokens come back because of where calls go. Eight
 * simulated H100 engines serve chat sessions that share system prompts and come back for several
 * turns (k6/driver/workload.ts); every sluice placer, each in its own gateway in front of the same
 * eight runners, and nginx round-robin and least_conn in front of the same engines, get the same
 * open-loop traffic at 50 %, 80 % and 100 % of the fleet's capacity, one after another.
 *
 * Capacity is measured, not assumed: first the arrival rate is raised until round-robin's p90
 * time to first token passes 1 s, then narrowed down, and that rate is 100 %. The contenders run
 * in a rotated order at each level; each run uses sessions no engine has seen (the same arrivals,
 * other words), so no contender inherits cached histories from the one before it.
 */
import { setTimeout as delay } from 'node:timers/promises';
import { loadChart, type LoadPanel } from '../line-chart.ts';
import { runSignal } from '../load.ts';
import { resolveBenchOptions } from '../options.ts';
import type { BenchOptions } from '../options.ts';
import { prefixCacheTotals, startPlacementFleet } from '../placement-fleet.ts';
import type { PlacementFleet } from '../placement-fleet.ts';
import { formatMs, formatRatio, formatTable, msCells, reportHead, startScenario, writeResults } from '../report.ts';
import type { ReportHead } from '../report.ts';
import { ratio } from '../stats.ts';
import { TraceTarget, placementFigures, replay } from '../trace-run.ts';
import type { PlacementFigures } from '../trace-run.ts';
import { PLACEMENT_WORKLOAD, traceCalls } from '../workload.ts';
import type { WorkloadShape } from '../workload.ts';
import type { Scenario, ScenarioContext } from '../types.ts';

/** Shares of the measured capacity each contender is run at. */
const PLACEMENT_LEVELS: readonly number[] = Object.freeze([0.5, 0.8, 1]);

/** The sluice placers measured, each in its own gateway. */
const PLACEMENT_PLACERS: readonly string[] = Object.freeze([
  'round-robin',
  'consistent-hash',
  'least-loaded',
  'load-weighted',
  'prefix-affinity',
]);

/** The fleet: eight engines on the H100 profile, a runner each with as many slots as the engine runs sequences. */
export const PLACEMENT_FLEET = Object.freeze({ engines: 8, slots: 16, profile: 'h100-8b' });

/** Round-robin's p90 time to first token at 100 % of capacity, by definition. */
export const CAPACITY_TTFT_P90_MS = 1_000;

/** The capacity search: the first rate tried, the step up, and the most steps before giving up. */
const SEARCH: Readonly<{ startRate: number; factor: number; maxSteps: number; bisections: number; maxRate: number }> =
  Object.freeze({ startRate: 20, factor: 1.3, maxSteps: 12, bisections: 2, maxRate: 2_000 });

/** Per-call limits on the client side: long enough for any queue this fleet builds, bounded all the same. */
const CALL_TIMEOUT_MS = 60_000;
const CONNECTIONS = 1_024;
const MAX_IN_FLIGHT = 4_096;

/** One contender at one load. */
export interface PlacementRun {
  level: number;
  rate: number;
  seed: number;
  firstSession: number;
  contender: string;
  figures: PlacementFigures;
  /** Engines' prefix-cache hit tokens / queried prompt tokens over the measured window. */
  cacheHitShare: number;
}

/** A probe of the capacity search: round-robin's p90 time to first token at `rate`. */
export interface CapacityProbe {
  rate: number;
  p90: number;
}

/** The JSON report; the simulator's `--check` reads it. */
export interface PlacementReport extends ReportHead<'placement'> {
  workload: WorkloadShape;
  fleet: typeof PLACEMENT_FLEET;
  warmupMs: number;
  measureMs: number;
  capacity: { rate: number; measured: boolean; probes: CapacityProbe[] };
  runs: PlacementRun[];
  nginxSkipped?: string;
}

/** The `placement` scenario. */
export const placement: Scenario = {
  summary:
    'where calls go: every sluice placer vs nginx round-robin and least_conn on 8 simulated H100 engines, at 50/80/100% of measured capacity',
  async run(raw: BenchOptions, ctx: ScenarioContext) {
    const shape = PLACEMENT_WORKLOAD;
    const lead = (shape.turns - 1) * shape.thinkMs;
    const options = resolveBenchOptions({ ...raw, duration: raw.duration ?? 20_000, warmup: raw.warmup ?? lead });
    const { progress, write, startedAt, machine } = startScenario(ctx);
    // Calls due before every turn number is present belong to sessions cut short by the trace's
    // start; they warm the caches but are never measured.
    const warmupMs = Math.max(options.warmup, lead);
    if (warmupMs > options.warmup)
      progress(
        `warm-up raised to ${warmupMs / 1000}s: a session spans ${lead / 1000}s, and calls before that are warm-up\n`,
      );
    const measureMs = options.duration;
    const targets: TraceTarget[] = [];
    // Every call in flight listens on the signal: one run-wide signal allowed that many listeners.
    const { signal, release } = runSignal(ctx.signal);
    const aborts = signal ? { signal } : {};
    let fleet: PlacementFleet | undefined;
    let nextSession = 1_000_000;
    const session = (): number => (nextSession += 1_000_000);
    try {
      progress(
        `starting ${PLACEMENT_FLEET.engines} sim engines (${PLACEMENT_FLEET.profile}), ${PLACEMENT_FLEET.engines} runners (${PLACEMENT_FLEET.slots} slots), ${PLACEMENT_PLACERS.length} gateways${options.nginx ? ' and nginx' : ''}...\n`,
      );
      fleet = await startPlacementFleet({
        env: ctx.env,
        startService: ctx.startService,
        logLevel: options.logLevel,
        engines: PLACEMENT_FLEET.engines,
        slots: PLACEMENT_FLEET.slots,
        model: shape.model,
        placers: PLACEMENT_PLACERS,
        nginx: options.nginx,
      });
      if (fleet.nginxSkipped) write(`${fleet.nginxSkipped}\n`);
      for (const c of fleet.contenders) targets.push(new TraceTarget(c.name, c.url, CONNECTIONS));
      await preflight(targets, shape, session);
      const runTrace = (target: TraceTarget, rate: number, seed: number, firstSession: number) =>
        replay(target, shape, traceCalls(shape, { rate, durationMs: warmupMs + measureMs, seed, firstSession }), {
          timeoutMs: CALL_TIMEOUT_MS,
          maxInFlight: MAX_IN_FLIGHT,
          ...aborts,
        });

      const roundRobin = targets.find((t) => t.name === 'round-robin')!;
      let capacity: PlacementReport['capacity'];
      if (raw.rate !== undefined) {
        capacity = { rate: options.rate, measured: false, probes: [] };
        progress(`capacity taken from --rate: ${options.rate} calls/s\n`);
      } else {
        const probeMs = Math.max(5_000, Math.round(measureMs / 2));
        progress(
          `finding capacity: raising round-robin's rate until its p90 time to first token passes ${CAPACITY_TTFT_P90_MS} ms (${(warmupMs + probeMs) / 1000}s per probe)\n`,
        );
        let seed = 1;
        const probes = await findCapacity(async (rate) => {
          const records = await replay(
            roundRobin,
            shape,
            traceCalls(shape, { rate, durationMs: warmupMs + probeMs, seed: seed++, firstSession: session() }),
            { timeoutMs: CALL_TIMEOUT_MS, maxInFlight: MAX_IN_FLIGHT, ...aborts },
          );
          const figures = placementFigures(records, warmupMs, probeMs);
          const p90 = figures.errorCount > figures.calls * 0.01 ? Infinity : figures.ttft.p90;
          progress(`  ${rate.toFixed(1)} calls/s: p90 ${formatMs(p90)} ms, ${figures.errorCount} errors\n`);
          interrupted(ctx.signal);
          return p90;
        });
        capacity = { rate: crossing(probes, CAPACITY_TTFT_P90_MS), measured: true, probes };
        progress(`capacity: ${capacity.rate.toFixed(1)} calls/s\n`);
      }

      const runs: PlacementRun[] = [];
      for (const [index, level] of PLACEMENT_LEVELS.entries()) {
        const rate = level * capacity.rate;
        const seed = 100 + index;
        // Rotated per level, so no contender always runs first (on the coldest caches) or last.
        const order = targets.map((_, i) => targets[(i + index) % targets.length]!);
        for (const target of order) {
          const firstSession = session();
          // The engines count a prompt when its prefill starts, close to its due time, so
          // readings at the window's edges count the measured calls' prompts and few others.
          const engines = fleet.engines;
          const before = delay(warmupMs).then(() => prefixCacheTotals(engines));
          const after = delay(warmupMs + measureMs).then(() => prefixCacheTotals(engines));
          const records = await runTrace(target, rate, seed, firstSession);
          interrupted(ctx.signal);
          const [start, end] = await Promise.all([before, after]);
          const figures = placementFigures(records, warmupMs, measureMs);
          const cacheHitShare = ratio(end.hits - start.hits, end.queries - start.queries);
          runs.push({ level, rate, seed, firstSession, contender: target.name, figures, cacheHitShare });
          progress(
            `  ${percent(level)} (${rate.toFixed(1)}/s) ${target.name}: ttft p50 ${formatMs(figures.ttft.p50)} p90 ${formatMs(figures.ttft.p90)} ms, ${figures.errorCount} errors\n`,
          );
        }
      }

      const report: PlacementReport = {
        ...reportHead('placement', startedAt, machine),
        workload: shape,
        fleet: PLACEMENT_FLEET,
        warmupMs,
        measureMs,
        capacity,
        runs,
        ...(fleet.nginxSkipped ? { nginxSkipped: fleet.nginxSkipped } : {}),
      };
      write(
        `\nsluice bench placement: ${machine.cpus} cpus, node ${machine.node}, ${startedAt.toISOString()}, ${PLACEMENT_FLEET.engines} engines ${PLACEMENT_FLEET.profile}, capacity ${capacity.rate.toFixed(1)} calls/s (${capacity.measured ? 'measured' : 'given'}), ${measureMs / 1000}s measured after ${warmupMs / 1000}s warm-up per run\n\n`,
      );
      write(`${formatPlacement(runs)}\n\n`);
      const subtitle = `${machine.cpus} cpus, node ${machine.node}, ${startedAt.toISOString().slice(0, 16)}Z, ${PLACEMENT_FLEET.engines} x ${PLACEMENT_FLEET.profile}, 100% = ${capacity.rate.toFixed(1)} calls/s`;
      const files = await writeResults(
        ctx,
        options.out,
        'placement',
        startedAt,
        report,
        placementChart(runs, 'sluice bench placement: time to first token by load', subtitle),
        write,
      );
      return { files };
    } finally {
      release();
      await Promise.all(targets.map((t) => t.close().catch(() => undefined)));
      await fleet?.stop();
    }
  },
};

/** One call to every contender: a fleet that cannot answer is reported before any figure is taken. */
async function preflight(targets: readonly TraceTarget[], shape: WorkloadShape, session: () => number): Promise<void> {
  for (const target of targets) {
    const [call] = traceCalls(shape, { rate: 1, durationMs: 1, seed: 0, firstSession: session(), maxCalls: 1 });
    const record = await target.call(
      shape,
      call ?? { at: 0, session: session(), turn: 1, system: 0 },
      performance.now(),
      CALL_TIMEOUT_MS,
    );
    if (record.error !== undefined || record.tokens !== shape.outputTokens) {
      throw new Error(
        `preflight: ${target.name} did not stream ${shape.outputTokens} tokens (${record.error ?? `${record.tokens} tokens`})`,
      );
    }
  }
}

/**
 * The capacity search: from {@link SEARCH}'s start rate, up by its factor until `probe` (a p90
 * time to first token) passes the limit, or down until it does not; then geometric bisections
 * between the last rate under and the first rate over. Returns every probe, in the order taken.
 * @throws {Error} when no rate within the search's bounds crosses the limit.
 */
export async function findCapacity(
  probe: (rate: number) => Promise<number>,
  limitMs: number = CAPACITY_TTFT_P90_MS,
): Promise<CapacityProbe[]> {
  const probes: CapacityProbe[] = [];
  const take = async (rate: number): Promise<CapacityProbe> => {
    const p = { rate, p90: await probe(rate) };
    probes.push(p);
    return p;
  };
  let under: CapacityProbe | undefined;
  let over: CapacityProbe | undefined;
  let rate = SEARCH.startRate;
  for (let step = 0; step < SEARCH.maxSteps && !(under && over); step++) {
    const p = await take(rate);
    if (p.p90 > limitMs) over = over && over.rate < p.rate ? over : p;
    else under = under && under.rate > p.rate ? under : p;
    rate = over && !under ? rate / SEARCH.factor : rate * SEARCH.factor;
    if (rate > SEARCH.maxRate) break;
  }
  if (!under || !over)
    throw new Error(
      `capacity search: no rate between ${(SEARCH.startRate / SEARCH.factor ** SEARCH.maxSteps).toFixed(2)} and ${SEARCH.maxRate} calls/s put round-robin's p90 across ${limitMs} ms (${probes.map((p) => `${p.rate.toFixed(1)}/s: ${formatMs(p.p90)}`).join(', ')})`,
    );
  for (let i = 0; i < SEARCH.bisections; i++) {
    const p = await take(Math.sqrt(under.rate * over.rate));
    if (p.p90 > limitMs) over = p;
    else under = p;
  }
  return probes;
}

/**
 * The rate at which the p90 crosses `limitMs`, interpolated linearly between the highest probe
 * under it and the lowest above it (an infinite p90, a probe with errors, counts as the upper rate).
 */
export function crossing(probes: readonly CapacityProbe[], limitMs: number): number {
  const under = probes.filter((p) => p.p90 <= limitMs).sort((a, b) => b.rate - a.rate)[0];
  const over = probes.filter((p) => p.p90 > limitMs && p.rate > (under?.rate ?? 0)).sort((a, b) => a.rate - b.rate)[0];
  if (!under || !over) throw new Error('crossing needs a probe under the limit and one over it at a higher rate');
  if (!Number.isFinite(over.p90)) return over.rate;
  return under.rate + ((limitMs - under.p90) / (over.p90 - under.p90)) * (over.rate - under.rate);
}

/** The reference a contender's time to first token is compared with: nginx round-robin when it ran, else sluice's. */
export function baselineOf(runs: readonly PlacementRun[]): string {
  return runs.some((r) => r.contender === 'nginx round-robin') ? 'nginx round-robin' : 'round-robin';
}

/** The figures table, by level, with each contender's p50 and p90 relative to the baseline's at that level. */
export function formatPlacement(runs: readonly PlacementRun[]): string {
  const baseline = baselineOf(runs);
  const rows = runs.map((r) => {
    const b = runs.find((o) => o.level === r.level && o.contender === baseline);
    const f = r.figures;
    return [
      percent(r.level),
      r.contender,
      r.rate.toFixed(1),
      String(f.calls),
      String(f.errorCount),
      ...msCells(f.ttft),
      formatMs(f.latency.p50),
      formatMs(f.latency.p90),
      Number.isFinite(f.tokensPerSecond) ? f.tokensPerSecond.toFixed(0) : '-',
      Number.isFinite(r.cacheHitShare) ? `${(r.cacheHitShare * 100).toFixed(0)}%` : '-',
      formatRatio(ratio(f.ttft.p50, b?.figures.ttft.p50 ?? Number.NaN)),
      formatRatio(ratio(f.ttft.p90, b?.figures.ttft.p90 ?? Number.NaN)),
    ];
  });
  return (
    formatTable(
      [
        'load',
        'contender',
        'calls/s',
        'calls',
        'errors',
        'ttft p50',
        'ttft p90',
        'ttft p99',
        'e2e p50',
        'e2e p90',
        'out tok/s',
        'cache hits',
        'p50 vs base',
        'p90 vs base',
      ],
      rows,
    ) +
    `\n(ms; ttft = time to first token from the call's due time; cache hits = engines' prefix-cache hit tokens / prompt tokens; base = ${baseline})`
  );
}

/** Time to first token by load, one line per contender, p50 / p90 / p99 panels. */
export function placementChart(runs: readonly PlacementRun[], title: string, subtitle: string): string {
  const ttft = (key: 'p50' | 'p90' | 'p99'): LoadPanel<PlacementRun> => ({
    heading: `time to first token, ${key}`,
    yLabel: 'ms',
    value: (r) => r.figures.ttft[key],
  });
  return loadChart(runs, (r) => r.contender, [ttft('p50'), ttft('p90'), ttft('p99')], title, subtitle);
}

function percent(level: number): string {
  return `${Math.round(level * 100)}%`;
}

function interrupted(signal: AbortSignal | undefined): void {
  if (signal?.aborted) throw new Error('benchmark interrupted');
}
