/**
 * The serverless scenario: a deployment at zero replicas over runners with no engine, a bursty
 * trace (quiet, a burst, quiet) of streamed calls, and the gateway's reconciler scaling it up
 * from zero on the first call, to its maximum in the burst, and back to zero after. It reports
 * GPU-seconds held against an always-on fleet at the maximum, the calls that waited for a cold
 * start and what that added to their first token, and failed calls. Goals: under 40 % of the
 * always-on GPU-seconds, and no failed call.
 */
import { performance } from 'node:perf_hooks';
import { benchDefaults, checkInteger } from '../options.ts';
import type { BenchOptions } from '../options.ts';
import { reportHead, writeResults } from '../report.ts';
import { inScratchRun } from '../scratch-run.ts';
import { SERVERLESS_FLEET, startServerlessFleet } from '../serverless/fleet.ts';
import type { ServerlessFleet } from '../serverless/fleet.ts';
import { formatServerless, serverlessChart, summarizeServerless } from '../serverless/report.ts';
import { burstTrace, runTrace, sampleReplicas } from '../serverless/trace.ts';
import { until } from '../soak/wait.ts';
import type { Scenario, ScenarioContext } from '../types.ts';

/** The trace's length when --duration is not given: long enough for a whole cycle at the scaled-down windows. */
const DEFAULT_DURATION_MS = 120_000;
/** The burst's calls a second when --rate is not given: about four times what the maximum's target carries. */
const DEFAULT_BURST_RATE = 16;
const SAMPLE_EVERY_MS = 250;

/** The `serverless` scenario. */
export const serverless: Scenario = {
  summary:
    'a deployment scaled from zero on a bursty trace over runners with no engine: GPU-seconds against always-on, cold-start waits, failed calls',
  async run(raw: BenchOptions, ctx: ScenarioContext) {
    const durationMs = checkInteger('duration', raw.duration ?? DEFAULT_DURATION_MS, 40_000, 300_000, 'ms');
    const rate = checkInteger('rate', raw.rate ?? DEFAULT_BURST_RATE, 1, 200);
    const logLevel = raw.logLevel ?? benchDefaults.logLevel;
    const out = raw.out ?? benchDefaults.out;
    return inScratchRun(ctx, 'sluice-serverless-', async ({ progress, write, startedAt, machine, signal, dir }) => {
      let fleet: ServerlessFleet | undefined;
      try {
        const f = SERVERLESS_FLEET;
        progress(
          `starting a gateway with one deployment (0 to ${f.maxReplicas} replicas, target ${f.targetConcurrency}) and ${f.runners} runners with no engine...\n`,
        );
        fleet = await startServerlessFleet({ env: ctx.env, startService: ctx.startService, logLevel, dir });
        const gatewayUrl = fleet.gateway.url;
        const token = fleet.operatorToken;
        const registered = await until(
          async () => {
            const res = await fetch(`${gatewayUrl}/v1/runners`, { headers: { authorization: `Bearer ${token}` } });
            const list = (await res.json()) as { data: unknown[] };
            return list.data.length === f.runners;
          },
          30_000,
          signal,
        );
        if (!registered) throw new Error(`the ${f.runners} runners did not register with the gateway within 30 s`);
        const phases = burstTrace(durationMs, rate);
        progress(
          `trace: ${phases.map((p) => `${p.name} ${p.ms / 1000}s${p.rate ? ` at ${p.rate}/s` : ''}`).join(', ')}\n`,
        );
        let origin = performance.now();
        const sampler = sampleReplicas(gatewayUrl, token, () => origin, SAMPLE_EVERY_MS);
        origin = performance.now();
        const { calls } = await runTrace(gatewayUrl, phases, signal);
        await sampler.stop();
        const figures = summarizeServerless(calls, sampler.samples, durationMs, f.maxReplicas, f.gpusPerReplica);
        const report = {
          ...reportHead('serverless', startedAt, machine),
          fleet: f,
          trace: phases,
          figures,
          samples: sampler.samples,
        };
        write(
          `\nsluice bench serverless: ${machine.cpus} cpus, node ${machine.node}, ${startedAt.toISOString()}, ${f.runners} runners, engine start ${f.startMs / 1000}s, burst ${rate} calls/s\n\n`,
        );
        write(`${formatServerless(figures)}\n\n`);
        const subtitle = `${machine.cpus} cpus, node ${machine.node}, ${startedAt.toISOString().slice(0, 16)}Z; 0-${f.maxReplicas} replicas, target ${f.targetConcurrency}, engine start ${f.startMs / 1000}s; GPU-seconds ${(figures.share * 100).toFixed(1)} % of always-on`;
        const chart = serverlessChart(
          sampler.samples,
          calls,
          phases,
          'sluice bench serverless: replicas follow a burst from zero and back',
          subtitle,
        );
        const files = await writeResults(ctx, out, 'serverless', startedAt, report, chart, write);
        return { files };
      } finally {
        await fleet?.stop();
      }
    });
  },
};
