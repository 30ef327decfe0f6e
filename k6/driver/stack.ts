/**
 * The processes a scenario measures, started as real `sluice` child processes on port 0 so the
 * figures include everything a deployment pays (sockets, parsing, the tsx loader's output):
 * a simulated engine, a runner in front of it, a gateway in front of the runner, and, when it
 * is installed, nginx in front of the same runner as the reference proxy. When asked, a bare
 * Node proxy (bare-proxy.ts) also stands in front of the runner: the least a Node hop costs.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { hashToken, newKeyToken } from '../../gateway/index.ts';
import { runnerArgs, simEngineArgs } from '../../placer/index.ts';
import type { ChildService, StartService } from '../../placer/index.ts';
import { startBareProxy } from './bare-proxy.ts';
import type { BareProxyProcess } from './bare-proxy.ts';
import { referenceNginx, startNginx } from './nginx.ts';
import type { NginxProxy } from './nginx.ts';

/** What {@link startStack} started. */
export interface Stack {
  engine: ChildService;
  runner: ChildService;
  gateway: ChildService;
  /** Undefined when nginx was not asked for or not found; `nginxSkipped` says why. */
  nginx: NginxProxy | undefined;
  nginxSkipped: string | undefined;
  /** The bare Node proxy in front of the runner; undefined when not asked for. */
  bareProxy: BareProxyProcess | undefined;
  /** A second gateway whose calls need a client key with limits, and the key; undefined when not asked for. */
  keysGateway: { gateway: ChildService; key: string } | undefined;
  /** A second runner and gateway with tracing on, on the same engine; undefined when not asked for. */
  traced: { runner: ChildService; gateway: ChildService } | undefined;
  /** Stops everything, front to back. Idempotent, and safe after a partial start. */
  stop(): Promise<void>;
}

/** What every fleet of the bench is started with. */
export interface FleetBase {
  /** The environment the children get, through {@link childEnv}. */
  env: NodeJS.ProcessEnv;
  /** The children's log level. */
  logLevel: string;
  /** Starts a `sluice` command as a child: the CLI's own, which the scenario context hands down. */
  startService: StartService;
}

/** How to start the stack. */
export interface StackOptions extends FleetBase {
  /** Runner slots and engine sequences: above the connection count, so nothing queues or is refused. */
  slots: number;
  nginx: boolean;
  /** Also start the bare Node proxy in front of the runner. @default false */
  bareProxy?: boolean;
  /**
   * Also start a second gateway with a keys file of one key whose limits are never reached (so
   * every call pays for the checks and counts, and none is refused). @default false
   */
  keysGateway?: boolean;
  /**
   * Also start a runner and a gateway over it that export every span to this OTLP/HTTP endpoint
   * (the others get `OTEL_TRACES_EXPORTER=none`, whatever the bench's environment says). @default none
   */
  tracedEndpoint?: string;
  /** The simulated engine's timing. @default an engine that answers at once with one token */
  engine?: EngineTiming;
}

/** How fast the simulated engine generates: its `--ttft-ms`, `--itl-ms` and `--output-tokens`. */
export interface EngineTiming {
  ttftMs: number;
  itlMs: number;
  outputTokens: number;
}

/**
 * The flags of a simulated engine generating at `timing` that runs `maxNumSeqs` sequences at once
 * and queues `maxQueue` more.
 */
export function engineArgs(timing: EngineTiming, maxNumSeqs: number, maxQueue: number): string[] {
  return [
    '--ttft-ms',
    String(timing.ttftMs),
    '--itl-ms',
    String(timing.itlMs),
    '--output-tokens',
    String(timing.outputTokens),
    '--max-num-seqs',
    String(maxNumSeqs),
    '--max-queue',
    String(maxQueue),
  ];
}

/** ttft and itl 0 with one output token: the engine answers at once, so what is left is the hops. */
const INSTANT_ENGINE: EngineTiming = Object.freeze({ ttftMs: 0, itlMs: 0, outputTokens: 1 });

