/**
 * `bench placement --workload cache-pressure`: the simulator's cache-pressure workload
 * (k6/driver/workload.ts, `cachePressureWorkload`) live, on eight simulated H100 engines that
 * publish their KV-cache events, with runners feeding them to every gateway (placement-fleet.ts,
 * `startCacheFleet`).
 *
 * - Tenants are as many as make their 6,000-token contexts 73 % of the eight engines' prefix
 *   cache; each query is 1,200 tokens of its own on top of its tenant's context.
 * - Before every run the engines are warmed as the simulator warms them: tenant t's context is
 *   sent straight to engine t mod 8. Every run (and every capacity probe) uses tenants no engine
 *   has seen, so no contender inherits the caches the one before it left.
 * - 100 % load is kv-aware's capacity with one gateway: the rate at which its p90 time to first
 *   token crosses 1 s (the simulator takes its oracle's, which kv-aware matches there; round-robin
 *   never gets under 1 s, a context's prefill alone being 1.5 s).
 * - Contenders: round-robin, prefix-affinity and kv-aware in a gateway each, kv-aware also across
 *   several gateways taken in turn (as an L4 balancer spreads calls), and nginx round-robin.
 */
import { loadavg } from 'node:os';
import { setTimeout as delay } from 'node:timers/promises';
import { Pool } from 'undici';
import { H100_8B_PROFILE } from '../../../runner/index.ts';
import { BenchOptionError } from '../errors.ts';
import { runSignal } from '../load.ts';
import { resolveBenchOptions } from '../options.ts';
import type { BenchOptions } from '../options.ts';
import { prefixCacheTotals, startCacheFleet } from '../placement-fleet.ts';
import type { CacheFleet, FleetGateway } from '../placement-fleet.ts';
import { formatMs, formatRatio, formatTable, msCells, reportHead, startScenario, writeResults } from '../report.ts';
import { ratio } from '../stats.ts';
import { RotatingTarget, TraceTarget, placementFigures, replay } from '../trace-run.ts';
import type { CallTarget, PlacementFigures } from '../trace-run.ts';
import type { ScenarioContext } from '../types.ts';
import {
  CACHE_PRESSURE,
  cacheDemandOf,
  cachePressureWorkload,
  onTenants,
  traceCalls,
  warmBodyOf,
} from '../workload.ts';
import type { WorkloadShape } from '../workload.ts';
import { CAPACITY_TTFT_P90_MS, PLACEMENT_FLEET, crossing, findCapacity, placementChart } from './placement.ts';
import type { CapacityProbe, PlacementRun } from './placement.ts';
import { goodputOf } from './simulate-pressure.ts';

/** Shares of the measured capacity each contender runs at. */
const LEVELS: readonly number[] = Object.freeze([0.5, 0.8, 1]);

/** Defaults and bounds of the live cache-pressure runs. */
export const LIVE_PRESSURE = Object.freeze({
  warmupMs: 10_000,
  measureMs: 20_000,
  probeMeasureMs: 8_000,
  /** Most gateways kv-aware runs across: each is a process on this machine. */
  maxGateways: 4,
  /** Time for the runners' cache feeds (every 50 ms) to carry the warm-up's blocks, ms. */
  feedSettleMs: 500,
});

const CALL_TIMEOUT_MS = 60_000;
const CONNECTIONS = 1_024;
const MAX_IN_FLIGHT = 4_096;

/** The cache-pressure options `bench placement` reads. */
export interface LivePressureOptions extends BenchOptions {
  /** Gateway counts kv-aware runs with; numbers or numeric strings (from `--gateways 1,3`). @default [1] */
  gateways?: readonly (number | string)[];
  /** Goodput counts calls whose first token came within this, ms. @default 1000 */
  ttftTarget?: number;
}

/** One contender at one level. */
export interface LivePressureRun {
  level: number;
  rate: number;
  contender: string;
  gateways: number;
  figures: PlacementFigures;
  goodput: number;
  shed: number;
  cacheHitShare: number;
}

/** The gateway counts checked: whole numbers from 1 to {@link LIVE_PRESSURE}.maxGateways, 1 always among them. */
export function checkLiveGateways(raw: readonly (number | string)[] | undefined): number[] {
  const counts = (raw ?? [1]).map((v) => (typeof v === 'string' && v.trim() !== '' ? Number(v) : v));
  for (const n of counts) {
    if (typeof n !== 'number' || !Number.isInteger(n) || n < 1 || n > LIVE_PRESSURE.maxGateways)
      throw new BenchOptionError(
        'gateways',
        `invalid gateways ${JSON.stringify(n)}: each must be a whole number from 1 to ${LIVE_PRESSURE.maxGateways}`,
      );
  }
  return [...new Set([1, ...(counts as number[])])].sort((a, b) => a - b);
}

