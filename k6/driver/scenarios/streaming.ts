/**
 * The streaming scenario: does a hop through sluice hold tokens back? A simulated engine streams
 * 40 tokens 20 ms apart after 50 ms; streaming chat calls go to the runner directly and through
 * the gateway, interleaved (each worker alternates targets call by call, so both see the same
 * engine, the same moment and the same neighbours), at a fixed concurrency for a bounded time.
 *
 * Every body chunk's arrival is timed as it is read. A gateway that buffers or coalesces shows
 * as a later first chunk, gaps longer than the engine's 20 ms, and several SSE events per chunk.
 * The CPU each process spends during the measured run is printed per chunk it relayed.
 */
import { performance } from 'node:perf_hooks';
import { Pool } from 'undici';
import { latencyChart } from '../chart.ts';
import { startCpuSample } from '../cpu.ts';
import { assertLocalTarget } from '../load.ts';
import { summarize } from '../record.ts';
import type { LoadMode, RunSummary } from '../record.ts';
import { formatMs, formatRatio, formatTable, reportHead, writeResults } from '../report.ts';
import { startStack, stackOutput } from '../stack.ts';
import type { EngineTiming, Stack } from '../stack.ts';
import { distribution, ratio } from '../stats.ts';
import type { Distribution } from '../stats.ts';
import { countEvents, gapsOf } from '../stream-record.ts';
import type { StreamTrace } from '../stream-record.ts';
import type { Scenario } from '../types.ts';
import { benchScenario } from '../scenario.ts';

/** The engine every stream comes from: 50 ms to the first token, then one every 20 ms. */
const STREAMING_ENGINE: EngineTiming = Object.freeze({ ttftMs: 50, itlMs: 20, outputTokens: 40 });

/** The request every target gets. */
export const STREAMING_REQUEST = Object.freeze({
  path: '/v1/chat/completions',
  body: JSON.stringify({
    model: 'sim-small',
    messages: [{ role: 'user', content: 'hi' }],
    max_tokens: STREAMING_ENGINE.outputTokens,
    stream: true,
  }),
});

/** One target's figures. */
export interface StreamingFigures {
  target: string;
  calls: number;
  /** Body chunks read, all streams pooled. */
  chunks: number;
  errors: Record<string, number>;
  headers: Distribution;
  /** Time to the first body chunk, i.e. the first SSE event. */
  firstChunk: Distribution;
  /** Every gap between consecutive chunks of a stream, all streams pooled. */
  gap: Distribution;
  /** Mean SSE events per chunk: 1 means nothing was coalesced. */
  eventsPerChunk: number;
}

interface Target {
  name: string;
  pool: Pool;
  path: string;
}

