/**
 * The simulate scenario: the placement scenario's question (how much faster do tokens come back
 * because of where calls go) for fleets larger than the machine asking it. The same workload, the
 * same engine model, the very placer objects the gateway runs and its own walk (placer/walk.ts)
 * are driven by a virtual clock (k6/driver/vsim), so a thousand runners and a million calls take
 * minutes of one core.
 *
 * Two modes:
 * - plan (the default): find the simulated fleet's capacity as the live scenario does (the rate at
 *   which round-robin's p90 time to first token crosses 1 s), then run every contender at each
 *   level of it and print the live scenario's table.
 * - `--check <placement JSON>`: replay every run of a live placement report on its eight-runner
 *   fleet, with its rates, seeds and sessions, and print live and simulated figures side by side.
 *   That is what says whether the plan's figures can be believed.
 */
import { performance } from 'node:perf_hooks';
import { BenchOptionError } from '../errors.ts';
import { loadChart, type LoadPanel } from '../line-chart.ts';
import { checkInteger, resolveBenchOptions, show } from '../options.ts';
import type { BenchOptions } from '../options.ts';
import { formatMs, reportHead, startScenario, writeResults } from '../report.ts';
import type { MachineInfo } from '../report.ts';
import type { PlacementFigures } from '../trace-run.ts';
import type { Scenario, ScenarioContext } from '../types.ts';
import { CACHE_PRESSURE, PLACEMENT_WORKLOAD } from '../workload.ts';
import { DEFAULT_FEED_DELAY_MS } from '../vsim/cache-truth.ts';
import { planCachePressure, runsOf } from './simulate-pressure.ts';
import type { WorkloadShape } from '../workload.ts';
import { createKvAwarePlacer, kvAwareDefaults } from '../../../placer/index.ts';
import type { KvAwareOptions } from '../../../placer/index.ts';
import { H100_8B_PROFILE } from '../../../runner/index.ts';
import { CHECK_TOLERANCE, checkVerdict, compareRun, formatCheck, readLiveReport } from '../vsim/check.ts';
import type { ComparedRun, LiveReport } from '../vsim/check.ts';
import {
  DEFAULT_HOPS,
  GATEWAY_DEFAULTS,
  SIM_CONTENDERS,
  SIZED_PREFIX_AFFINITY,
  simulateRun,
  sizedIndexBlocks,
} from '../vsim/simulation.ts';
import type { SimFleet, SimHops, SimRunSpec } from '../vsim/simulation.ts';
import {
  CAPACITY_TTFT_P90_MS,
  PLACEMENT_FLEET,
  crossing,
  findCapacity,
  formatPlacement,
  placementChart,
} from './placement.ts';
import type { CapacityProbe } from './placement.ts';

/** What `simulate` takes beyond the shared bench options (which it reads only `out` of). */
export interface SimulateOptions extends BenchOptions {
  /** Runners in the simulated fleet, each with its own h100-8b engine and 16 slots; a numeric string too (from the CLI). @default 1000 */
  runners?: number | string;
  /** Calls in each run's trace (each run lasts calls / rate). @default see {@link SIMULATE_DEFAULTS} */
  calls?: number;
  /** Shares of capacity to run at; numbers or numeric strings (from `--levels 0.5,0.8`). @default 0.8 */
  levels?: readonly (number | string)[];
  /** Contenders to run. @default every sluice placer, prefix-affinity with a sized index, then nginx round-robin and least_conn */
  contenders?: readonly string[];
  /** The fleet's capacity in calls/s, skipping the search. */
  capacity?: number;
  /** A placement report (JSON) to check the simulator against instead of planning. */
  check?: string;
  /** Gateway and runner hop added to every sluice call's time to first token, ms. @default 10 */
  sluiceHopMs?: number;
  /** nginx hop added to every nginx call's time to first token, ms. @default 1 */
  nginxHopMs?: number;
  /** `placement` (chat sessions) or `cache-pressure` (many tenants' long contexts, simulate-pressure.ts). @default 'placement' */
  workload?: string;
  /** Gateway counts to run every sluice contender with; numbers or numeric strings. @default [1] */
  gateways?: readonly (number | string)[];
  /** Goodput's target: a call is good when its first token came within this, ms. @default 1000 */
  ttftTarget?: number;
  /** How late an engine's cache events reach the gateways (kv-aware's truth), ms. @default 50 */
  feedDelayMs?: number;
  /** cache-pressure: the tenants' contexts over the fleet's prefix cache, 0.05 to 2. @default 0.73 */
  cacheDemand?: number;
  /** Options for `kv-aware` and the oracle (`loadWeight`, `overheadTokens`, the guard's thresholds). @default {} */
  kvAware?: KvAwareOptions;
}

