/**
 * The memory scenario: what does a held stream cost the gateway? A gateway in front of slow
 * engines spends most of its life holding streams that trickle a token every few seconds, so
 * the memory each one pins, not the CPU, is what decides how many a machine can hold.
 *
 * Two simulated engines send a token every 5 s; a runner fronts each, and one gateway fronts
 * both. The driver opens 1,000, then 10,000 streams through the gateway, in batches, and holds
 * them all open while the gateway's resident memory (VmRSS from /proc) is sampled twice a
 * second: idle before, at the plateau with every stream open, as the streams end together,
 * after a quiet spell, and once more after the last level, when the gateway has closed its idle
 * connections to the runners. Every stream of a level is sized to end at the same moment, so
 * "after" is one clean edge rather than a slope.
 *
 * The open-file limit bounds the largest level: the gateway holds two sockets per stream (the
 * client's and the runner's), so with `ulimit -n` at 20,000 it cannot hold 10,000. The level is
 * then measured at the ceiling, said so, and the per-stream figure extrapolated to the level
 * asked for, marked as such. nginx, when installed, holds the same streams as the reference.
 */
import { performance } from 'node:perf_hooks';
import { setTimeout as delay } from 'node:timers/promises';
import { barChart } from '../bar-chart.ts';
import { BenchOptionError } from '../errors.ts';
import { openHeldStreams } from '../held-streams.ts';
import type { StreamTally } from '../held-streams.ts';
import { MemorySampler, phaseMemory } from '../memory-sampler.ts';
import type { MemorySample, PhaseMemory } from '../memory-sampler.ts';
import { memoryStackOutput, startMemoryStack } from '../memory-stack.ts';
import type { MemoryStack } from '../memory-stack.ts';
import { checkInteger, resolveBenchOptions, show } from '../options.ts';
import type { BenchOptions } from '../options.ts';
import {
  FD_RESERVE,
  SOCKETS_PER_STREAM,
  childPids,
  countOpenFiles,
  readOpenFileLimit,
  readProcessMemory,
  readProcessTreeMemory,
  streamCeiling,
} from '../process-memory.ts';
import type { ProcessMemory } from '../process-memory.ts';
import { formatTable, reportHead, startScenario, writeResults } from '../report.ts';
import type { EngineTiming } from '../stack.ts';
import type { Scenario, ScenarioContext } from '../types.ts';

/** The bench options, plus the stream counts this scenario measures. */
export interface MemoryBenchOptions extends BenchOptions {
  /** Streams held at once, one level each, ascending; integers or their decimal strings (the CLI's list). @default [1000, 10000] */
  streams?: readonly (number | string)[];
}

/** Bounds of the `streams` option. */
const MEMORY_LIMITS = Object.freeze({
  /** Most streams in one level. */
  maxStreams: 10_000,
  /** Most levels in one run. */
  maxLevels: 4,
});

/** The levels measured when none are given. */
export const DEFAULT_STREAM_LEVELS: readonly number[] = Object.freeze([1_000, 10_000]);

/**
 * The engine: 200 ms to the first token, then one every 5 s. At a token a second, 10,000 streams
 * are 10,000 tokens a second relayed through four processes, which saturates a 2-core box and
 * slows the ramp to a crawl; what a held stream costs in memory does not depend on how often a
 * token passes. Each request sets `max_tokens` so that its last token lands when the level ends;
 * `outputTokens` is only the preflight's length.
 */
export const MEMORY_ENGINE: EngineTiming = Object.freeze({ ttftMs: 200, itlMs: 5_000, outputTokens: 2 });

/** Streams sent at once during the ramp; the next batch leaves when this one's headers came. */
const RAMP_BATCH = 500;

/** The ramp's time budget: a base, plus an allowance per stream for a busy 2-core box. */
const RAMP_BUDGET = Object.freeze({ baseMs: 10_000, perStreamMs: 12 });

/** Engine and runner pairs behind the gateway: each runner holds two sockets per stream too. */
const PAIRS = 2;
const SAMPLE_EVERY_MS = 500;
/** Sampled before each level's ramp. */
const IDLE_MS = 2_000;
/**
 * Added to the streams' planned end: the last batch's headers may come a little after the ramp
 * deadline, and the plateau must still last its full hold.
 */