/** The `streaming` scenario. */
export const streaming: Scenario = benchScenario(
  'time to first token and inter-chunk gaps of SSE streams, direct vs through sluice',
  async (options, { progress, write, startedAt, machine }, ctx) => {
    const concurrency = options.connections;
    const targets: Target[] = [];
    let stack: Stack | undefined;
    try {
      progress(
        `starting sim engine (ttft ${STREAMING_ENGINE.ttftMs} ms, itl ${STREAMING_ENGINE.itlMs} ms, ${STREAMING_ENGINE.outputTokens} tokens), runner and gateway...\n`,
      );
      stack = await startStack({
        env: ctx.env,
        startService: ctx.startService,
        logLevel: options.logLevel,
        slots: Math.max(64, concurrency * 2),
        nginx: false,
        engine: STREAMING_ENGINE,
      });
      for (const [name, url] of [
        ['direct', stack.runner.url],
        ['sluice', stack.gateway.url],
      ] as const) {
        const parsed = assertLocalTarget(url + STREAMING_REQUEST.path);
        targets.push({
          name,
          path: parsed.pathname,
          pool: new Pool(parsed.origin, { connections: concurrency, pipelining: 1, keepAliveTimeout: 30_000 }),
        });
      }
      for (const t of targets) {
        const trace = await streamOnce(t);
        if (
          trace.kind !== 'ok' ||
          trace.trace.eventsPerChunk.reduce((a, b) => a + b, 0) < STREAMING_ENGINE.outputTokens
        ) {
          throw new Error(
            `preflight: ${t.name} did not stream ${STREAMING_ENGINE.outputTokens} events (${trace.kind === 'ok' ? `${trace.trace.chunkMs.length} chunks` : trace.error})\n${stackOutput(stack)}`,
          );
        }
      }
      if (options.warmup > 0) {
        progress(`warm-up ${options.warmup} ms, ${concurrency} streams at once\n`);
        await runInterleaved(targets, concurrency, options.warmup, ctx.signal);
      }
      progress(`measuring ${options.duration} ms, ${concurrency} streams at once, direct and sluice interleaved\n`);
      const cpuSample = startCpuSample({
        engine: stack.engine.child.pid,
        runner: stack.runner.child.pid,
        gateway: stack.gateway.child.pid,
      });
      const started = performance.now();
      const results = await runInterleaved(targets, concurrency, options.duration, ctx.signal);
      const elapsedMs = performance.now() - started;
      const cpu = cpuSample.stop();
      const figures = targets.map((t) => figuresOf(t.name, results.get(t.name)!));
      const perChunk = cpuPerChunk(cpu, elapsedMs, figures);

      write(
        `\nsluice bench streaming: ${machine.cpus} cpus, node ${machine.node}, ${startedAt.toISOString()}, engine ttft ${STREAMING_ENGINE.ttftMs} ms, itl ${STREAMING_ENGINE.itlMs} ms, ${STREAMING_ENGINE.outputTokens} tokens, ${concurrency} streams at once, ${options.duration / 1000}s\n\n`,
      );
      write(`${formatFigures(figures)}\n\n`);
      const ratioRows = streamingRatios(figures, 'sluice', 'direct');
      write(
        `${formatTable(
          ['ratio', 'measure', 'p50', 'p90', 'p99'],
          ratioRows.map((r) => [r.ratio, r.measure, ...[r.p50, r.p90, r.p99].map(formatRatio)]),
        )}\n\n`,
      );
      write(`${formatCpuPerChunk(perChunk)}\n\n`);

      const report = {
        ...reportHead('streaming', startedAt, machine),
        options: { ...options, concurrency },
        engine: STREAMING_ENGINE,
        request: STREAMING_REQUEST,
        elapsedMs,
        figures,
        ratios: ratioRows,
        cpu,
        cpuPerChunk: perChunk,
      };
      const subtitle = `${machine.cpus} cpus, node ${machine.node}, ${startedAt.toISOString().slice(0, 16)}Z, ${concurrency} streams, engine itl ${STREAMING_ENGINE.itlMs} ms`;
      const chartRows = figures.flatMap((f) => [
        asSummary(f, 'closed', f.firstChunk, elapsedMs),
        asSummary(f, 'open', f.gap, elapsedMs),
      ]);
      const svg = latencyChart(chartRows, 'sluice bench streaming: first chunk and inter-chunk gap', subtitle, {
        closed: 'time to first chunk (ms)',
        open: 'gap between chunks (ms)',
      });
      const files = await writeResults(ctx, options.out, 'streaming', startedAt, report, svg, write);
      return { files };
    } finally {
      await Promise.all(targets.map((t) => t.pool.close().catch(() => undefined)));
      await stack?.stop();
    }
  },
);

type Outcome = { kind: 'ok'; trace: StreamTrace } | { kind: 'error'; error: string };

/** One streamed call, every chunk timed on arrival. */
async function streamOnce(target: Target): Promise<Outcome> {
  const sent = performance.now();
  try {
    const res = await target.pool.request({
      method: 'POST',
      path: target.path,
      headers: { 'content-type': 'application/json' },
      body: STREAMING_REQUEST.body,
      headersTimeout: 10_000,
      bodyTimeout: 10_000,
    });
    const headersMs = performance.now() - sent;
    if (res.statusCode !== 200) {
      await res.body.dump();
      return { kind: 'error', error: `status ${res.statusCode}` };
    }
    const chunkMs: number[] = [];
    const eventsPerChunk: number[] = [];
    const decoder = new TextDecoder();
    for await (const chunk of res.body) {
      // Read the clock first: decoding and counting are the driver's work, not the stream's.
      chunkMs.push(performance.now() - sent);
      eventsPerChunk.push(countEvents(decoder.decode(chunk as Uint8Array, { stream: true })));
    }
    return { kind: 'ok', trace: { headersMs, chunkMs, eventsPerChunk } };
  } catch (error) {
    return { kind: 'error', error: (error as { code?: string }).code ?? (error as Error).name };
  }
}

/** `concurrency` workers, each alternating targets call by call (half start on each), until `durationMs` has passed. */
async function runInterleaved(
  targets: readonly Target[],
  concurrency: number,
  durationMs: number,
  signal: AbortSignal | undefined,
): Promise<Map<string, Outcome[]>> {
  const results = new Map(targets.map((t) => [t.name, [] as Outcome[]]));
  const end = performance.now() + durationMs;
  const worker = async (w: number): Promise<void> => {
    for (let k = w; performance.now() < end && !signal?.aborted; k++) {
      const target = targets[k % targets.length]!;
      results.get(target.name)!.push(await streamOnce(target));
    }
  };
  await Promise.all(Array.from({ length: concurrency }, (_, w) => worker(w)));
  if (signal?.aborted) throw new Error('benchmark interrupted');
  return results;
}