/** The workloads `--workload` takes. */
export const SIM_WORKLOADS: readonly string[] = Object.freeze(['placement', 'cache-pressure']);

/** The bounds of {@link SimulateOptions}. */
const SIMULATE_LIMITS = Object.freeze({
  maxRunners: 10_000,
  /** Fewest calls per run: below this a run is mostly warm-up. */
  minCalls: 1_000,
  maxCalls: 5_000_000,
  /** Highest level: twice the capacity is deep overload already. */
  maxLevel: 2,
  maxHopMs: 1_000,
  /** Highest capacity accepted from --capacity, calls/s: a thousand calls/s per runner is no H100. */
  maxCapacityPerRunner: 1_000,
  maxGateways: 16,
  maxTtftTargetMs: 600_000,
  maxFeedDelayMs: 60_000,
  minCacheDemand: 0.05,
  maxCacheDemand: 2,
});

/**
 * The defaults: 1,000 runners, all ten contenders (prefix-affinity twice: with its default index
 * and with one sized for the rate; kv-aware on the feed, and the oracle) at 80 % of capacity, one
 * gateway, each replaying the same trace of 143,000 calls, so about 1.4 million calls in all;
 * several minutes on this 2-core machine, the capacity search included. The live scenario's three levels with a million-call trace each
 * would be 21 million simulated calls, hours here: prefix-affinity alone costs 1 to 1.5 ms of CPU
 * per placement at 1,000 runners (it hashes every ~8,000-character prompt and keeps its index, as
 * in the live gateway), the other load-aware placers 0.15 to 0.2 ms (every runner's load read per
 * call). `--levels 0.5,0.8,1` runs all three, `--calls 1000000` million-call traces.
 */
export const SIMULATE_DEFAULTS = Object.freeze({
  runners: 1_000,
  calls: 143_000,
  levels: Object.freeze([0.8]) as readonly number[],
  contenders: SIM_CONTENDERS,
  workload: 'placement',
  gateways: Object.freeze([1]) as readonly number[],
  /**
   * Goodput's target, ms: the placement scenario's capacity bound. On the cache-pressure workload
   * a context's prefill alone takes 1.5 s, so within 1 s means the context was found cached and
   * the call did not queue; a 2 s target would count a miss on an idle engine as good.
   */
  ttftTargetMs: CAPACITY_TTFT_P90_MS,
  feedDelayMs: DEFAULT_FEED_DELAY_MS,
  cacheDemand: CACHE_PRESSURE.demand,
});

/** {@link SimulateOptions} validated, with defaults filled in. */
export interface ResolvedSimulateOptions {
  readonly out: string;
  readonly runners: number;
  readonly calls: number;
  readonly levels: readonly number[];
  readonly contenders: readonly string[];
  readonly capacity: number | undefined;
  readonly check: string | undefined;
  readonly hops: SimHops;
  readonly workload: string;
  readonly gateways: readonly number[];
  readonly ttftTargetMs: number;
  readonly feedDelayMs: number;
  readonly cacheDemand: number;
  readonly kvAware: KvAwareOptions;
  /** Whether `calls` was given rather than defaulted: the cache-pressure plan sizes its runs by time otherwise. */
  readonly callsGiven: boolean;
}