const END_MARGIN_MS = 5_000;
/** The plateau stops this long before the first stream could end. */
const PLATEAU_SAFETY_MS = 1_000;
/** How long past their planned end the streams may take before they are cut. */
const DRAIN_GRACE_MS = 30_000;
/** After the streams ended, before the "quiet" reading; it is also the pause between levels. */
const QUIET_MS = 5_000;
/**
 * After a proxy's last level, the longest wait for it to close its idle upstream connections
 * (the gateway keeps them up to a minute) before the "settled" reading.
 */
const SETTLE_LIMIT_MS = 75_000;
/** Fds above the count before the first level that still count as settled (a timer's, a log's). */
const SETTLED_FD_SLACK = 10;
/** Longest wait for headers, and between two chunks of a stream. */
const STREAM_TIMEOUT_MS = 30_000;
const KIB_PER_MIB = 1_024;
const STREAM_PATH = '/v1/chat/completions';

/** One level as planned: the count asked for and the count the open-file limit lets the proxy hold. */
export interface PlannedLevel {
  requested: number;
  streams: number;
  capped: boolean;
}

/** One proxy at one level. Memory in KiB. */
export interface LevelFigures {
  target: string;
  requested: number;
  streams: number;
  capped: boolean;
  /** Streams whose 200 headers came. */
  opened: number;
  /** The fewest streams open at any plateau sample: the count the plateau figures are for. */
  openAtPlateau: number;
  completed: number;
  chunks: number;
  errors: Record<string, number>;
  rampMs: number;
  rampCut: boolean;
  /** How long the plateau was sampled: from the ramp's end to just before the first stream could end. */
  plateauMs: number;
  idle: PhaseMemory;
  plateau: PhaseMemory;
  /** Right after the last stream ended and the driver closed its connections. */
  endedKiB: number;
  /** After the quiet spell. */
  quietKiB: number;
  /** VmHWM at the end of the level: the highest RSS since the process started. */
  hwmKiB: number;
  /** (plateau median - RSS before any stream) / streams open at the plateau. */
  perStreamKiB: number;
  fds: { idle?: number; plateau?: number; ended?: number; quiet?: number };
  /** Every sample of the level, for the JSON. */
  samples: MemorySample[];
}

/** A proxy once its last level is over and its idle upstream connections are closed (or the wait ran out). */
export interface SettledFigures {
  target: string;
  /** ms from the last level's quiet reading to this one. */
  waitedMs: number;
  /** False when the fds were still above the count before the first level when the wait ran out. */
  settled: boolean;
  rssKiB: number;
  hwmKiB: number;
  fds: number | undefined;
  fdsBefore: number | undefined;
}

/** A proxy the streams go through. */
interface MemoryTarget {
  name: string;
  url: string;
  memory: () => ProcessMemory | undefined;
  fds: () => number | undefined;
}

