/**
 * The overhead scenario: what a hop through sluice costs. The same small chat call goes to the
 * runner directly, through a bare Node proxy (bare-proxy.ts), through nginx (when installed) and
 * through the sluice gateway, with an engine that answers at once, so the differences are the
 * proxies' own cost. The bare proxy is the yardstick for sluice's Node hops: the CPU each process
 * spends per call is printed beside it, with the gateway's and the runner's ratios to it.
 *
 * Each target gets a warm-up, then for every round a closed-loop run (capacity) and an
 * open-loop run (latency at a fixed arrival rate), targets back to back and the order reversed
 * on every other round, so a noisy neighbour or a slow drift on this shared box does not always
 * land on the same target.
 */
import { loadavg } from 'node:os';
import { createMemoryLimiter } from '../../../gateway/index.ts';
import { latencyChart } from '../chart.ts';
import { measureKeyCost } from '../key-cost.ts';
import { startCpuSample } from '../cpu.ts';
import { LoadClient, runClosedLoop, runOpenLoop } from '../load.ts';
import { startOtlpSink } from '../otlp-sink.ts';
import type { OtlpSink } from '../otlp-sink.ts';
import type { LoadTarget } from '../load.ts';
import type { ResolvedBenchOptions } from '../options.ts';
import { combine, summarize } from '../record.ts';
import { ratio } from '../stats.ts';
import type { LoadMode, LoadResult, RunSummary } from '../record.ts';
import {
  formatMs,
  formatRatio,
  formatRatios,
  formatRuns,
  formatTable,
  ratios,
  reportHead,
  writeResults,
} from '../report.ts';
import { Recorder } from '../record.ts';
import { startStack, stackOutput } from '../stack.ts';
import type { Stack } from '../stack.ts';
import type { Scenario } from '../types.ts';
import { benchScenario } from '../scenario.ts';

/** The request every target gets: one short prompt, one output token. */
export const OVERHEAD_REQUEST = Object.freeze({
  path: '/v1/chat/completions',
  body: JSON.stringify({ model: 'sim-small', messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 }),
});

/**
 * A measured run with the round it belonged to, each process's CPU use (% of one core) and its
 * CPU time per 2xx response (µs). CPU per request is the steadier figure on a shared box: it
 * does not care how much CPU the neighbours left over, only what each request cost.
 */
export type OverheadRun = RunSummary & {
  round: number;
  cpu: Record<string, number>;
  cpuPerRequestUs: Record<string, number>;
};

/** The name of the bare Node proxy, as a target and as a process. */
export const BARE_PROXY = 'bare-proxy';

/** The gateway with a client key and limits (--with-keys): its process, and its target. */
export const KEYS_GATEWAY = 'gateway-keys';
export const KEYS_TARGET = 'sluice-keys';

/** The gateway and runner with tracing on (--tracing): their processes, and their target. */
export const TRACED_GATEWAY = 'gateway-traced';
export const TRACED_RUNNER = 'runner-traced';
export const TRACED_TARGET = 'sluice-traced';

/**
 * The target whose calls a proxy process carries; a process not listed (the engine, the runner)
 * carries every target's calls. A proxy idle while another target is measured must not have
 * those runs' calls divide its CPU.
 */
const CARRIES: Readonly<Record<string, string>> = Object.freeze({
  gateway: 'sluice',
  [KEYS_GATEWAY]: KEYS_TARGET,
  [BARE_PROXY]: BARE_PROXY,
  nginx: 'nginx',
  [TRACED_GATEWAY]: TRACED_TARGET,
  [TRACED_RUNNER]: TRACED_TARGET,
});

/** The target whose calls a process that carries the rest never sees: the traced one has its own runner. */
const SKIPS: Readonly<Record<string, string>> = Object.freeze({ runner: TRACED_TARGET });

/** True when `name`'s process carries the calls of runs on `target`. */
function carries(name: string, target: string): boolean {
  const only = CARRIES[name];
  return only === undefined ? SKIPS[name] !== target : only === target;
}

/** The ratios of CPU per call the overhead scenario prints: sluice's Node processes over the bare proxy. */
export const CPU_RATIOS: readonly (readonly [string, string])[] = Object.freeze([
  ['gateway', BARE_PROXY],
  ['runner', BARE_PROXY],
]);

/** One mode's CPU per 2xx response of every process (µs), and the ratios in {@link CPU_RATIOS}. */
export interface CpuPerCall {
  mode: LoadMode;
  usPerCall: Record<string, number>;
  /** `'gateway/bare-proxy'` and the like; NaN when either side is unknown. */
  ratios: Record<string, number>;
}

/**
 * Each process's CPU time per 2xx response in `mode`, pooled over every round: its CPU time in the
 * runs whose calls it carried ({@link CARRIES}) over those runs' 2xx responses. Pooling CPU time
 * and calls, rather than averaging per-run figures, weighs each run by the calls it served.
 * The driver is the bench, not a hop, and is left out.
 */