/** The gateway processes: one per single-gateway placer, and kv-aware's further ones. */
export function fleetGateways(counts: readonly number[]): FleetGateway[] {
  const most = Math.max(...counts);
  const extra = Array.from({ length: most - 1 }, (_, i) => ({ name: `kv-aware ${i + 2}`, placer: 'kv-aware' }));
  return [
    { name: 'round-robin', placer: 'round-robin' },
    { name: 'prefix-affinity', placer: 'prefix-affinity' },
    { name: 'kv-aware', placer: 'kv-aware' },
    ...extra,
  ];
}

/** The contenders as targets: each single-gateway placer, kv-aware across each further count, nginx. */
function targetsOf(fleet: CacheFleet, counts: readonly number[]): { target: CallTarget; gateways: number }[] {
  const url = (name: string) => fleet.gateways.get(name)!;
  const targets: { target: CallTarget; gateways: number }[] = ['round-robin', 'prefix-affinity', 'kv-aware'].map(
    (name) => ({ target: new TraceTarget(name, url(name), CONNECTIONS), gateways: 1 }),
  );
  for (const n of counts.filter((c) => c > 1)) {
    const urls = ['kv-aware', ...Array.from({ length: n - 1 }, (_, i) => `kv-aware ${i + 2}`)].map(url);
    targets.push({ target: new RotatingTarget(`kv-aware x${n}`, urls, CONNECTIONS), gateways: n });
  }
  if (fleet.nginx)
    targets.push({ target: new TraceTarget('nginx round-robin', fleet.nginx, CONNECTIONS), gateways: 0 });
  return targets;
}

/**
 * Caches every tenant of [`firstTenant`, `firstTenant + systemPrompts`) on one engine, tenant t on
 * engine (t - firstTenant) mod engines, at most `slots` at a time per engine.
 * @throws {Error} when an engine refuses a warming call.
 */
export async function warmTenants(
  engineUrls: readonly string[],
  shape: WorkloadShape,
  firstTenant: number,
  slots: number,
): Promise<void> {
  await Promise.all(
    engineUrls.map(async (url, e) => {
      const pool = new Pool(new URL(url).origin, { connections: slots });
      try {
        const mine: number[] = [];
        for (let t = e; t < shape.systemPrompts; t += engineUrls.length) mine.push(firstTenant + t);
        const worker = async () => {
          for (let tenant = mine.shift(); tenant !== undefined; tenant = mine.shift()) {
            const res = await pool.request({
              method: 'POST',
              path: '/v1/chat/completions',
              headers: { 'content-type': 'application/json' },
              body: warmBodyOf(shape, tenant),
              headersTimeout: CALL_TIMEOUT_MS,
              bodyTimeout: CALL_TIMEOUT_MS,
            });
            await res.body.dump();
            if (res.statusCode !== 200) throw new Error(`warming tenant ${tenant} on ${url}: status ${res.statusCode}`);
          }
        };
        await Promise.all(Array.from({ length: slots }, worker));
      } finally {
        await pool.close();
      }
    }),
  );
}