/** Starts the stack; on failure stops what did start and rethrows. */
export function startStack(options: StackOptions): Promise<Stack> {
  return startGroup(options, async ({ env: childEnv, level, group, startService }) => {
    // Traced or not is each process's own setting here, never the bench's environment's.
    const env = options.tracedEndpoint === undefined ? childEnv : { ...childEnv, OTEL_TRACES_EXPORTER: 'none' };
    const timing = options.engine ?? INSTANT_ENGINE;
    const engine = await startService(
      simEngineArgs({ id: 'bench-sim' }, [...engineArgs(timing, options.slots, options.slots * 4), ...level]),
      { env },
    );
    group.add(engine);
    const runner = await startService(
      runnerArgs({ engine: engine.url, id: 'bench-runner' }, ['--slots', String(options.slots), ...level]),
      { env },
    );
    group.add(runner);
    const gateway = await startService(['gateway', '--port', '0', '--runners', runner.url, ...level], { env });
    group.add(gateway);
    const bareProxy = options.bareProxy
      ? await group.track(startBareProxy(new URL(runner.url).origin, env))
      : undefined;
    const keysGateway = options.keysGateway
      ? await startKeysGateway(runner.url, { env, level, group, startService })
      : undefined;
    const traced =
      options.tracedEndpoint === undefined
        ? undefined
        : await startTraced(engine.url, options.slots, options.tracedEndpoint, {
            env: childEnv,
            level,
            group,
            startService,
          });
    const { started: nginx, skipped: nginxSkipped } = await referenceNginx(
      options.nginx,
      options.env.PATH,
      async (bin) => group.add(await startNginx(bin, new URL(runner.url))),
    );
    return { engine, runner, gateway, bareProxy, keysGateway, traced, nginx, nginxSkipped };
  });
}

/** Limits far above what a bench run can reach: each is checked and counted on every call, none refuses. */
const UNREACHED_LIMITS = Object.freeze({ requestsPerMinute: 1e12, tokensPerMinute: 1e12, concurrentCalls: 1e6 });

/** A gateway in front of `runnerUrl` with a keys file of one key (in a temporary folder removed at stop). */
async function startKeysGateway(
  runnerUrl: string,
  { env, level, group, startService }: GroupStart,
): Promise<{ gateway: ChildService; key: string }> {
  const dir = await mkdtemp(join(tmpdir(), 'sluice-bench-keys-'));
  group.add({ stop: () => rm(dir, { recursive: true, force: true }) });
  const key = newKeyToken();
  const file = join(dir, 'keys.json');
  await writeFile(
    file,
    JSON.stringify([{ name: 'bench', hash: `sha256:${hashToken(key)}`, limits: UNREACHED_LIMITS }]),
  );
  const gateway = group.add(
    await startService(['gateway', '--port', '0', '--runners', runnerUrl, '--keys', file, ...level], { env }),
  );
  return { gateway, key };
}

/** A runner on `engineUrl` and a gateway over it, both exporting their spans to `endpoint` at once. */
async function startTraced(
  engineUrl: string,
  slots: number,
  endpoint: string,
  { env, level, group, startService }: GroupStart,
): Promise<{ runner: ChildService; gateway: ChildService }> {
  // Protobuf, the SDK's default, as a collector would get it. The batch queue is made room for
  // a bench's call rate: at its default (2048 spans) the SDK drops spans past it, and the figure
  // would leave their export out.
  const tracedEnv = {
    ...env,
    OTEL_TRACES_EXPORTER: 'otlp',
    OTEL_EXPORTER_OTLP_ENDPOINT: endpoint,
    OTEL_BSP_MAX_QUEUE_SIZE: '65536',
    OTEL_BSP_SCHEDULE_DELAY: '1000',
  };
  const runner = group.add(
    await startService(
      runnerArgs({ engine: engineUrl, id: 'bench-runner-traced' }, ['--slots', String(slots), ...level]),
      {
        env: tracedEnv,
      },
    ),
  );
  const gateway = group.add(
    await startService(['gateway', '--port', '0', '--runners', runner.url, ...level], { env: tracedEnv }),
  );
  return { runner, gateway };
}