/** The `memory` scenario. */
export const memory: Scenario = {
  summary: 'resident memory of the gateway holding 1,000 and 10,000 slow SSE streams, and after they end',
  async run(raw: MemoryBenchOptions, ctx: ScenarioContext) {
    const options = resolveBenchOptions(raw);
    const requested = resolveStreamLevels(raw.streams);
    const { progress, write, startedAt, machine } = startScenario(ctx);
    const hold = options.duration;
    // Children inherit this process's limit; the gateway's own is checked once it runs.
    const ownLimit = readOpenFileLimit('self');
    if (ownLimit === undefined || readProcessMemory(process.pid) === undefined)
      throw new Error('the memory scenario reads /proc/<pid>/status and /proc/<pid>/limits: it runs on Linux only');
    const planned = planLevels(requested, streamCeiling(ownLimit));
    const largest = Math.max(...planned.map((l) => l.streams));
    let stack: MemoryStack | undefined;
    try {
      progress(
        `starting ${PAIRS} sim engines (ttft ${MEMORY_ENGINE.ttftMs} ms, a token every ${MEMORY_ENGINE.itlMs} ms), ${PAIRS} runners, the gateway${options.nginx ? ' and nginx' : ''}...\n`,
      );
      const nginxFiles = Number.isFinite(ownLimit) ? ownLimit : undefined;
      stack = await startMemoryStack({
        env: ctx.env,
        startService: ctx.startService,
        logLevel: options.logLevel,
        streams: largest,
        pairs: PAIRS,
        engine: MEMORY_ENGINE,
        nginx: options.nginx,
        ...(nginxFiles ? { nginxFiles } : {}),
      });
      const gatewayPid = stack.gateway.child.pid;
      const fdLimit = Math.min(ownLimit, readOpenFileLimit(gatewayPid ?? 'self') ?? ownLimit);
      const levels = planLevels(requested, streamCeiling(fdLimit));
      const targets: MemoryTarget[] = [
        {
          name: 'sluice',
          url: stack.gateway.url,
          memory: () => readProcessMemory(gatewayPid),
          fds: () => countOpenFiles(gatewayPid),
        },
      ];
      const nginx = stack.nginx;
      if (nginx)
        targets.push({
          name: 'nginx',
          url: nginx.url,
          memory: () => readProcessTreeMemory(nginx.pid),
          fds: () => treeOpenFiles(nginx.pid),
        });
      else progress(`${stack.nginxSkipped}\n`);
      for (const target of targets) await preflight(target, stack);

      const figures: LevelFigures[] = [];
      const settled: SettledFigures[] = [];
      const baselines: Record<string, number> = {};
      for (const target of targets) {
        const watch: { tally?: StreamTally } = {};
        const sampler = new MemorySampler(target.memory, () => watch.tally?.open ?? 0, SAMPLE_EVERY_MS);
        try {
          for (const level of levels) {
            if (ctx.signal?.aborted) throw new Error('benchmark interrupted');
            progress(
              `${target.name}: ${level.streams} streams${level.capped ? ` (asked ${level.requested}, capped by the open-file limit)` : ''}, ramp budget ${rampBudgetMs(level.streams) / 1000}s, then at least ${hold / 1000}s at the plateau\n`,
            );
            const f = await measureLevel(target, level, hold, sampler, watch, baselines, ctx.signal);
            figures.push(f);
            progress(
              `${target.name}: ${f.openAtPlateau} open at the plateau, RSS ${mib(f.plateau.medianKiB)} MiB (idle ${mib(f.idle.medianKiB)}), ${formatErrors(f.errors)}\n`,
            );
          }
          progress(
            `${target.name}: waiting up to ${SETTLE_LIMIT_MS / 1000}s for its idle upstream connections to close\n`,
          );
          settled.push(
            await settle(target, sampler, figures.find((f) => f.target === target.name)?.fds.idle, ctx.signal),
          );
        } finally {
          sampler.stop();
        }
      }

      write(
        `\nsluice bench memory: ${machine.cpus} cpus, node ${machine.node}, ${startedAt.toISOString()}, engine ttft ${MEMORY_ENGINE.ttftMs} ms, a token every ${MEMORY_ENGINE.itlMs} ms, ${PAIRS} engine+runner pairs, plateau held at least ${hold / 1000}s, RSS sampled every ${SAMPLE_EVERY_MS} ms\n\n`,
      );
      write(capNote(levels, fdLimit));
      write(`${formatMemory(figures)}\n\n`);
      write(`${formatStreams(figures)}\n\n`);
      const extrapolations = levels
        .filter((l) => l.capped)
        .flatMap((l) =>
          figures.filter((f) => f.requested === l.requested).map((f) => extrapolation(f, baselines[f.target]!)),
        );
      write(`${formatSettled(settled, baselines)}\n`);
      for (const e of extrapolations)
        write(
          `${e.target}: EXTRAPOLATED, not measured: ${e.requested} streams would take about ${mib(e.rssKiB)} MiB (${mib(e.idleKiB)} MiB idle + ${e.requested} x ${e.perStreamKiB.toFixed(1)} KiB, the per-stream figure measured at ${e.measuredAt})\n`,
        );
      if (stack.nginxSkipped) write(`${stack.nginxSkipped}\n`);
      if (extrapolations.length > 0 || stack.nginxSkipped) write('\n');

      const report = {
        ...reportHead('memory', startedAt, machine),
        options: { ...options, hold, streams: requested },
        engine: MEMORY_ENGINE,
        pairs: PAIRS,
        fdLimit,
        fdReserve: FD_RESERVE,
        socketsPerStream: SOCKETS_PER_STREAM,
        levels,
        baselinesKiB: baselines,
        nginxSkipped: stack.nginxSkipped ?? null,
        figures,
        settled,
        extrapolations,
      };
      const subtitle = `${machine.cpus} cpus, node ${machine.node}, ${startedAt.toISOString().slice(0, 16)}Z, a token every ${MEMORY_ENGINE.itlMs / 1000}s per stream, open-file limit ${fdLimit}`;
      const svg = memoryChart(
        figures,
        settled,
        targets.map((t) => t.name),
        'sluice bench memory: resident memory holding slow SSE streams',
        subtitle,
      );
      const files = await writeResults(ctx, options.out, 'memory', startedAt, report, svg, write);
      return { files };
    } finally {
      await stack?.stop();
    }
  },
};