/**
 * Validates `raw` and fills in defaults.
 * @throws {BenchOptionError} naming the first bad option and its value.
 */
export function resolveSimulateOptions(raw: SimulateOptions = {}): ResolvedSimulateOptions {
  const { out } = resolveBenchOptions(raw);
  const runners = checkInteger(
    'runners',
    numeric(raw.runners ?? SIMULATE_DEFAULTS.runners),
    1,
    SIMULATE_LIMITS.maxRunners,
  );
  return Object.freeze({
    out,
    runners,
    calls: checkInteger(
      'calls',
      raw.calls ?? SIMULATE_DEFAULTS.calls,
      SIMULATE_LIMITS.minCalls,
      SIMULATE_LIMITS.maxCalls,
    ),
    levels: checkLevels(raw.levels ?? SIMULATE_DEFAULTS.levels),
    contenders: checkContenders(raw.contenders ?? SIMULATE_DEFAULTS.contenders),
    capacity:
      raw.capacity === undefined
        ? undefined
        : checkNumber('capacity', raw.capacity, 0, SIMULATE_LIMITS.maxCapacityPerRunner * runners, 'calls/s'),
    check: raw.check === undefined ? undefined : checkPath(raw.check),
    workload: checkWorkload(raw.workload ?? SIMULATE_DEFAULTS.workload),
    gateways: checkGateways(raw.gateways ?? SIMULATE_DEFAULTS.gateways),
    ttftTargetMs: checkNumber(
      'ttftTarget',
      raw.ttftTarget ?? SIMULATE_DEFAULTS.ttftTargetMs,
      0,
      SIMULATE_LIMITS.maxTtftTargetMs,
      'ms',
    ),
    feedDelayMs: checkNumber(
      'feedDelayMs',
      numeric(raw.feedDelayMs ?? SIMULATE_DEFAULTS.feedDelayMs),
      0,
      SIMULATE_LIMITS.maxFeedDelayMs,
      'ms',
      true,
    ),
    cacheDemand: checkNumber(
      'cacheDemand',
      numeric(raw.cacheDemand ?? SIMULATE_DEFAULTS.cacheDemand),
      SIMULATE_LIMITS.minCacheDemand,
      SIMULATE_LIMITS.maxCacheDemand,
      'of the cache',
      true,
    ),
    kvAware: checkKvAware(raw.kvAware ?? {}),
    callsGiven: raw.calls !== undefined,
    hops: {
      sluiceHopMs: checkNumber(
        'sluiceHopMs',
        raw.sluiceHopMs ?? DEFAULT_HOPS.sluiceHopMs,
        0,
        SIMULATE_LIMITS.maxHopMs,
        'ms',
        true,
      ),
      nginxHopMs: checkNumber(
        'nginxHopMs',
        raw.nginxHopMs ?? DEFAULT_HOPS.nginxHopMs,
        0,
        SIMULATE_LIMITS.maxHopMs,
        'ms',
        true,
      ),
    },
  });
}

/**
 * A finite number up to `max`, above `min` (or from `min` on, with `fromMin`).
 * @throws {BenchOptionError} naming `name` and the value.
 */
function checkNumber(name: string, value: unknown, min: number, max: number, unit: string, fromMin = false): number {
  const low = typeof value === 'number' && (fromMin ? value >= min : value > min);
  if (typeof value !== 'number' || !Number.isFinite(value) || !low || value > max) {
    const range = fromMin ? `between ${min} and ${max} ${unit}` : `above ${min} and at most ${max} ${unit}`;
    throw new BenchOptionError(name, `${name} must be a number ${range}, got ${show(value)}`);
  }
  return value;
}

