/**
 * The fleet the soak loads and hurts, all real child processes on 127.0.0.1: a redis-server as
 * the gateway's store, one gateway, and N simulated engines each behind a runner that registers
 * itself with the gateway (so a runner started again after a kill comes back by itself, on a new
 * port). The first runner launches and supervises its engine (`--profile`, kind sim), so that
 * killing the engine is a crash the runner must recover from; the others front engines the
 * soak started. Every engine appends the ids of the calls it runs to its own call log.
 */
import { randomBytes } from 'node:crypto';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { freePort, runnerArgs, simEngineArgs } from '../../../placer/index.ts';
import type { ChildService } from '../../../placer/index.ts';
import { serviceGroup } from '../stack.ts';
import type { FleetBase } from '../stack.ts';
import { startBenchRedis } from './redis.ts';
import type { BenchRedis } from './redis.ts';
import { until } from './wait.ts';

/** The model every engine serves and every call names. */
export const SOAK_MODEL = 'sim-small';

/**
 * The engines and runners: the small profile with a token every 8 ms and 24 tokens a call, so a
 * call lasts about a quarter of a second and a fault always finds calls in flight; eight slots a
 * runner, as many sequences an engine, so a full runner reads busy instead of queueing.
 */
export const SOAK_FLEET = Object.freeze({
  slots: 8,
  itlMs: 8,
  maxTokens: 24,
  profile: 'small',
  placer: 'round-robin',
  placerTimeout: '30s',
});

/** One engine and its runner. */
export interface SoakNode {
  readonly index: number;
  /** The runner's `--id`, its id in the gateway's pool. */
  readonly id: string;
  /** True for the runner that launched its engine itself. */
  readonly supervised: boolean;
  /** The engine the soak started; undefined for the supervised node, whose runner owns its engine. */
  readonly engine: ChildService | undefined;
  /** The runner now running (replaced when the runner-kill fault starts it again). */
  runner: ChildService;
  /** This node's call log. */
  readonly callLog: string;
  /** True while the runner-stop fault holds it stopped. */
  stopped: boolean;
}

/** A registered runner as the gateway's `GET /v1/runners` shows it (the fields the soak reads). */
export interface PoolRunner {
  id: string;
  url: string;
  state: string;
  ready: boolean;
}

/** What {@link startSoakFleet} started. */
export interface SoakFleet {
  readonly gateway: ChildService;
  readonly redis: BenchRedis;
  readonly nodes: readonly SoakNode[];
  /** Every call log, one per node. */
  readonly callLogs: readonly string[];
  /** The gateway's pool now; throws when the gateway does not answer within 2 s. */
  poolRunners(): Promise<PoolRunner[]>;
  /** A runner's `/status`; throws when it does not answer within 2 s. */
  runnerStatus(node: SoakNode): Promise<RunnerStatusView>;
  /** Starts `node`'s runner again with the same arguments (after it was killed). */
  restartRunner(node: SoakNode): Promise<void>;
  /** Stops everything, front to back, continuing a stopped runner first; idempotent. */
  stop(): Promise<void>;
}

/** The parts of a runner's `/status` the soak reads. */
export interface RunnerStatusView {
  ready: boolean;
  engines: { state: string; supervised?: { state: string; pid?: number; restarts: number } }[];
}

/** How to start the fleet. */
export interface SoakFleetOptions extends FleetBase {
  readonly nodes: number;
  /** A folder of the soak's own: the call logs and Redis's append-only file go there. */
  readonly dir: string;
}

/** Longest wait for every runner to be live and ready in the gateway's pool after the start. */
const READY_WITHIN_MS = 60_000;
const CONTROL_TIMEOUT_MS = 2_000;