/** The last lines the sluice children printed, for a failure message. */
export function stackOutput(stack: Stack): string {
  const tail = (text: string): string => text.split('\n').slice(-10).join('\n');
  const sluice = (['engine', 'runner', 'gateway'] as const).map((name) => `--- ${name}\n${tail(stack[name].output())}`);
  return [...sluice, ...(stack.bareProxy ? [`--- bare proxy\n${tail(stack.bareProxy.output())}`] : [])].join('\n');
}

/**
 * Children must not inherit settings meant for the bench (its port, its config file). Its
 * gateways get an operator token of the run's own, so that none makes one and writes it to a file.
 */
export function childEnv(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const copy = { ...env };
  for (const key of ['PORT', 'SLUICE_PORT', 'SLUICE_CONFIG', 'SLUICE_LOG_LEVEL']) delete copy[key];
  copy.SLUICE_OPERATOR_TOKEN ??= RUN_OPERATOR_TOKEN;
  return copy;
}

/** The operator token of this bench run's gateways. */
const RUN_OPERATOR_TOKEN = randomBytes(24).toString('base64url');

/** What {@link startGroup} hands the start-up it runs. */
export interface GroupStart {
  /** The children's environment ({@link childEnv}). */
  readonly env: NodeJS.ProcessEnv;
  /** The children's `--log-level` flag and value. */
  readonly level: readonly string[];
  /** Where each started child is recorded, to be stopped with the rest. */
  readonly group: ServiceGroup;
  /** Starts a `sluice` command as a child (the fleet's own {@link FleetBase.startService}). */
  readonly startService: StartService;
}

/**
 * Runs a fleet's start-up `start` with a fresh {@link serviceGroup}, and returns what it started
 * with the group's `stop`; when `start` throws, stops what did start and rethrows.
 */
export async function startGroup<T>(
  options: FleetBase,
  start: (s: GroupStart) => Promise<T>,
): Promise<T & { stop(): Promise<void> }> {
  const group = serviceGroup();
  try {
    const started = await start({
      env: childEnv(options.env),
      level: ['--log-level', options.logLevel],
      group,
      startService: options.startService,
    });
    return { ...started, stop: group.stop };
  } catch (error) {
    await group.stop();
    throw error;
  }
}

/**
 * Starts a `sluice` child for each argument list at once, each recorded in `group` as it starts;
 * resolves with them in the lists' order, or rejects with the first that fails to start.
 */
export function startAll(
  { group, startService }: Pick<GroupStart, 'group' | 'startService'>,
  argLists: readonly (readonly string[])[],
  env: NodeJS.ProcessEnv,
): Promise<ChildService[]> {
  return Promise.all(argLists.map((args) => group.track(startService(args, { env }))));
}

/** Something a scenario started and must stop. */
export interface Stoppable {
  stop(): Promise<unknown>;
}

/** The processes a scenario has started, to stop together (see {@link serviceGroup}). */
export interface ServiceGroup {
  add<T extends Stoppable>(service: T): T;
  track<T extends Stoppable>(starting: Promise<T>): Promise<T>;
  stop(): Promise<void>;
}

/**
 * The processes a scenario has started, to stop together: `add` records one, `track` awaits one
 * starting and records it, `stop` stops them last-started first (front to back), ignoring errors.
 * `stop` is idempotent, and safe after a partial start.
 */
export function serviceGroup(): ServiceGroup {
  const started: Stoppable[] = [];
  let stopping: Promise<void> | undefined;
  const add = <T extends Stoppable>(service: T): T => {
    started.push(service);
    return service;
  };
  return {
    add,
    track: async (starting) => add(await starting),
    stop: () => {
      stopping ??= (async () => {
        for (const s of started.reverse()) await s.stop().catch(() => undefined);
      })();
      return stopping;
    },
  };
}