/**
 * Validates the `streams` option: 1 to 4 distinct counts of 1 to 10,000, as numbers or decimal
 * strings (the CLI passes a list of strings). Returns them ascending, frozen.
 * @throws {BenchOptionError} naming the bad count.
 */
export function resolveStreamLevels(value: unknown): readonly number[] {
  if (value === undefined) return DEFAULT_STREAM_LEVELS;
  if (!Array.isArray(value) || value.length === 0 || value.length > MEMORY_LIMITS.maxLevels) {
    throw new BenchOptionError(
      'streams',
      `streams must be a list of 1 to ${MEMORY_LIMITS.maxLevels} stream counts, e.g. 1000,10000, got ${Array.isArray(value) ? `${value.length} counts` : show(value)}`,
    );
  }
  const counts = value.map((v: unknown) => {
    const count = typeof v === 'string' && /^\d+$/.test(v.trim()) ? Number(v) : v;
    return checkInteger('streams', count, 1, MEMORY_LIMITS.maxStreams);
  });
  const repeated = counts.find((c, i) => counts.indexOf(c) !== i);
  if (repeated !== undefined)
    throw new BenchOptionError('streams', `streams must not repeat a count, got ${repeated} twice`);
  return Object.freeze([...counts].sort((a, b) => a - b));
}

/** Each level as the proxy can hold it: at most `ceiling` streams, marked when that cut it. */
export function planLevels(requested: readonly number[], ceiling: number): PlannedLevel[] {
  return requested.map((count) => ({ requested: count, streams: Math.min(count, ceiling), capped: count > ceiling }));
}

/** KiB each stream adds: `(loadedKiB - idleKiB) / streams`; NaN when there are no streams or a reading is missing. */
export function perStreamKiB(idleKiB: number, loadedKiB: number, streams: number): number {
  if (!(streams > 0) || !Number.isFinite(idleKiB) || !Number.isFinite(loadedKiB)) return Number.NaN;
  return (loadedKiB - idleKiB) / streams;
}

/** The RSS `streams` streams would take if each cost `kibPerStream` on top of `idleKiB`: a linear extrapolation. */
export function extrapolateKiB(idleKiB: number, kibPerStream: number, streams: number): number {
  return idleKiB + kibPerStream * streams;
}

/**
 * Tokens a stream sent at `now` should ask for so its last token lands at or just before
 * `endAt`: the first comes after the engine's ttft, each next one an itl later. At least 1.
 */
export function tokensUntil(endAt: number, now: number, engine: Pick<EngineTiming, 'ttftMs' | 'itlMs'>): number {
  return Math.max(1, Math.floor((endAt - now - engine.ttftMs) / engine.itlMs) + 1);
}

/** The ramp's time budget for `streams` streams, ms. */
function rampBudgetMs(streams: number): number {
  return RAMP_BUDGET.baseMs + streams * RAMP_BUDGET.perStreamMs;
}

/** The request of one stream of exactly `tokens` tokens (`ignore_eos`: the sim engine never stops early). */
function streamBody(tokens: number): string {
  return JSON.stringify({
    model: 'sim-small',
    messages: [{ role: 'user', content: 'hi' }],
    max_tokens: tokens,
    ignore_eos: true,
    stream: true,
  });
}