/** A numeric string as its number (the CLI's lists and strings); anything else as it is, for the checks to refuse. */
function numeric(value: unknown): unknown {
  return typeof value === 'string' && /^\s*-?\d+(\.\d+)?\s*$/.test(value) ? Number(value) : value;
}

function checkLevels(levels: readonly (number | string)[]): number[] {
  if (!Array.isArray(levels) || levels.length === 0)
    throw new BenchOptionError(
      'levels',
      `levels must list at least one share of capacity, e.g. 0.5,0.8,1; got ${show(levels)}`,
    );
  const parsed = levels.map((level) =>
    checkNumber('levels', numeric(level), 0, SIMULATE_LIMITS.maxLevel, 'x capacity'),
  );
  return [...new Set(parsed)].sort((a, b) => a - b);
}

function checkContenders(contenders: readonly string[]): string[] {
  if (!Array.isArray(contenders) || contenders.length === 0)
    throw new BenchOptionError('contenders', `contenders must name at least one of ${SIM_CONTENDERS.join(', ')}`);
  for (const name of contenders) {
    if (!SIM_CONTENDERS.includes(name))
      throw new BenchOptionError(
        'contenders',
        `contenders: unknown contender ${show(name)}; contenders: ${SIM_CONTENDERS.join(', ')}`,
      );
  }
  // In the placement scenario's order, whatever order they were given in.
  return SIM_CONTENDERS.filter((name) => contenders.includes(name));
}

/** The kv-aware options, checked by creating the placer with them, so a bad one fails before any run. */
function checkKvAware(options: unknown): KvAwareOptions {
  if (options === null || typeof options !== 'object' || Array.isArray(options))
    throw new BenchOptionError('kvAware', `kvAware must be an object of kv-aware options, got ${show(options)}`);
  const allowed = new Set(Object.keys(kvAwareDefaults));
  for (const key of Object.keys(options)) {
    if (!allowed.has(key))
      throw new BenchOptionError(
        'kvAware',
        `kvAware: unknown option ${show(key)}; options: ${[...allowed].join(', ')}`,
      );
  }
  try {
    createKvAwarePlacer(options as KvAwareOptions);
  } catch (error) {
    throw new BenchOptionError('kvAware', `kvAware: ${(error as Error).message}`);
  }
  return Object.freeze({ ...(options as KvAwareOptions) });
}

function checkWorkload(workload: unknown): string {
  if (typeof workload !== 'string' || !SIM_WORKLOADS.includes(workload))
    throw new BenchOptionError(
      'workload',
      `workload must be one of ${SIM_WORKLOADS.join(', ')}, got ${show(workload)}`,
    );
  return workload;
}

function checkGateways(gateways: readonly (number | string)[]): number[] {
  if (!Array.isArray(gateways) || gateways.length === 0)
    throw new BenchOptionError(
      'gateways',
      `gateways must list at least one gateway count, e.g. 1,3; got ${show(gateways)}`,
    );
  const counts = gateways.map((g) => checkInteger('gateways', numeric(g), 1, SIMULATE_LIMITS.maxGateways));
  return [...new Set(counts)].sort((a, b) => a - b);
}

function checkPath(path: unknown): string {
  if (typeof path !== 'string' || path === '')
    throw new BenchOptionError('check', `check must be the path of a placement report (JSON), got ${show(path)}`);
  return path;
}

/** Calls due before every turn number is present: the trace's own warm-up, as in the live scenario. */
function warmupOf(shape: WorkloadShape): number {
  return (shape.turns - 1) * shape.thinkMs;
}

/** The measured window of each capacity probe, after the warm-up: the live scenario's default. */
const PROBE_MEASURE_MS = 10_000;