/** `bench placement --workload cache-pressure`. */
export async function runLivePressure(raw: LivePressureOptions, ctx: ScenarioContext): Promise<{ files: string[] }> {
  const counts = checkLiveGateways(raw.gateways);
  const ttftTargetMs = raw.ttftTarget ?? CAPACITY_TTFT_P90_MS;
  if (!(ttftTargetMs > 0 && ttftTargetMs <= 600_000))
    throw new BenchOptionError(
      'ttftTarget',
      `invalid ttftTarget ${ttftTargetMs}: expected above 0 ms and at most 600000 ms`,
    );
  const options = resolveBenchOptions({
    ...raw,
    duration: raw.duration ?? LIVE_PRESSURE.measureMs,
    warmup: raw.warmup ?? LIVE_PRESSURE.warmupMs,
  });
  const { progress, write, startedAt, machine } = startScenario(ctx);
  const { engines, slots } = PLACEMENT_FLEET;
  const shape = cachePressureWorkload(engines, H100_8B_PROFILE.cacheBlocks);
  const warmupMs = options.warmup;
  const measureMs = options.duration;
  const { signal, release } = runSignal(ctx.signal);
  const aborts = signal ? { signal } : {};
  let fleet: CacheFleet | undefined;
  let targets: { target: CallTarget; gateways: number }[] = [];
  let nextTenant = 0;
  // Every run's tenants are new to the engines, each run warmed the same way.
  const freshTenants = (): number => (nextTenant += shape.systemPrompts);
  try {
    progress(
      `cache-pressure: ${shape.systemPrompts} tenants of ${CACHE_PRESSURE.contextTokens} tokens (${percent(cacheDemandOf(shape, engines, H100_8B_PROFILE.cacheBlocks))} of ${engines} engines' cache), queries of ${CACHE_PRESSURE.queryTokens} tokens; load average ${loadAverage()}\n`,
    );
    const gateways = fleetGateways(counts);
    progress(
      `starting ${engines} sim engines (${PLACEMENT_FLEET.profile}) publishing KV events, ${engines} runners feeding ${gateways.length} gateways${options.nginx ? ', nginx' : ''}...\n`,
    );
    fleet = await startCacheFleet({
      env: ctx.env,
      startService: ctx.startService,
      logLevel: options.logLevel,
      engines,
      slots,
      model: shape.model,
      gateways,
      nginx: options.nginx,
    });
    if (fleet.nginxSkipped) write(`${fleet.nginxSkipped}\n`);
    targets = targetsOf(fleet, counts);
    const engineUrls = fleet.engines.map((e) => e.url);
    const warmed = async (): Promise<number> => {
      const first = freshTenants();
      await warmTenants(engineUrls, shape, first, slots);
      await delay(LIVE_PRESSURE.feedSettleMs);
      return first;
    };
    // The engines count a prompt when its prefill starts, close to its due time, so readings at
    // the measured window's edges count the measured calls' prompts and few others.
    const runTrace = async (target: CallTarget, rate: number, seed: number, window: number) => {
      const first = await warmed();
      const calls = traceCalls(shape, { rate, durationMs: warmupMs + window, seed, firstSession: first * 1_000 });
      const engines = fleet!.engines;
      const before = delay(warmupMs).then(() => prefixCacheTotals(engines));
      const after = delay(warmupMs + window).then(() => prefixCacheTotals(engines));
      const records = await replay(target, shape, onTenants(calls, first), {
        timeoutMs: CALL_TIMEOUT_MS,
        maxInFlight: MAX_IN_FLIGHT,
        ...aborts,
      });
      const [start, end] = await Promise.all([before, after]);
      return { records, hitShare: ratio(end.hits - start.hits, end.queries - start.queries) };
    };

    const kvAware = targets.find((t) => t.target.name === 'kv-aware')!.target;
    let seed = 1;
    const capacity = await liveCapacity(raw.rate === undefined ? undefined : options.rate, progress, async (rate) => {
      const { records } = await runTrace(kvAware, rate, seed++, LIVE_PRESSURE.probeMeasureMs);
      interrupted(ctx.signal);
      return placementFigures(records, warmupMs, LIVE_PRESSURE.probeMeasureMs);
    });

    const runs: LivePressureRun[] = [];
    for (const [index, level] of LEVELS.entries()) {
      const rate = level * capacity.rate;
      const order = targets.map((_, i) => targets[(i + index) % targets.length]!);
      for (const { target, gateways: n } of order) {
        const { records, hitShare } = await runTrace(target, rate, 100 + index, measureMs);
        interrupted(ctx.signal);
        const figures = placementFigures(records, warmupMs, measureMs);
        runs.push({
          level,
          rate,
          contender: target.name,
          gateways: n,
          figures,
          ...goodputOf(records, warmupMs, measureMs, ttftTargetMs),
          cacheHitShare: hitShare,
        });
        const run = runs.at(-1)!;
        progress(
          `  ${percent(level)} (${rate.toFixed(1)}/s) ${target.name}: ttft p50 ${formatMs(figures.ttft.p50)} p90 ${formatMs(figures.ttft.p90)} ms, goodput ${percent(run.goodput)}, shed ${percent(run.shed)}; load average ${loadAverage()}\n`,
        );
      }
    }
    write(
      `\nsluice bench placement --workload cache-pressure: ${machine.cpus} cpus, node ${machine.node}, ${startedAt.toISOString()}, ${engines} engines ${PLACEMENT_FLEET.profile}, ${shape.systemPrompts} tenants (cache demand ${percent(CACHE_PRESSURE.demand)}), capacity ${capacity.rate.toFixed(1)} calls/s (${capacity.measured ? "kv-aware's, measured" : 'given'}), ${measureMs / 1000}s measured after ${warmupMs / 1000}s warm-up per run, goodput = first token within ${ttftTargetMs} ms; load average at the end ${loadAverage()}\n\n`,
    );
    write(`${formatLivePressure(runs)}\n\n`);
    const report = {
      ...reportHead('placement-cache-pressure', startedAt, machine),
      workload: shape,
      cacheDemand: CACHE_PRESSURE.demand,
      fleet: PLACEMENT_FLEET,
      gateways: counts,
      ttftTargetMs,
      warmupMs,
      measureMs,
      capacity,
      runs,
      loadAverage: loadavg(),
      ...(fleet.nginxSkipped ? { nginxSkipped: fleet.nginxSkipped } : {}),
    };
    const subtitle = `${machine.cpus} cpus, node ${machine.node}, ${startedAt.toISOString().slice(0, 16)}Z, ${engines} x ${PLACEMENT_FLEET.profile}, ${shape.systemPrompts} tenants, 100% = ${capacity.rate.toFixed(1)} calls/s`;
    const chartRuns: PlacementRun[] = runs.map((r) => ({ ...r, seed: 0, firstSession: 0 }));
    const files = await writeResults(
      ctx,
      options.out,
      'placement-cache-pressure',
      startedAt,
      report,
      placementChart(
        chartRuns,
        'sluice bench placement --workload cache-pressure: time to first token by load',
        subtitle,
      ),
      write,
    );
    return { files };
  } finally {
    release();
    await Promise.all(targets.map((t) => t.target.close().catch(() => undefined)));
    await fleet?.stop();
  }
}