export function cpuPerCall(runs: readonly OverheadRun[], mode: LoadMode): CpuPerCall {
  const ofMode = runs.filter((r) => r.mode === mode);
  const names = [...new Set(ofMode.flatMap((r) => Object.keys(r.cpu)))].filter((n) => n !== 'driver');
  const usPerCall: Record<string, number> = {};
  for (const name of names) {
    const carried = ofMode.filter((r) => carries(name, r.target) && r.cpu[name] !== undefined);
    const cpuMs = carried.reduce((sum, r) => sum + (r.cpu[name]! / 100) * r.elapsedMs, 0);
    const calls = carried.reduce((sum, r) => sum + r.ok, 0);
    usPerCall[name] = calls > 0 ? (cpuMs * 1000) / calls : Number.NaN;
  }
  const ratios = Object.fromEntries(
    CPU_RATIOS.map(([a, b]) => [`${a}/${b}`, ratio(usPerCall[a] ?? Number.NaN, usPerCall[b] ?? Number.NaN)]),
  );
  return { mode, usPerCall, ratios };
}

/** The CPU-per-call table: one row per mode, a column per process, then the ratios. */
export function formatCpuPerCall(rows: readonly CpuPerCall[]): string {
  const names = [...new Set(rows.flatMap((r) => Object.keys(r.usPerCall)))];
  const ratioNames = CPU_RATIOS.map(([a, b]) => `${a}/${b}`);
  const us = (v: number | undefined): string => (v !== undefined && Number.isFinite(v) ? v.toFixed(0) : '-');
  return (
    'cpu per 2xx response, us, each process pooled over the runs whose calls it carried (the runner and engine carry every run)\n' +
    formatTable(
      ['mode', ...names, ...ratioNames],
      rows.map((r) => [
        r.mode,
        ...names.map((n) => us(r.usPerCall[n])),
        ...ratioNames.map((n) => formatRatio(r.ratios[n])),
      ]),
    )
  );
}

/**
 * What a client key and its limits add to the gateway's CPU per call: the keyed gateway's figure
 * minus the open one's, per mode. Both gateways run the same code on the same runner; the keyed
 * one also hashes the bearer token, looks it up, and checks and counts requests, tokens and a
 * concurrent call in memory, then settles the tokens from the answer's usage.
 */
export function formatKeysCost(rows: readonly CpuPerCall[]): string {
  const lines = rows.map((r) => {
    const added = (r.usPerCall[KEYS_GATEWAY] ?? Number.NaN) - (r.usPerCall.gateway ?? Number.NaN);
    return `  ${r.mode.padEnd(6)} ${Number.isFinite(added) ? added.toFixed(1) : '-'} us`;
  });
  return `cpu per call a client key and in-memory limits add to the gateway (${KEYS_GATEWAY} minus gateway):\n${lines.join('\n')}`;
}

/**
 * What tracing adds per call, per mode: the traced gateway's and runner's CPU per call in the runs
 * on {@link TRACED_TARGET} beside the plain gateway's and runner's in the runs on `sluice` (the
 * plain runner's runs on the other targets left out: a runner behind no gateway does less per
 * call). Both pairs run the same code on the same engine; the traced pair records every span and
 * exports it over OTLP/HTTP (protobuf) to the bench's sink.
 */
export function formatTracingCost(runs: readonly OverheadRun[], received: { exports: number; bytes: number }): string {
  const us = (v: number): string => (Number.isFinite(v) ? v.toFixed(0) : '-');
  const perCall = (mode: LoadMode, target: string, name: string): number => {
    const carried = runs.filter((r) => r.mode === mode && r.target === target && r.cpu[name] !== undefined);
    const cpuMs = carried.reduce((sum, r) => sum + (r.cpu[name]! / 100) * r.elapsedMs, 0);
    const calls = carried.reduce((sum, r) => sum + r.ok, 0);
    return calls > 0 ? (cpuMs * 1000) / calls : Number.NaN;
  };
  const modes = [...new Set(runs.map((r) => r.mode))];
  const lines = modes.map((mode) => {
    const cell = (plain: string, traced: string): string => {
      const off = perCall(mode, 'sluice', plain);
      const on = perCall(mode, TRACED_TARGET, traced);
      const added = on - off;
      return `${plain} ${us(off)} us off, ${us(on)} us on (${Number.isFinite(added) ? `${added >= 0 ? '+' : ''}${added.toFixed(0)}` : '-'} us)`;
    };
    return `  ${mode.padEnd(6)} ${cell('gateway', TRACED_GATEWAY)}; ${cell('runner', TRACED_RUNNER)}`;
  });
  const sent = `the OTLP sink received ${received.exports} exports, ${(received.bytes / 1e6).toFixed(1)} MB`;
  return `cpu per call with tracing off (sluice) and on (${TRACED_TARGET}, every span exported):\n${lines.join('\n')}\n${sent}`;
}