/** One contender at one level, as the placement report has it, with what the run cost. */
export interface SimulatedRun {
  level: number;
  rate: number;
  seed: number;
  firstSession: number;
  /** The contender, with ` x<N> gw` after it when N gateways placed its calls. */
  contender: string;
  gateways: number;
  /** Calls in the trace, warm-up included. */
  calls: number;
  measureMs: number;
  figures: PlacementFigures;
  cacheHitShare: number;
  /** Calls that found every runner full and waited in the gateway. */
  waited: number;
  /** Most calls waiting in one engine's queue at once: 0 through sluice, where the gateway holds them. */
  engineQueuePeak: number;
  wallMs: number;
}

/** The `simulate` scenario. */
export const simulate: Scenario = {
  summary:
    'the placement scenario on a virtual clock: 1,000 simulated runners by default (--runners, --calls, --levels, --contenders, --capacity), or --check <placement JSON> against a live run',
  async run(raw: BenchOptions, ctx: ScenarioContext) {
    const options = resolveSimulateOptions(raw as SimulateOptions);
    if (options.check !== undefined) return check(options, options.check, ctx);
    return options.workload === 'cache-pressure' ? planCachePressure(options, ctx) : plan(options, ctx);
  },
};

/** Plan mode: capacity, then every contender at every level. */
async function plan(options: ResolvedSimulateOptions, ctx: ScenarioContext): Promise<{ files: string[] }> {
  const { progress, write, startedAt, machine } = startScenario(ctx);
  const shape = PLACEMENT_WORKLOAD;
  const fleet: SimFleet = { runners: options.runners, slots: PLACEMENT_FLEET.slots, profile: H100_8B_PROFILE };
  const warmupMs = warmupOf(shape);
  const started = performance.now();
  let simulatedCalls = 0;
  const spec = (contender: string, rate: number, seed: number, measureMs: number, gateways = 1): SimRunSpec => ({
    gateways,
    feedDelayMs: options.feedDelayMs,
    kvAware: options.kvAware,
    shape,
    fleet,
    contender,
    rate,
    seed,
    firstSession: seed * 1_000_000,
    warmupMs,
    measureMs,
    hops: options.hops,
  });
  progress(
    `${options.contenders.length} contenders x ${options.levels.length} level${options.levels.length === 1 ? '' : 's'} (${options.levels.map(percent).join(', ')}), traces of about ${options.calls.toLocaleString('en')} calls each, ${(options.calls * options.contenders.length * options.levels.length).toLocaleString('en')} in all\n`,
  );
  if (isDefaultPlan(options)) progress(`${DEFAULT_NOTE}\n`);

  let capacity: { rate: number; measured: boolean; probes: CapacityProbe[] };
  if (options.capacity !== undefined) {
    capacity = { rate: options.capacity, measured: false, probes: [] };
    progress(`capacity taken from --capacity: ${options.capacity} calls/s\n`);
  } else {
    // The live search's rates are for eight runners; the simulated fleet's scale with its size.
    const scale = options.runners / PLACEMENT_FLEET.engines;
    progress(
      `finding capacity of ${options.runners} runners: raising round-robin's rate until its p90 time to first token passes ${CAPACITY_TTFT_P90_MS} ms (${(warmupMs + PROBE_MEASURE_MS) / 1000}s of virtual time per probe)\n`,
    );
    let seed = 1;
    const probes = await findCapacity(async (liveRate) => {
      const rate = liveRate * scale;
      const t0 = performance.now();
      const result = await simulateRun(
        spec('round-robin', rate, seed++, PROBE_MEASURE_MS),
        ctx.signal ? { signal: ctx.signal } : {},
      );
      simulatedCalls += result.records.length;
      const f = result.figures;
      const p90 = f.errorCount > f.calls * 0.01 ? Infinity : f.ttft.p90;
      progress(
        `  ${rate.toFixed(0)} calls/s: p90 ${formatMs(p90)} ms, ${f.errorCount} errors (${result.records.length} calls in ${seconds(performance.now() - t0)})\n`,
      );
      return p90;
    });
    capacity = {
      rate: crossing(probes, CAPACITY_TTFT_P90_MS) * scale,
      measured: true,
      probes: probes.map((p) => ({ rate: p.rate * scale, p90: p.p90 })),
    };
    progress(`capacity: ${capacity.rate.toFixed(0)} calls/s\n`);
  }

  const lastLevel = options.levels[options.levels.length - 1]!;
  const shortest = (options.calls / (lastLevel * capacity.rate)) * 1000 - warmupMs;
  if (shortest < 1_000) {
    const fewest = Math.ceil(((warmupMs + 1_000) / 1000) * lastLevel * capacity.rate);
    throw new BenchOptionError(
      'calls',
      `calls: ${options.calls} calls at ${(lastLevel * capacity.rate).toFixed(0)} calls/s leave less than 1s measured after the ${warmupMs / 1000}s warm-up; give --calls ${fewest} or more`,
    );
  }

  const runs: SimulatedRun[] = [];
  for (const [index, level] of options.levels.entries()) {
    const rate = level * capacity.rate;
    const seed = 100 + index;
    const measureMs = Math.floor((options.calls / rate) * 1000 - warmupMs);
    for (const [gateways, contender] of runsOf(options)) {
      const t0 = performance.now();
      const s = spec(contender, rate, seed, measureMs, gateways);
      const result = await simulateRun(s, ctx.signal ? { signal: ctx.signal } : {});
      const wallMs = performance.now() - t0;
      simulatedCalls += result.records.length;
      const f = result.figures;
      runs.push({
        level,
        rate,
        seed,
        firstSession: s.firstSession,
        contender: gateways === 1 || contender.startsWith('nginx') ? contender : `${contender} x${gateways} gw`,
        gateways,
        calls: result.records.length,
        measureMs,
        figures: f,
        cacheHitShare: result.cacheHitShare,
        waited: result.waited,
        engineQueuePeak: result.engineQueuePeak,
        wallMs,
      });
      const sized =
        contender === SIZED_PREFIX_AFFINITY ? ` (maxBlocks ${sizedIndexBlocks(shape, rate).toLocaleString('en')})` : '';
      progress(
        `  ${percent(level)} (${rate.toFixed(0)}/s) ${contender}${sized}: ttft p50 ${formatMs(f.ttft.p50)} p90 ${formatMs(f.ttft.p90)} ms, ${f.errorCount} errors; ${result.records.length} calls in ${seconds(wallMs)} (${perSecond(result.records.length, wallMs)} calls/s)\n`,
      );
    }
  }
  const wallMs = performance.now() - started;

  write(
    `\nsluice bench simulate: ${machine.cpus} cpus, node ${machine.node}, ${startedAt.toISOString()}, ${options.runners} simulated runners (${fleet.slots} slots, ${PLACEMENT_FLEET.profile}), capacity ${capacity.rate.toFixed(0)} calls/s (${capacity.measured ? 'found by simulation' : 'given'}), traces of about ${options.calls.toLocaleString('en')} calls after ${warmupMs / 1000}s warm-up, hops sluice ${options.hops.sluiceHopMs} ms, nginx ${options.hops.nginxHopMs} ms\n\n`,
  );
  write(`${formatPlacement(runs)}\n\n`);
  if (options.contenders.includes(SIZED_PREFIX_AFFINITY)) {
    const sizes = options.levels.map(
      (level) => `${sizedIndexBlocks(shape, level * capacity.rate).toLocaleString('en')} at ${percent(level)}`,
    );
    write(
      `${SIZED_PREFIX_AFFINITY}: prefix-affinity with maxBlocks sized by docs/placers.md's rule (calls/s x blocks per prompt x the gap between turns): ${sizes.join(', ')}\n`,
    );
  }
  if (isDefaultPlan(options)) write(`${DEFAULT_NOTE}\n`);
  write(
    `wall time ${seconds(wallMs)} for ${simulatedCalls.toLocaleString('en')} simulated calls (capacity probes included): ${perSecond(simulatedCalls, wallMs)} calls/s\n`,
  );

  const report = {
    ...reportHead('simulate', startedAt, machine),
    workload: shape,
    fleet: { runners: options.runners, slots: fleet.slots, profile: PLACEMENT_FLEET.profile },
    gateway: GATEWAY_DEFAULTS,
    hops: options.hops,
    warmupMs,
    calls: options.calls,
    capacity,
    runs,
    wallMs,
    simulatedCalls,
  };
  const subtitle = `${options.runners} simulated runners x ${PLACEMENT_FLEET.profile}, 100% = ${capacity.rate.toFixed(0)} calls/s, ~${options.calls.toLocaleString('en')} calls per run; ${machine.cpus} cpus, node ${machine.node}, ${startedAt.toISOString().slice(0, 16)}Z`;
  const files = await writeResults(
    ctx,
    options.out,
    'simulate',
    startedAt,
    report,
    placementChart(runs, 'sluice bench simulate: time to first token by load', subtitle),
    write,
  );
  return { files };
}