/** The capacity given, else kv-aware's measured: where `probe`'s p90 crosses 1 s (an erring probe counts as over). */
async function liveCapacity(
  given: number | undefined,
  progress: (text: string) => void,
  probe: (rate: number) => Promise<PlacementFigures>,
): Promise<{ rate: number; measured: boolean; probes: CapacityProbe[] }> {
  if (given !== undefined) {
    progress(`capacity taken from --rate: ${given} calls/s\n`);
    return { rate: given, measured: false, probes: [] };
  }
  progress(
    `finding capacity: raising kv-aware's rate until its p90 time to first token passes ${CAPACITY_TTFT_P90_MS} ms\n`,
  );
  const probes = await findCapacity(async (rate) => {
    const f = await probe(rate);
    const p90 = f.errorCount > f.calls * 0.01 ? Infinity : f.ttft.p90;
    progress(`  ${rate.toFixed(1)} calls/s: p90 ${formatMs(p90)} ms, ${f.errorCount} errors\n`);
    return p90;
  });
  const rate = crossing(probes, CAPACITY_TTFT_P90_MS);
  progress(`capacity: ${rate.toFixed(1)} calls/s\n`);
  return { rate, measured: true, probes };
}

/**
 * The figures table, by level: each contender's TTFT, goodput, shed share and cache hit share, and
 * its p50 and p90 over nginx round-robin's and over prefix-affinity's at the same level.
 */
export function formatLivePressure(runs: readonly LivePressureRun[]): string {
  const versus = (r: LivePressureRun, name: string, key: 'p50' | 'p90'): string => {
    const b = runs.find((o) => o.level === r.level && o.contender === name);
    return formatRatio(ratio(r.figures.ttft[key], b?.figures.ttft[key] ?? Number.NaN));
  };
  const rows = runs.map((r) => [
    percent(r.level),
    r.contender,
    r.gateways === 0 ? '-' : String(r.gateways),
    r.rate.toFixed(1),
    String(r.figures.calls),
    ...msCells(r.figures.ttft),
    percent(r.goodput),
    percent(r.shed),
    percent(r.cacheHitShare),
    versus(r, 'nginx round-robin', 'p50'),
    versus(r, 'nginx round-robin', 'p90'),
    versus(r, 'prefix-affinity', 'p50'),
    versus(r, 'prefix-affinity', 'p90'),
  ]);
  return (
    formatTable(
      [
        'load',
        'contender',
        'gw',
        'calls/s',
        'calls',
        'ttft p50',
        'ttft p90',
        'ttft p99',
        'goodput',
        'shed',
        'cache hits',
        'p50/nginx',
        'p90/nginx',
        'p50/p-a',
        'p90/p-a',
      ],
      rows,
    ) +
    "\n(ms; ttft from the call's due time; goodput = calls with a first token within the target; shed = calls refused, failed or timed out; cache hits = engines' prefix-cache hit tokens / prompt tokens; nginx = nginx round-robin, p-a = prefix-affinity, at the same load)"
  );
}

function percent(share: number): string {
  return Number.isFinite(share) ? `${(share * 100).toFixed(0)}%` : '-';
}

function loadAverage(): string {
  return loadavg()
    .map((v) => v.toFixed(2))
    .join(' ');
}

function interrupted(signal: AbortSignal | undefined): void {
  if (signal?.aborted) throw new Error('benchmark interrupted');
}
