/**
 * The serverless scenario's fleet: a gateway with one deployment and runners that start with no
 * engine, all real `sluice` processes on 127.0.0.1. Nothing serves the model until the gateway's
 * reconciler orders a replica onto a runner; the simulated engine takes {@link SERVERLESS_FLEET}
 * `startMs` to load, as a GPU engine takes minutes to load weights.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { runnerArgs } from '../../../placer/index.ts';
import type { ChildService } from '../../../placer/index.ts';
import { serviceGroup, startAll } from '../stack.ts';
import type { FleetBase } from '../stack.ts';
import { registeringEnv } from '../soak/fleet.ts';

/** The model of the one deployment; no engine serves it until the reconciler starts one. */
export const SERVERLESS_MODEL = 'bench-serverless';

/**
 * The fleet and the deployment's settings. The reconciler's windows and delays are the
 * defaults scaled down (period 30 s to 1 s, stable window 60 s to 10 s, panic 6 s to 2 s,
 * scale-down delay 5 min to 10 s) so that a two-minute trace shows a whole cycle; the rules are
 * the same.
 */
export const SERVERLESS_FLEET = Object.freeze({
  runners: 4,
  slots: 8,
  maxReplicas: 4,
  targetConcurrency: 4,
  scaleDownDelayMs: 10_000,
  periodMs: 1_000,
  stableWindowMs: 10_000,
  panicWindowMs: 2_000,
  /** The engine's start: what a cold start costs before any hop. */
  startMs: 2_000,
  ttftMs: 50,
  itlMs: 10,
  outputTokens: 100,
  /** GPUs one replica holds, for GPU-seconds: the simulated engine needs none, a real one would hold one. */
  gpusPerReplica: 1,
});

/** What {@link startServerlessFleet} started. */
export interface ServerlessFleet {
  readonly gateway: ChildService;
  readonly runners: readonly ChildService[];
  /** The operator token of this run's gateway (never printed or written). */
  readonly operatorToken: string;
  stop(): Promise<void>;
}

/** Starts the gateway and the runners; on failure stops what did start. */
export async function startServerlessFleet(options: FleetBase & { dir: string }): Promise<ServerlessFleet> {
  const f = SERVERLESS_FLEET;
  const { env, operatorToken } = registeringEnv(options.env);
  const { startService } = options;
  const level = ['--log-level', options.logLevel];
  const group = serviceGroup();
  try {
    const file = join(options.dir, 'deployments.json');
    const deployment = {
      model: SERVERLESS_MODEL,
      profile: {
        kind: 'sim',
        args: [
          '--startup-delay-ms',
          String(f.startMs),
          '--ttft-ms',
          String(f.ttftMs),
          '--itl-ms',
          String(f.itlMs),
          '--output-tokens',
          String(f.outputTokens),
          '--max-num-seqs',
          String(f.slots),
        ],
      },
      minReplicas: 0,
      maxReplicas: f.maxReplicas,
      targetConcurrency: f.targetConcurrency,
      scaleDownDelay: f.scaleDownDelayMs,
    };
    await writeFile(file, JSON.stringify([deployment]));
    const ms = (n: number) => `${n}ms`;
    const gateway = await group.track(
      startService(
        [
          'gateway',
          '--port',
          '0',
          '--gateway-id',
          'serverless-gw',
          '--runner-networks',
          '127.0.0.0/8',
          '--deployments',
          file,
          '--reconcile-period',
          ms(f.periodMs),
          '--scale-stable-window',
          ms(f.stableWindowMs),
          '--scale-panic-window',
          ms(f.panicWindowMs),
          ...level,
        ],
        { env },
      ),
    );
    const runners = await startAll(
      { group, startService },
      Array.from({ length: f.runners }, (_, i) =>
        runnerArgs({ id: `serverless-${i + 1}`, gateway: gateway.url }, ['--slots', String(f.slots), ...level]),
      ),
      env,
    );
    return { gateway, runners, operatorToken, stop: group.stop };
  } catch (error) {
    await group.stop();
    throw error;
  }
}