/** One short stream through `target`: the stack works before anything is measured. */
async function preflight(target: MemoryTarget, stack: MemoryStack): Promise<void> {
  const streams = await openHeldStreams({
    url: target.url + STREAM_PATH,
    streams: 1,
    batch: 1,
    rampDeadline: Number.POSITIVE_INFINITY,
    body: () => streamBody(MEMORY_ENGINE.outputTokens),
    timeoutMs: STREAM_TIMEOUT_MS,
  });
  await streams.finish(performance.now() + STREAM_TIMEOUT_MS);
  if (streams.tally.completed !== 1) {
    throw new Error(
      `preflight: ${target.name} did not stream to [DONE] (${formatErrors(streams.tally.errors)})\n${memoryStackOutput(stack)}`,
    );
  }
}

/**
 * One level through one proxy: idle, ramp, plateau, draining, ended, quiet. `watch.tally` is
 * pointed at the level's streams so the sampler records how many were open at each sample;
 * `baselines` keeps each proxy's RSS before its first level, the "idle" every per-stream figure
 * is measured from.
 */
async function measureLevel(
  target: MemoryTarget,
  level: PlannedLevel,
  hold: number,
  sampler: MemorySampler,
  watch: { tally?: StreamTally },
  baselines: Record<string, number>,
  signal: AbortSignal | undefined,
): Promise<LevelFigures> {
  // Tagged by the count asked for: unlike the count measured, it is distinct per level.
  const tag = (phase: string): string => `${level.requested} ${phase}`;
  const fds: LevelFigures['fds'] = {};
  watch.tally = undefined;
  sampler.phase(tag('idle'));
  await pause(IDLE_MS, signal);
  fds.idle = target.fds();
  const idle = phaseMemory(sampler.samples, tag('idle'));
  baselines[target.name] ??= idle.medianKiB;

  const rampDeadline = performance.now() + rampBudgetMs(level.streams);
  // Every stream's last token lands in (endAt - itl, endAt]. The plateau runs from the ramp's end
  // until just before the earliest of them: at least `hold`, longer when the ramp beat its budget.
  const endAt = rampDeadline + hold + END_MARGIN_MS + MEMORY_ENGINE.itlMs;
  const plateauUntil = endAt - MEMORY_ENGINE.itlMs - PLATEAU_SAFETY_MS;
  sampler.phase(tag('ramp'));
  const streams = await openHeldStreams({
    url: target.url + STREAM_PATH,
    streams: level.streams,
    batch: RAMP_BATCH,
    rampDeadline,
    body: (now) => streamBody(tokensUntil(endAt, now, MEMORY_ENGINE)),
    timeoutMs: STREAM_TIMEOUT_MS,
    ...(signal ? { signal } : {}),
    onOpen: (tally) => (watch.tally = tally),
  });
  try {
    sampler.phase(tag('plateau'));
    const plateauStart = performance.now();
    await pause(Math.max(0, plateauUntil - plateauStart), signal);
    const plateauMs = Math.round(performance.now() - plateauStart);
    fds.plateau = target.fds();
    const plateau = phaseMemory(sampler.samples, tag('plateau'));
    sampler.phase(tag('draining'));
    await streams.finish(endAt + DRAIN_GRACE_MS);
    const ended = sampler.phase(tag('ended'));
    fds.ended = target.fds();
    sampler.phase(tag('quiet'));
    await pause(QUIET_MS, signal);
    const quiet = sampler.phase(tag('quiet'));
    fds.quiet = target.fds();
    const { tally } = streams;
    return {
      target: target.name,
      requested: level.requested,
      streams: level.streams,
      capped: level.capped,
      opened: tally.opened,
      openAtPlateau: plateau.fewestOpen,
      completed: tally.completed,
      chunks: tally.chunks,
      errors: tally.errors,
      rampMs: Math.round(streams.rampMs),
      rampCut: streams.rampCut,
      plateauMs,
      idle,
      plateau,
      endedKiB: ended?.rssKiB ?? Number.NaN,
      quietKiB: quiet?.rssKiB ?? Number.NaN,
      hwmKiB: quiet?.hwmKiB ?? Number.NaN,
      perStreamKiB: perStreamKiB(baselines[target.name]!, plateau.medianKiB, plateau.fewestOpen),
      fds,
      samples: sampler.samples.filter((s) => s.phase.startsWith(tag(''))),
    };
  } finally {
    await streams.finish(performance.now());
    watch.tally = undefined;
  }
}