/** Starts the fleet and waits until the gateway has every runner ready; on failure stops what did start. */
export async function startSoakFleet(options: SoakFleetOptions): Promise<SoakFleet> {
  const { env, operatorToken } = registeringEnv(options.env);
  const { startService } = options;
  const level = ['--log-level', options.logLevel];
  const group = serviceGroup();
  const nodes: SoakNode[] = [];
  let redis: BenchRedis | undefined;
  const argsOf = new Map<SoakNode, readonly string[]>();
  const stop = async (): Promise<void> => {
    for (const node of nodes) if (node.stopped) signal(node.runner, 'SIGCONT');
    await group.stop();
    await redis?.stop();
  };
  try {
    await mkdir(join(options.dir, 'redis'), { recursive: true });
    redis = await startBenchRedis(join(options.dir, 'redis'));
    const gateway = await group.track(
      startService(
        [
          'gateway',
          '--port',
          '0',
          '--store',
          redis.url,
          '--gateway-id',
          'soak-gw',
          '--placer',
          SOAK_FLEET.placer,
          '--placer-timeout',
          SOAK_FLEET.placerTimeout,
          '--runner-networks',
          '127.0.0.0/8',
          ...level,
        ],
        { env },
      ),
    );
    const engineArgs = (i: number, callLog: string): string[] => [
      '--engine-id',
      `soak-sim-${i + 1}`,
      '--profile',
      SOAK_FLEET.profile,
      '--itl-ms',
      String(SOAK_FLEET.itlMs),
      '--max-num-seqs',
      String(SOAK_FLEET.slots),
      '--call-log',
      callLog,
      ...level,
    ];
    const ids = Array.from({ length: options.nodes }, (_, i) => i);
    const engines = await Promise.all(
      ids.map((i) =>
        i === 0
          ? undefined
          : group.track(
              startService(simEngineArgs({}, ['--model', SOAK_MODEL, ...engineArgs(i, callLogOf(options.dir, i))]), {
                env,
              }),
            ),
      ),
    );
    const enginePort = await freePort();
    const started = await Promise.all(
      ids.map(async (i) => {
        const callLog = callLogOf(options.dir, i);
        const id = `soak-${i + 1}`;
        // The first node's runner launches its engine from a profile; the others front one started here.
        const profile = { kind: 'sim', model: SOAK_MODEL, port: enginePort, args: engineArgs(i, callLog) };
        const args = runnerArgs({ id, gateway: gateway.url, engine: engines[i]?.url }, [
          '--slots',
          String(SOAK_FLEET.slots),
          ...(i === 0 ? ['--profile', JSON.stringify(profile)] : []),
          ...level,
        ]);
        const runner = await group.track(startService(args, { env }));
        const node: SoakNode = {
          index: i,
          id,
          supervised: i === 0,
          engine: engines[i],
          runner,
          callLog,
          stopped: false,
        };
        argsOf.set(node, args);
        return node;
      }),
    );
    nodes.push(...started);
    const fleet: SoakFleet = {
      gateway,
      redis,
      nodes,
      callLogs: nodes.map((n) => n.callLog),
      poolRunners: async () =>
        (
          (await getJson(new URL('/v1/runners', gateway.url), { authorization: `Bearer ${operatorToken}` })) as {
            data: PoolRunner[];
          }
        ).data,
      runnerStatus: async (node) => (await getJson(new URL('/status', node.runner.url))) as RunnerStatusView,
      restartRunner: async (node) => {
        node.runner = await group.track(startService(argsOf.get(node)!, { env }));
      },
      stop,
    };
    const ready = await until(async () => {
      const pool = await fleet.poolRunners().catch(() => []);
      return nodes.every((n) => pool.some((r) => r.id === n.id && r.state === 'live' && r.ready));
    }, READY_WITHIN_MS);
    if (!ready)
      throw new Error(
        `the gateway did not have all ${nodes.length} runners live and ready within ${READY_WITHIN_MS / 1000}s:\n${gateway.output().split('\n').slice(-10).join('\n')}`,
      );
    return fleet;
  } catch (error) {
    await stop();
    throw error;
  }
}

/** Sends `name` to a child, ignoring a child that is gone. */
export function signal(service: ChildService, name: NodeJS.Signals): void {
  try {
    service.child.kill(name);
  } catch {
    // gone already
  }
}

/** GETs JSON from a control route, bounded in time. */
export async function getJson(url: URL, headers: Record<string, string> = {}): Promise<unknown> {
  const res = await fetch(url, { headers, signal: AbortSignal.timeout(CONTROL_TIMEOUT_MS) });
  if (!res.ok) throw new Error(`GET ${url.pathname} answered ${res.status}`);
  return res.json();
}

/** The status a control route answers with, bounded in time; 0 when it does not answer. */
export async function statusOf(url: URL): Promise<number> {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(CONTROL_TIMEOUT_MS) });
    await res.arrayBuffer();
    return res.status;
  } catch {
    return 0;
  }
}

function callLogOf(dir: string, index: number): string {
  return join(dir, `calls-${index + 1}.log`);
}

/**
 * The environment of a fleet whose runners register with its gateway: the bench's without its
 * SLUICE_* settings, with a runner token and an operator token of this run's own. The tokens
 * never leave the children's environment (flags show in ps).
 */
export function registeringEnv(env: NodeJS.ProcessEnv): { env: NodeJS.ProcessEnv; operatorToken: string } {
  const operatorToken = randomBytes(24).toString('base64url');
  return {
    env: {
      ...withoutSluiceSettings(env),
      SLUICE_RUNNER_TOKEN: randomBytes(24).toString('base64url'),
      SLUICE_OPERATOR_TOKEN: operatorToken,
    },
    operatorToken,
  };
}

/**
 * The bench's environment without SLUICE_* settings and PORT: those are meant for the bench or
 * for the shell's own gateway (SLUICE_PORT, say), not for the processes the bench starts.
 */
export function withoutSluiceSettings(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const copy = { ...env };
  for (const name of Object.keys(copy)) if (name.startsWith('SLUICE_') || name === 'PORT') delete copy[name];
  return copy;
}