/** The `overhead` scenario. */
export const overhead: Scenario = benchScenario(
  'the cost of a hop through sluice, against the runner direct and nginx',
  async (options, { progress, write, startedAt, machine }, ctx) => {
    const clients: LoadClient[] = [];
    let stack: Stack | undefined;
    let sink: OtlpSink | undefined;
    try {
      if (options.tracing) sink = await startOtlpSink();
      progress(
        `starting sim engine, runner, gateway and bare proxy${options.nginx ? ' (and nginx when on PATH)' : ''}...\n`,
      );
      // Slots above the connection count: a busy answer would measure the runner's refusal, not the hop.
      stack = await startStack({
        env: ctx.env,
        startService: ctx.startService,
        logLevel: options.logLevel,
        slots: Math.max(256, options.connections * 2),
        nginx: options.nginx,
        bareProxy: true,
        keysGateway: options.withKeys,
        ...(sink ? { tracedEndpoint: sink.endpoint } : {}),
      });
      if (stack.nginxSkipped) write(`${stack.nginxSkipped}\n`);
      const targets: LoadTarget[] = [
        { name: 'direct', url: stack.runner.url },
        { name: BARE_PROXY, url: stack.bareProxy!.url },
        ...(stack.nginx ? [{ name: 'nginx', url: stack.nginx.url }] : []),
        { name: 'sluice', url: stack.gateway.url },
        ...(stack.keysGateway
          ? [
              {
                name: KEYS_TARGET,
                url: stack.keysGateway.gateway.url,
                authorization: `Bearer ${stack.keysGateway.key}`,
              },
            ]
          : []),
        ...(stack.traced ? [{ name: TRACED_TARGET, url: stack.traced.gateway.url }] : []),
      ].map(({ authorization, ...t }: { name: string; url: string; authorization?: string }) => ({
        ...t,
        url: t.url + OVERHEAD_REQUEST.path,
        headers: { 'content-type': 'application/json', ...(authorization ? { authorization } : {}) },
        body: OVERHEAD_REQUEST.body,
      }));
      for (const t of targets) clients.push(new LoadClient(t, { connections: options.connections }));
      await preflight(clients, stack);
      const raws = await runRounds(clients, options, stack, progress, ctx.signal);

      const runs: OverheadRun[] = raws.map((r) => {
        const s = summarize(r.result);
        const perRequest = Object.fromEntries(
          Object.entries(r.cpu).map(([name, pct]) => [
            name,
            Math.round(((pct / 100) * s.elapsedMs * 1000) / Math.max(s.ok, 1)),
          ]),
        );
        return { ...s, round: r.round, cpu: r.cpu, cpuPerRequestUs: perRequest };
      });
      const combined = (['closed', 'open'] as const).flatMap((mode) =>
        clients.map((c) =>
          summarize(
            combine(
              raws.filter((r) => r.result.mode === mode && r.result.target === c.target.name).map((r) => r.result),
            ),
          ),
        ),
      );
      const ratioRows = ratios(combined, 'sluice', ['direct', BARE_PROXY, 'nginx']);
      const cpuRows = (['closed', 'open'] as const).map((mode) => cpuPerCall(runs, mode));
      const loadAfter = loadavg().map((l) => Math.round(l * 100) / 100);
      // Other work on the box takes CPU from every process measured; say how much there was.
      write(
        `\nsluice bench overhead: ${machine.cpus} cpus, node ${machine.node}, ${startedAt.toISOString()}, load average ${machine.loadAverage[0]} at start, ${loadAfter[0]} at end\n\n`,
      );
      write(`${formatRuns(options.rounds > 1 ? runs : combined)}\n\n`);
      if (options.rounds > 1) write(`all ${options.rounds} rounds pooled:\n${formatRuns(combined)}\n\n`);
      write(`${formatRatios(ratioRows)}\n\n`);
      write(`${formatCpu(runs)}\n\n`);
      write(`${formatCpuPerCall(cpuRows)}\n\n`);
      if (stack.keysGateway) {
        write(`${formatKeysCost(cpuRows)}\n`);
        const inProcess = await measureKeyCost(createMemoryLimiter(), 200_000);
        write(
          `in process, cpu per call: key lookup ${inProcess.lookupUs.toFixed(1)} us, lookup and in-memory limits ${inProcess.limitsUs.toFixed(1)} us\n\n`,
        );
      }
      if (sink) write(`${formatTracingCost(runs, sink.received)}\n\n`);

      const report = {
        ...reportHead('overhead', startedAt, machine),
        machine: { ...machine, loadAverageAtEnd: loadAfter },
        options,
        request: OVERHEAD_REQUEST,
        notes: stack.nginxSkipped ? [stack.nginxSkipped] : [],
        runs,
        combined,
        ratios: ratioRows,
        cpuPerCall: cpuRows,
      };
      const subtitle = `${machine.cpus} cpus, node ${machine.node}, ${startedAt.toISOString().slice(0, 16)}Z, ${options.duration / 1000}s per run, ${options.rounds} round(s)`;
      const files = await writeResults(
        ctx,
        options.out,
        'overhead',
        startedAt,
        report,
        latencyChart(combined, 'sluice bench overhead: latency percentiles', subtitle),
        write,
      );
      return { files };
    } finally {
      await Promise.all(clients.map((c) => c.close().catch(() => undefined)));
      await stack?.stop();
      await sink?.close();
    }
  },
);