/** Said with the default plan's figures: what the default leaves out, and how to get it. */
const DEFAULT_NOTE =
  "default plan: one level (80%) and ~143,000-call traces, about 1.4 million calls; not the live scenario's three levels of million-call traces, which would take hours here. --levels 0.5,0.8,1 runs three levels, --calls 1000000 million-call traces.";

function isDefaultPlan(options: ResolvedSimulateOptions): boolean {
  return (
    options.calls === SIMULATE_DEFAULTS.calls &&
    options.levels.join() === SIMULATE_DEFAULTS.levels.join() &&
    options.contenders.length === SIM_CONTENDERS.length
  );
}

/** Check mode: every run of a live placement report, simulated and compared. */
async function check(
  options: ResolvedSimulateOptions,
  path: string,
  ctx: ScenarioContext,
): Promise<{ files: string[] }> {
  const { progress, write, startedAt, machine } = startScenario(ctx);
  const live = await readLiveReport(path);
  const fleet: SimFleet = { runners: live.fleet.engines, slots: live.fleet.slots, profile: live.fleet.profile };
  const started = performance.now();
  let simulatedCalls = 0;
  const rows: ComparedRun[] = [];
  const skipped: string[] = [];
  progress(
    `checking against ${path}: ${live.runs.length} runs on ${fleet.runners} runners (${live.fleet.profileName}), ${live.warmupMs / 1000}s warm-up, ${live.measureMs / 1000}s measured\n`,
  );
  for (const run of live.runs) {
    if (!SIM_CONTENDERS.includes(run.contender)) {
      skipped.push(run.contender);
      continue;
    }
    const result = await simulateRun(
      {
        shape: live.workload,
        fleet,
        contender: run.contender,
        rate: run.rate,
        seed: run.seed,
        firstSession: run.firstSession,
        warmupMs: live.warmupMs,
        measureMs: live.measureMs,
        hops: options.hops,
      },
      ctx.signal ? { signal: ctx.signal } : {},
    );
    simulatedCalls += result.records.length;
    rows.push(compareRun(run, result));
  }
  const wallMs = performance.now() - started;

  write(
    `\nsluice bench simulate --check ${path}: ${machine.cpus} cpus, node ${machine.node}, ${startedAt.toISOString()}, ${fleet.runners} runners, hops sluice ${options.hops.sluiceHopMs} ms, nginx ${options.hops.nginxHopMs} ms; difference = (simulated - live) / live\n\n`,
  );
  write(`${formatCheck(rows)}\n\n`);
  if (skipped.length > 0) write(`not simulated (unknown contenders): ${[...new Set(skipped)].join(', ')}\n`);
  const hint = calibrationHint(rows, options.hops);
  if (hint) write(`${hint}\n`);
  write(
    `wall time ${seconds(wallMs)} for ${simulatedCalls.toLocaleString('en')} simulated calls: ${perSecond(simulatedCalls, wallMs)} calls/s\n`,
  );
  write(`${checkVerdict(rows)}\n`);

  const report = {
    ...reportHead('simulate-check', startedAt, machine),
    source: path,
    tolerance: CHECK_TOLERANCE,
    hops: options.hops,
    fleet: { runners: fleet.runners, slots: fleet.slots, profile: live.fleet.profileName },
    warmupMs: live.warmupMs,
    measureMs: live.measureMs,
    rows,
    verdict: checkVerdict(rows),
    wallMs,
    simulatedCalls,
  };
  const files = await writeResults(
    ctx,
    options.out,
    'simulate-check',
    startedAt,
    report,
    checkChart(rows, live, machine, startedAt),
    write,
  );
  return { files };
}

