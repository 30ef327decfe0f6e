/**
 * The batch scenario: a batch of `--lines` short requests (10,000 by default) started while
 * interactive streamed traffic runs at 60 % of the fleet's capacity, on simulated engines with
 * fixed timing (no jitter, no slow-down with load), so a slot's time is known. Two phases with the
 * same interactive load: without the batch, then with it, until the batch ends (or the bound).
 *
 * It reports the interactive p90 time to first token in each phase and their ratio (goal: at most
 * 1.1), the share of the capacity the interactive traffic left that the batch used while it ran
 * (goal: at least 80 %), and the batch's lines lost (no 2xx answer in its output file) or run
 * twice on an engine (the engines' call logs, per `<batch id>:<custom_id>`); goal 0.
 *
 * Slot-seconds are the engines': an interactive call holds a slot ttft + (tokens − 1) × itl, a
 * batch line likewise with its own tokens; the capacity left is the fleet's slots over the
 * batch's run less what the interactive calls sent in it held.
 */
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { runnerArgs, simEngineArgs } from '../../../placer/index.ts';
import { answeredIds, batchInput, createBatch, interactiveLoad, readBatch, runsByRequest } from '../batch-bench.ts';
import type { InteractiveCall } from '../batch-bench.ts';
import { barChart } from '../bar-chart.ts';
import { benchDefaults, checkInteger } from '../options.ts';
import type { BenchOptions } from '../options.ts';
import { formatTable, reportHead, writeResults } from '../report.ts';
import { inScratchRun } from '../scratch-run.ts';
import { startAll, startGroup } from '../stack.ts';
import { percentile } from '../stats.ts';
import type { Scenario } from '../types.ts';

/** The options the batch scenario reads. */
export interface BatchBenchOptions extends BenchOptions {
  /** Lines in the batch, 100 to 50,000. @default see {@link BATCH_BENCH} */
  lines?: number;
}

/** The fleet and load, fixed so the slot-seconds are known. */
export const BATCH_BENCH = Object.freeze({
  lines: 10_000,
  engines: 2,
  slotsPerEngine: 8,
  ttftMs: 40,
  itlMs: 10,
  interactiveTokens: 12,
  lineTokens: 2,
  /** The interactive load's share of capacity. */
  load: 0.6,
  /** The phase without the batch, ms. */
  baselineMs: 20_000,
  /** The longest phase with the batch, ms: what is not done by then is reported as not done. */
  maxBatchMs: 240_000,
});

const seconds = (tokens: number) => (BATCH_BENCH.ttftMs + (tokens - 1) * BATCH_BENCH.itlMs) / 1000;