type RawRun = { round: number; result: LoadResult; cpu: Record<string, number> };

/** The warm-ups, then every round: closed loop for each target, then open loop for each. */
async function runRounds(
  clients: readonly LoadClient[],
  options: ResolvedBenchOptions,
  stack: Stack,
  progress: (t: string) => void,
  signal: AbortSignal | undefined,
): Promise<RawRun[]> {
  if (options.warmup > 0) {
    for (const c of clients) {
      progress(`warm-up ${c.target.name} ${options.warmup} ms\n`);
      await runClosedLoop(c, { duration: options.warmup, ...(signal ? { signal } : {}) });
    }
  }
  const raws: RawRun[] = [];
  for (let round = 1; round <= options.rounds; round++) {
    const order = round % 2 === 1 ? clients : [...clients].reverse();
    for (const mode of ['closed', 'open'] as const) {
      for (const client of order) {
        throwIfAborted(signal);
        const run = await measure(client, mode, options, stack, signal);
        throwIfAborted(signal);
        const s = summarize(run.result);
        progress(
          `round ${round} ${mode.padEnd(6)} ${client.target.name.padEnd(10)} ${s.rps.toFixed(0)} req/s p50 ${formatMs(s.latency.p50)} p99 ${formatMs(s.latency.p99)} ms, ${s.errors} errors\n`,
        );
        raws.push({ round, ...run });
      }
    }
  }
  return raws;
}

async function measure(
  client: LoadClient,
  mode: LoadMode,
  options: ResolvedBenchOptions,
  stack: Stack,
  signal: AbortSignal | undefined,
): Promise<Omit<RawRun, 'round'>> {
  const cpu = startCpuSample({
    engine: stack.engine.child.pid,
    runner: stack.runner.child.pid,
    gateway: stack.gateway.child.pid,
    [KEYS_GATEWAY]: stack.keysGateway?.gateway.child.pid,
    [BARE_PROXY]: stack.bareProxy?.child.pid,
    [TRACED_GATEWAY]: stack.traced?.gateway.child.pid,
    [TRACED_RUNNER]: stack.traced?.runner.child.pid,
    nginx: stack.nginx?.pid,
  });
  const bounds = { duration: options.duration, ...(signal ? { signal } : {}) };
  const result =
    mode === 'closed'
      ? await runClosedLoop(client, bounds)
      : await runOpenLoop(client, { ...bounds, rate: options.rate });
  return { result, cpu: cpu.stop() };
}

/** One request per target before anything is timed: a target that does not answer 200 stops the bench. */
async function preflight(clients: readonly LoadClient[], stack: Stack): Promise<void> {
  for (const c of clients) {
    const rec = new Recorder();
    await c.send(rec, performance.now());
    const statuses = Object.keys(rec.statuses);
    if (statuses.length !== 1 || statuses[0] !== '200') {
      const got = statuses.length ? `status ${statuses.join(',')}` : `error ${Object.keys(rec.errors).join(',')}`;
      throw new Error(`preflight: ${c.target.name} (${c.target.url}) answered ${got}, not 200\n${stackOutput(stack)}`);
    }
  }
}

function formatCpu(runs: readonly OverheadRun[]): string {
  // A process idle during a run (the gateway while direct is measured) is noise, not a figure.
  const names = [...new Set(runs.flatMap((r) => Object.keys(r.cpu)))];
  const cell = (r: OverheadRun, n: string): string =>
    (r.cpu[n] ?? 0) < 2 ? '-' : `${Math.round(r.cpu[n]!)}% ${r.cpuPerRequestUs[n]}us`;
  const rows = runs.map((r) => [String(r.round), r.target, r.mode, ...names.map((n) => cell(r, n))]);
  return `cpu during each run: % of one core, and cpu time per 2xx response\n${formatTable(['round', 'target', 'mode', ...names], rows)}`;
}

function throwIfAborted(signal: AbortSignal | undefined): void {
  if (signal?.aborted) throw new Error('benchmark interrupted');
}