function figuresOf(target: string, outcomes: readonly Outcome[]): StreamingFigures {
  const traces = outcomes.flatMap((o) => (o.kind === 'ok' ? [o.trace] : []));
  const errors: Record<string, number> = {};
  for (const o of outcomes) if (o.kind === 'error') errors[o.error] = (errors[o.error] ?? 0) + 1;
  const chunks = traces.reduce((n, t) => n + t.chunkMs.length, 0);
  const events = traces.reduce((n, t) => n + t.eventsPerChunk.reduce((a, b) => a + b, 0), 0);
  return {
    target,
    calls: traces.length,
    chunks,
    errors,
    headers: distribution(traces.map((t) => t.headersMs)),
    firstChunk: distribution(traces.flatMap((t) => t.chunkMs.slice(0, 1))),
    gap: distribution(traces.flatMap((t) => gapsOf(t.chunkMs))),
    eventsPerChunk: chunks > 0 ? events / chunks : Number.NaN,
  };
}

/** The target whose chunks a process relays; one not listed (the engine, the runner) relays every target's. */
const RELAYS: Readonly<Record<string, string>> = Object.freeze({ gateway: 'sluice' });

/** One process's CPU during the measured run and per chunk it relayed. */
export interface ChunkCost {
  process: string;
  /** % of one core. */
  cpu: number;
  chunks: number;
  /** CPU time per relayed chunk, µs; NaN when it relayed none. */
  usPerChunk: number;
}

/**
 * Each process's CPU time over the chunks it relayed in `elapsedMs`: the gateway relays the
 * sluice target's, the runner and the engine every target's (direct calls meet the runner
 * first). The per-call work (placement, headers, the call's set-up) is spread over its chunks,
 * so this is the cost of a streamed call per chunk, not of the write of a chunk alone. The
 * driver is the bench, not a hop, and is left out.
 */
export function cpuPerChunk(
  cpu: Readonly<Record<string, number>>,
  elapsedMs: number,
  figures: readonly Pick<StreamingFigures, 'target' | 'chunks'>[],
): ChunkCost[] {
  return Object.entries(cpu)
    .filter(([name]) => name !== 'driver')
    .map(([name, pct]) => {
      const relays = RELAYS[name];
      const chunks = figures
        .filter((f) => relays === undefined || f.target === relays)
        .reduce((n, f) => n + f.chunks, 0);
      return {
        process: name,
        cpu: pct,
        chunks,
        usPerChunk: chunks > 0 ? ((pct / 100) * elapsedMs * 1000) / chunks : Number.NaN,
      };
    });
}

function formatCpuPerChunk(rows: readonly ChunkCost[]): string {
  return (
    "cpu during the measured run: % of one core, chunks relayed (the gateway relays sluice's, the runner and engine both targets'), cpu time per relayed chunk\n" +
    formatTable(
      ['process', 'cpu %', 'chunks', 'us/chunk'],
      rows.map((r) => [
        r.process,
        r.cpu.toFixed(1),
        String(r.chunks),
        Number.isFinite(r.usPerChunk) ? r.usPerChunk.toFixed(1) : '-',
      ]),
    )
  );
}

/** `subject / baseline` for the first chunk and the gap, at p50, p90 and p99. */
export function streamingRatios(
  figures: readonly StreamingFigures[],
  subject: string,
  baseline: string,
): { ratio: string; measure: string; p50: number; p90: number; p99: number }[] {
  const s = figures.find((f) => f.target === subject);
  const b = figures.find((f) => f.target === baseline);
  if (!s || !b) return [];
  return (['firstChunk', 'gap'] as const).map((m) => ({
    ratio: `${subject}/${baseline}`,
    measure: m === 'firstChunk' ? 'first chunk' : 'gap',
    p50: ratio(s[m].p50, b[m].p50),
    p90: ratio(s[m].p90, b[m].p90),
    p99: ratio(s[m].p99, b[m].p99),
  }));
}

function formatFigures(figures: readonly StreamingFigures[]): string {
  const errors = (f: StreamingFigures): string => String(Object.values(f.errors).reduce((a, b) => a + b, 0));
  return `${formatTable(
    [
      'target',
      'streams',
      'errors',
      'headers p50',
      'first p50',
      'first p90',
      'first p99',
      'gap p50',
      'gap p90',
      'gap p99',
      'gap max',
      'events/chunk',
    ],
    figures.map((f) => [
      f.target,
      String(f.calls),
      errors(f),
      formatMs(f.headers.p50),
      formatMs(f.firstChunk.p50),
      formatMs(f.firstChunk.p90),
      formatMs(f.firstChunk.p99),
      formatMs(f.gap.p50),
      formatMs(f.gap.p90),
      formatMs(f.gap.p99),
      formatMs(f.gap.max),
      f.eventsPerChunk.toFixed(2),
    ]),
  )}\n(ms; "first" is the first body chunk, i.e. the first SSE event; gaps pool every stream)`;
}

/** Shapes one measure as a run summary so the shared latency chart can draw it. */
function asSummary(f: StreamingFigures, mode: LoadMode, d: Distribution, elapsedMs: number): RunSummary {
  const base = summarize({
    target: f.target,
    mode,
    connections: 0,
    durationMs: elapsedMs,
    elapsedMs,
    sent: f.calls,
    dropped: 0,
    latencies: [],
    ttfb: [],
    sendLag: [],
    statuses: { '200': f.calls },
    errors: f.errors,
  });
  return { ...base, latency: d };
}