/** The `batch` scenario. */
export const batch: Scenario = {
  summary:
    'a 10,000-line batch under interactive traffic at 60 % of capacity: interactive TTFT p90 with and without it, share of the idle capacity used, lines lost or run twice',
  async run(raw: BatchBenchOptions, ctx) {
    const b = BATCH_BENCH;
    const lines = checkInteger('lines', raw.lines ?? b.lines, 100, 50_000);
    const logLevel = raw.logLevel ?? benchDefaults.logLevel;
    const out = raw.out ?? benchDefaults.out;
    return inScratchRun(ctx, 'sluice-batch-', async ({ progress, write, startedAt, machine, signal, dir }) => {
      const slots = b.engines * b.slotsPerEngine;
      const rate = Math.round((b.load * slots) / seconds(b.interactiveTokens));
      progress(`starting ${b.engines} sim engines and runners (${b.slotsPerEngine} slots each) and a gateway...\n`);
      const logs = Array.from({ length: b.engines }, (_, i) => join(dir, `calls-${i}.log`));
      const fleet = await startGroup({ env: ctx.env, logLevel, startService: ctx.startService }, async (s) => {
        const engine = (i: number) =>
          simEngineArgs({ id: `bench-sim-${i}` }, [
            ...['--ttft-ms', String(b.ttftMs), '--itl-ms', String(b.itlMs), '--load-factor', '1'],
            ...['--prefill-per-token-ms', '0', '--prefill-jitter-std-ms', '0', '--itl-jitter-std-ms', '0'],
            ...['--max-num-seqs', String(b.slotsPerEngine), '--max-queue', '1024', '--call-log', logs[i]!],
            ...s.level,
          ]);
        const engines = await startAll(
          s,
          logs.map((_, i) => engine(i)),
          s.env,
        );
        const runnerList = engines.map((e, i) =>
          runnerArgs({ engine: e.url, id: `bench-runner-${i}` }, ['--slots', String(b.slotsPerEngine), ...s.level]),
        );
        const runners = await startAll(s, runnerList, s.env);
        const [gateway] = await startAll(
          s,
          [['gateway', '--port', '0', '--runners', runners.map((r) => r.url).join(','), ...s.level]],
          s.env,
        );
        return { gateway: gateway! };
      });
      try {
        const gw = fleet.gateway.url;
        const origin = performance.now();
        progress(`baseline: interactive calls at ${rate}/s for ${b.baselineMs / 1000} s, no batch...\n`);
        const baselineEnd = origin + b.baselineMs;
        const baseline = await interactiveLoad(
          gw,
          rate,
          b.interactiveTokens,
          origin,
          () => performance.now() >= baselineEnd,
          signal,
        );

        progress(
          `with the batch: ${lines} lines of ${b.lineTokens} tokens, interactive calls at ${rate}/s until it ends...\n`,
        );
        const id = await createBatch(gw, batchInput(lines, b.lineTokens));
        const batchStart = performance.now();
        let batchEnd: number | undefined;
        let state = await readBatch(gw, id);
        const watching = (async () => {
          while (!signal?.aborted && performance.now() - batchStart < b.maxBatchMs) {
            state = await readBatch(gw, id);
            if (['completed', 'failed', 'expired', 'cancelled'].includes(state.status)) {
              batchEnd = performance.now();
              return;
            }
            await new Promise((resolve) => setTimeout(resolve, 250));
          }
        })();
        const during = await interactiveLoad(
          gw,
          rate,
          b.interactiveTokens,
          origin,
          () => batchEnd !== undefined || performance.now() - batchStart >= b.maxBatchMs,
          signal,
        );
        await watching;
        const end = batchEnd ?? performance.now();
        const figures = await summarize({
          gw,
          id,
          lines,
          rate,
          slots,
          logs,
          baseline,
          during,
          window: [batchStart - origin, end - origin],
          state,
        });
        write(
          `\nsluice bench batch: ${machine.cpus} cpus, node ${machine.node}, ${startedAt.toISOString()}, ${slots} slots, interactive ${rate} calls/s (${b.load * 100} %), ${lines} lines\n\n`,
        );
        write(`${formatBatch(figures)}\n\n`);
        const report = {
          ...reportHead('batch', startedAt, machine),
          fleet: b,
          lines,
          rate,
          figures,
        };
        const chart = batchChart(figures, lines, machine.cpus, startedAt);
        return { files: await writeResults(ctx, out, 'batch', startedAt, report, chart, write) };
      } finally {
        await fleet.stop();
      }
    });
  },
};

/** The scenario's figures. */
export interface BatchFigures {
  ttftP90Without: number;
  ttftP90With: number;
  ttftRatio: number;
  interactiveFailed: number;
  batchStatus: string;
  batchSeconds: number;
  linesCompleted: number;
  linesPerSecond: number;
  idleShareUsed: number;
  linesLost: number;
  linesRunTwice: number;
}

interface SummaryInput {
  gw: string;
  id: string;
  lines: number;
  rate: number;
  slots: number;
  logs: string[];
  baseline: InteractiveCall[];
  during: InteractiveCall[];
  /** The batch's run, ms since the origin. */
  window: [number, number];
  state: Awaited<ReturnType<typeof readBatch>>;
}