/**
 * After a proxy's last level: waits, at most {@link SETTLE_LIMIT_MS}, until its fds are back to
 * the count before its first level (its idle upstream connections closed), then reads its RSS.
 */
async function settle(
  target: MemoryTarget,
  sampler: MemorySampler,
  fdsBefore: number | undefined,
  signal: AbortSignal | undefined,
): Promise<SettledFigures> {
  const started = performance.now();
  sampler.phase('settling');
  let fds = target.fds();
  while (
    fds !== undefined &&
    fdsBefore !== undefined &&
    fds > fdsBefore + SETTLED_FD_SLACK &&
    performance.now() - started < SETTLE_LIMIT_MS
  ) {
    await pause(1_000, signal);
    fds = target.fds();
  }
  const sample = sampler.phase('settled');
  return {
    target: target.name,
    waitedMs: Math.round(performance.now() - started),
    settled: fds !== undefined && fdsBefore !== undefined && fds <= fdsBefore + SETTLED_FD_SLACK,
    rssKiB: sample?.rssKiB ?? Number.NaN,
    hwmKiB: sample?.hwmKiB ?? Number.NaN,
    fds,
    fdsBefore,
  };
}

/** Waits `ms`; throws when the bench is interrupted meanwhile. */
async function pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
  await delay(ms, undefined, signal ? { signal } : {}).catch(() => undefined);
  if (signal?.aborted) throw new Error('benchmark interrupted');
}

/** Fds of `pid` and its direct children (nginx's master and worker). */
function treeOpenFiles(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined;
  const own = countOpenFiles(pid);
  if (own === undefined) return undefined;
  return childPids(pid).reduce((n, child) => n + (countOpenFiles(child) ?? 0), own);
}

/** An extrapolated figure for a capped level: the per-stream cost measured at the ceiling, times the count asked for. */
function extrapolation(
  f: LevelFigures,
  idleKiB: number,
): {
  target: string;
  requested: number;
  measuredAt: number;
  idleKiB: number;
  perStreamKiB: number;
  rssKiB: number;
  extrapolated: true;
} {
  return {
    target: f.target,
    requested: f.requested,
    measuredAt: f.openAtPlateau,
    idleKiB,
    perStreamKiB: f.perStreamKiB,
    rssKiB: extrapolateKiB(idleKiB, f.perStreamKiB, f.requested),
    extrapolated: true,
  };
}

/** The lines saying which levels the open-file limit capped, and why; empty when none was. */
export function capNote(levels: readonly PlannedLevel[], fdLimit: number): string {
  return (
    levels
      .filter((l) => l.capped)
      .map(
        (l) =>
          `${l.requested} streams asked for, ${l.streams} measured: the open-file limit (ulimit -n) is ${fdLimit} here and cannot be raised, ` +
          `and a proxy holds ${SOCKETS_PER_STREAM} sockets per stream (client and upstream), so (${fdLimit} - ${FD_RESERVE} reserved) / ${SOCKETS_PER_STREAM} = ${l.streams} is the most it can hold.\n`,
      )
      .join('') + (levels.some((l) => l.capped) ? '\n' : '')
  );
}

function formatMemory(figures: readonly LevelFigures[]): string {
  return (
    formatTable(
      [
        'target',
        'level',
        'streams',
        'idle MiB',
        'plateau MiB',
        'plateau max',
        'ended MiB',
        'quiet MiB',
        'peak MiB',
        'KiB/stream',
      ],
      figures.map((f) => [
        f.target,
        String(f.requested),
        String(f.openAtPlateau),
        mib(f.idle.medianKiB),
        mib(f.plateau.medianKiB),
        mib(f.plateau.maxKiB),
        mib(f.endedKiB),
        mib(f.quietKiB),
        mib(f.hwmKiB),
        kib(f.perStreamKiB),
      ]),
    ) +
    `\n(RSS from /proc/<pid>/status; level = streams asked for, streams = the fewest open at any plateau sample; idle = median before the level;` +
    `\n plateau = median (and max) over the plateau; ended = right after the last stream ended; quiet = ${QUIET_MS / 1000}s later; peak = VmHWM;` +
    `\n KiB/stream = (plateau median - idle before the first level) / streams)`
  );
}