/**
 * How far the hops are off, read where queueing is least: at the lowest level, the mean of live
 * minus simulated TTFT p50 over the sluice contenders and over nginx's. Undefined without rows.
 */
export function calibrationHint(rows: readonly ComparedRun[], hops: SimHops): string | undefined {
  const lowest = Math.min(...rows.map((r) => r.level));
  const gap = (nginx: boolean): number => {
    const gaps = rows
      .filter((r) => r.level === lowest && r.contender.startsWith('nginx') === nginx)
      .map((r) => r.figures.find((f) => f.name === 'ttft p50')!)
      .filter((f) => Number.isFinite(f.live) && Number.isFinite(f.simulated))
      .map((f) => f.live - f.simulated);
    return gaps.length > 0 ? gaps.reduce((a, b) => a + b, 0) / gaps.length : Number.NaN;
  };
  const sluice = gap(false);
  const nginx = gap(true);
  if (!Number.isFinite(sluice) && !Number.isFinite(nginx)) return undefined;
  const part = (label: string, value: number, current: number, flag: string): string =>
    Number.isFinite(value)
      ? `${label} ${value >= 0 ? '+' : ''}${value.toFixed(1)} ms (${flag} ${Math.max(0, current + value).toFixed(1)} would close it)`
      : `${label} -`;
  return `calibration: live minus simulated TTFT p50 at ${percent(lowest)} load, mean over contenders: ${part('sluice', sluice, hops.sluiceHopMs, '--sluice-hop-ms')}, ${part('nginx', nginx, hops.nginxHopMs, '--nginx-hop-ms')}`;
}