async function summarize(input: SummaryInput): Promise<BatchFigures> {
  const b = BATCH_BENCH;
  const p90 = (calls: InteractiveCall[]) =>
    percentile(
      calls
        .map((c) => c.ttftMs)
        .filter((t): t is number => t !== undefined)
        .sort((x, y) => x - y),
      0.9,
    );
  const [from, to] = input.window;
  const windowSeconds = (to - from) / 1000;
  const interactiveIn = input.during.filter((c) => c.sentAt >= from && c.sentAt < to).length;
  const idleSlotSeconds = input.slots * windowSeconds - interactiveIn * seconds(b.interactiveTokens);
  const answered = new Set(await answeredIds(input.gw, input.state.output_file_id));
  const runs = await runsByRequest(input.logs);
  const ran = (custom: string) => runs.get(`${input.id}:${custom}`) ?? 0;
  const customs = Array.from({ length: input.lines }, (_, i) => `l${i}`);
  const done = input.state.status === 'completed';
  const completed = input.state.request_counts.completed;
  return {
    ttftP90Without: p90(input.baseline),
    ttftP90With: p90(input.during),
    ttftRatio: p90(input.during) / p90(input.baseline),
    interactiveFailed: [...input.baseline, ...input.during].filter((c) => !c.ok).length,
    batchStatus: input.state.status,
    batchSeconds: windowSeconds,
    linesCompleted: completed,
    linesPerSecond: completed / windowSeconds,
    idleShareUsed: (completed * seconds(b.lineTokens)) / idleSlotSeconds,
    // Lost: an ended batch's line with no 2xx answer; a batch not ended loses none yet.
    linesLost: done ? customs.filter((c) => !answered.has(c)).length : 0,
    linesRunTwice: customs.filter((c) => ran(c) > 1).length,
  };
}

/** The chart: interactive TTFT p90 without and with the batch, the other goals in its subtitle. */
export function batchChart(f: BatchFigures, lines: number, cpus: number, startedAt: Date): string {
  return barChart(
    [
      {
        title: 'interactive TTFT p90',
        groups: [{ label: `${lines} lines`, values: [f.ttftP90Without, f.ttftP90With] }],
      },
    ],
    [
      { name: 'without the batch', color: '#4c78a8' },
      { name: 'with the batch', color: '#f58518' },
    ],
    {
      title: 'sluice bench batch',
      subtitle: `${cpus} cpus, ${startedAt.toISOString().slice(0, 16)}Z; idle capacity used ${(f.idleShareUsed * 100).toFixed(0)} %`,
      axis: 'ms',
      format: (v) => v.toFixed(0),
    },
  );
}

function formatBatch(f: BatchFigures): string {
  const pct = (v: number) => `${(v * 100).toFixed(1)} %`;
  const rows = [
    ['interactive TTFT p90 without the batch', `${f.ttftP90Without.toFixed(0)} ms`, ''],
    ['interactive TTFT p90 with the batch', `${f.ttftP90With.toFixed(0)} ms`, ''],
    ['ratio', `${f.ttftRatio.toFixed(2)}x`, f.ttftRatio <= 1.1 ? 'met (≤ 1.1x)' : 'missed (≤ 1.1x)'],
    ['idle capacity the batch used', pct(f.idleShareUsed), f.idleShareUsed >= 0.8 ? 'met (≥ 80 %)' : 'missed (≥ 80 %)'],
    [
      'lines lost / run twice',
      `${f.linesLost} / ${f.linesRunTwice}`,
      f.linesLost + f.linesRunTwice === 0 ? 'met (0)' : 'missed (0)',
    ],
    [
      'batch',
      `${f.batchStatus}, ${f.linesCompleted} lines in ${f.batchSeconds.toFixed(1)} s (${f.linesPerSecond.toFixed(0)}/s)`,
      '',
    ],
    ['interactive calls failed', String(f.interactiveFailed), ''],
  ];
  return formatTable(['figure', 'value', 'goal'], rows);
}