function formatStreams(figures: readonly LevelFigures[]): string {
  return (
    formatTable(
      [
        'target',
        'level',
        'opened',
        'at plateau',
        'completed',
        'errors',
        'chunks',
        'ramp s',
        'plateau s',
        'fds idle',
        'fds plateau',
        'fds ended',
        'fds quiet',
      ],
      figures.map((f) => [
        f.target,
        String(f.requested),
        String(f.opened),
        String(f.openAtPlateau),
        String(f.completed),
        String(Object.values(f.errors).reduce((a, b) => a + b, 0)),
        String(f.chunks),
        (f.rampMs / 1000).toFixed(1) + (f.rampCut ? ' cut' : ''),
        (f.plateauMs / 1000).toFixed(1),
        ...[f.fds.idle, f.fds.plateau, f.fds.ended, f.fds.quiet].map((n) => (n === undefined ? '-' : String(n))),
      ]),
    ) +
    figures
      .filter((f) => Object.keys(f.errors).length > 0)
      .map((f) => `\nerrors ${f.target} ${f.requested}: ${formatErrors(f.errors)}`)
      .join('')
  );
}

function formatSettled(settled: readonly SettledFigures[], baselines: Readonly<Record<string, number>>): string {
  return settled
    .map(
      (s) =>
        `${s.target} settled: ${mib(s.rssKiB)} MiB RSS ${(s.waitedMs / 1000).toFixed(0)}s after its last level, ` +
        (s.settled
          ? 'its idle upstream connections closed'
          : `its fds still above the count before the first level when the ${SETTLE_LIMIT_MS / 1000}s wait ran out`) +
        ` (${s.fds ?? '-'} fds, ${s.fdsBefore ?? '-'} before the first level; RSS then ${mib(baselines[s.target] ?? Number.NaN)} MiB)\n`,
    )
    .join('');
}

function formatErrors(errors: Record<string, number>): string {
  const kinds = Object.entries(errors);
  return kinds.length === 0 ? 'no errors' : kinds.map(([kind, n]) => `${kind} ${n}`).join(', ');
}

/** One panel per proxy; a group per level with its idle, plateau, ended and quiet RSS, and a last one once settled, MiB. */
function memoryChart(
  figures: readonly LevelFigures[],
  settled: readonly SettledFigures[],
  targets: readonly string[],
  title: string,
  subtitle: string,
): string {
  const series = [
    { name: 'idle before', color: '#9e9e9e' },
    { name: 'plateau (median)', color: '#4c78a8' },
    { name: 'plateau (max)', color: '#72b7b2' },
    { name: 'right after the end', color: '#f58518' },
    { name: `${QUIET_MS / 1000}s after the end`, color: '#e45756' },
    { name: 'settled', color: '#54a24b' },
  ];
  const none = Number.NaN;
  const panels = targets.map((target) => ({
    title: target,
    groups: figures
      .filter((f) => f.target === target)
      .map((f) => ({
        label: `${f.openAtPlateau} streams${f.capped ? ` (of ${f.requested})` : ''}`,
        note: `${kib(f.perStreamKiB)} KiB per stream`,
        values: [f.idle.medianKiB, f.plateau.medianKiB, f.plateau.maxKiB, f.endedKiB, f.quietKiB, none].map(
          (v) => v / KIB_PER_MIB,
        ),
      }))
      .concat(
        settled
          .filter((s) => s.target === target)
          .map((s) => ({
            label: 'settled',
            note: `${(s.waitedMs / 1000).toFixed(0)}s after, ${s.fds ?? '-'} fds`,
            values: [none, none, none, none, none, s.rssKiB / KIB_PER_MIB],
          })),
      ),
  }));
  return barChart(panels, series, { title, subtitle, axis: 'resident memory (RSS), MiB', format: (v) => v.toFixed(0) });
}

function mib(valueKiB: number): string {
  return Number.isFinite(valueKiB) ? (valueKiB / KIB_PER_MIB).toFixed(1) : '-';
}

function kib(value: number): string {
  return Number.isFinite(value) ? value.toFixed(1) : '-';
}
