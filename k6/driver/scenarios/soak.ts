/**
 * The soak scenario: sustained load with faults injected on a schedule. A Redis-backed gateway
 * in front of N registering runners and simulated engines takes open-loop traffic (sync,
 * streamed and detached chat calls) at 80 % of the capacity a short probe measured, for ten
 * minutes by default, while a runner is killed and started again, a runner is stopped and
 * continued, a supervised engine crashes, and Redis restarts, each once at its own point of the
 * run (soak/schedule.ts).
 *
 * It reports every call by outcome and whether its life overlapped a fault window, the calls the
 * engines ran more than once (from their call logs), the detached calls that never reached a
 * final status with a result or an error, the non-busy errors outside every window, and the
 * gateway's resident memory over the run, ending with an idle spell to see whether it comes back
 * down. The goals are zero, zero, zero, and back within 10 % of its start.
 */
import { readFile } from 'node:fs/promises';
import { performance } from 'node:perf_hooks';
import { setTimeout as delay } from 'node:timers/promises';
import { MemorySampler } from '../memory-sampler.ts';
import { readProcessMemory } from '../process-memory.ts';
import { writeResults } from '../report.ts';
import { inScratchRun } from '../scratch-run.ts';
import { SoakClient } from '../soak/client.ts';
import { pollDetached, pollPlan, probeCapacity, runLoad } from '../soak/drive.ts';
import { runSchedule } from '../soak/faults.ts';
import { SOAK_FLEET, startSoakFleet } from '../soak/fleet.ts';
import type { SoakFleet } from '../soak/fleet.ts';
import { Ledger } from '../soak/ledger.ts';
import { resolveSoakOptions } from '../soak/options.ts';
import type { SoakOptions } from '../soak/options.ts';
import { SOAK_LOAD, formatSoak, soakHeadline, soakReport, soakReportChart } from '../soak/report.ts';
import type { SoakReport } from '../soak/report.ts';
import { planSchedule } from '../soak/schedule.ts';
import type { Scenario, ScenarioContext } from '../types.ts';

/** Calls waiting for an answer at once before the driver drops a due call. */
const MAX_IN_FLIGHT = 4_000;
/** Most calls one soak sends, whatever rate and duration say: the ledger holds them all. */
const MAX_SOAK_CALLS = 1_000_000;
const SAMPLE_EVERY_MS = 1_000;

/** The `soak` scenario. */
export const soak: Scenario = {
  summary:
    'sustained load at 80% of measured capacity with a runner killed, a runner stopped, an engine crashed and Redis restarted on a schedule',
  async run(raw: SoakOptions, ctx: ScenarioContext) {
    const options = resolveSoakOptions(raw);
    if (readProcessMemory(process.pid) === undefined)
      throw new Error("the soak scenario reads the gateway's memory from /proc/<pid>/status: it runs on Linux only");
    return inScratchRun(ctx, 'sluice-soak-', async ({ progress, write, startedAt, machine, signal, dir }) => {
      let fleet: SoakFleet | undefined;
      let client: SoakClient | undefined;
      let sampler: MemorySampler | undefined;
      try {
        progress(
          `starting redis-server, ${options.nodes} sim engines and runners (${SOAK_FLEET.slots} slots, the first supervising its engine), and a gateway on the redis store...\n`,
        );
        fleet = await startSoakFleet({
          env: ctx.env,
          startService: ctx.startService,
          logLevel: options.logLevel,
          nodes: options.nodes,
          dir,
        });
        const gatewayPid = fleet.gateway.child.pid;
        const load: { inFlight: () => number } = { inFlight: () => 0 };
        sampler = new MemorySampler(
          () => readProcessMemory(gatewayPid),
          () => load.inFlight(),
          SAMPLE_EVERY_MS,
        );
        sampler.phase('probe');
        const slots = options.nodes * SOAK_FLEET.slots;
        client = new SoakClient(fleet.gateway.url, MAX_IN_FLIGHT);

        let capacity: SoakReport['capacity'];
        if (options.capacity !== undefined) {
          capacity = { rate: options.capacity, measured: false };
          progress(`capacity taken from --rate: ${options.capacity} calls/s\n`);
        } else {
          progress(`measuring capacity: ${slots} connections in closed loop for ${options.probe / 1000}s\n`);
          const probe = await probeCapacity(client, slots, options.probe, signal);
          interrupted(ctx.signal);
          if (probe.calls === 0)
            throw new Error(
              `the capacity probe got no whole answer in ${options.probe / 1000}s (${probe.errors} errors); the fleet does not serve`,
            );
          capacity = { rate: probe.rate, measured: true, probe };
          progress(`capacity: ${probe.rate.toFixed(1)} calls/s (${probe.errors} errors)\n`);
        }
        const rate = Math.max(1, Math.round(capacity.rate * SOAK_LOAD * 10) / 10);
        const schedule = planSchedule(options.duration, options.faults);
        progress(
          `soak: ${rate} calls/s for ${options.duration / 1000}s; faults at ${schedule.map((f) => `${f.kind} ${(f.atMs / 1000).toFixed(1)}s`).join(', ')}\n`,
        );

        const ledger = new Ledger();
        const start = performance.now();
        const now = (): number => performance.now() - start;
        sampler.phase('load');
        const running = runLoad(
          client,
          ledger,
          { rate, durationMs: options.duration, maxInFlight: MAX_IN_FLIGHT, maxCalls: MAX_SOAK_CALLS },
          start,
          signal,
        );
        load.inFlight = running.inFlight;
        const [windows] = await Promise.all([
          runSchedule(schedule, { fleet, now, stopForMs: options.stopFor, progress, ...(signal ? { signal } : {}) }),
          running.done,
        ]);
        const loadEndS = Math.min(now(), options.duration) / 1000;
        interrupted(ctx.signal);

        sampler.phase('drain');
        const accepted = ledger.accepted().map((e) => e.callId!);
        const poll = pollPlan(options.duration);
        progress(
          `load done (${ledger.entries.length} calls); polling ${accepted.length} detached calls, up to ${poll.withinMs / 1000}s\n`,
        );
        const fates = await pollDetached(client, accepted, poll, signal);
        interrupted(ctx.signal);
        sampler.phase('idle');
        progress(`idle for ${options.idle / 1000}s, sampling the gateway's memory\n`);
        await delay(options.idle, undefined, signal ? { signal } : {}).catch(() => undefined);
        interrupted(ctx.signal);
        sampler.stop();

        const callLogs = await Promise.all(fleet.callLogs.map((path) => readFile(path, 'utf8').catch(() => '')));
        const report = soakReport({
          startedAt,
          machine,
          nodes: options.nodes,
          durationMs: options.duration,
          capacity,
          rate,
          schedule,
          windows,
          ledger,
          fates,
          pollBoundMs: poll.withinMs,
          callLogs,
          samples: sampler.samples,
        });
        write(`\n${soakHeadline(report)}\n\n`);
        write(`${formatSoak(report)}\n\n`);
        const chart = soakReportChart(report, loadEndS);
        const files = await writeResults(ctx, options.out, 'soak', startedAt, report, chart, write);
        return { files };
      } finally {
        sampler?.stop();
        await client?.close().catch(() => undefined);
        await fleet?.stop();
      }
    });
  },
};

function interrupted(signal: AbortSignal | undefined): void {
  if (signal?.aborted) throw new Error('benchmark interrupted');
}