/** Live and simulated TTFT p50 and p90 by level, a line per contender in each panel. */
function checkChart(rows: readonly ComparedRun[], live: LiveReport, machine: MachineInfo, startedAt: Date): string {
  const panel = (figure: 'ttft p50' | 'ttft p90', side: 'live' | 'simulated'): LoadPanel<ComparedRun> => ({
    heading: `${figure}, ${side}`,
    yLabel: 'ms',
    value: (r) => r.figures.find((f) => f.name === figure)![side],
  });
  const subtitle = `${live.fleet.engines} runners x ${live.fleet.profileName}, ${live.measureMs / 1000}s measured per run; ${machine.cpus} cpus, node ${machine.node}, ${startedAt.toISOString().slice(0, 16)}Z`;
  return loadChart(
    rows,
    (r) => r.contender,
    [
      panel('ttft p50', 'live'),
      panel('ttft p50', 'simulated'),
      panel('ttft p90', 'live'),
      panel('ttft p90', 'simulated'),
    ],
    'sluice bench simulate --check: live vs simulated time to first token',
    subtitle,
  );
}

function percent(level: number): string {
  return `${Math.round(level * 100)}%`;
}

function seconds(ms: number): string {
  return `${(ms / 1000).toFixed(1)}s`;
}

function perSecond(count: number, ms: number): string {
  return ms > 0 ? Math.round((count * 1000) / ms).toLocaleString('en') : '-';
}
