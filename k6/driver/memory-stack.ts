/**
 * The processes the memory scenario holds streams through: two simulated engines, a runner in
 * front of each, one gateway over both runners and, when it is installed, nginx over the same
 * two runners as the reference proxy. All are real child processes on 127.0.0.1.
 *
 * Two pairs rather than stack.ts's one, because of the open-file limit: a runner holds two
 * sockets per stream as the gateway does, so one runner behind a gateway at its ceiling would
 * need as many fds as the gateway and hit the same limit first, and the runner, not the gateway,
 * would be what the figures measured.
 *
 * nginx gets its own config here rather than nginx.ts's: its one worker must hold two connections
 * per stream (far past nginx.ts's 4096), with the same open-file limit as the gateway, and must
 * pass tokens on as they come (`proxy_buffering off`).
 */
import { runnerArgs, simEngineArgs } from '../../placer/index.ts';
import type { ChildService } from '../../placer/index.ts';
import { referenceNginx, startNginx } from './nginx.ts';
import type { NginxProxy } from './nginx.ts';
import { FD_RESERVE, SOCKETS_PER_STREAM } from './process-memory.ts';
import { engineArgs, startGroup } from './stack.ts';
import type { EngineTiming, FleetBase } from './stack.ts';

/** What {@link startMemoryStack} started. */
export interface MemoryStack {
  engines: ChildService[];
  runners: ChildService[];
  gateway: ChildService;
  /** Undefined when nginx was not asked for, not found, or would not start; `nginxSkipped` says why. */
  nginx: NginxProxy | undefined;
  nginxSkipped: string | undefined;
  /** Stops everything, front to back. Idempotent, and safe after a partial start. */
  stop(): Promise<void>;
}

/** How to start the memory stack. */
export interface MemoryStackOptions extends FleetBase {
  /** The most streams held at once: every runner and engine can take them all, the gateway admits them all. */
  streams: number;
  /** Engine and runner pairs. */
  pairs: number;
  engine: EngineTiming;
  nginx: boolean;
  /**
   * The open-file limit nginx's worker gets, as the gateway gets the process's: the same bound
   * for both, and nginx's connection limit with it. @default two per stream plus the reserve
   */
  nginxFiles?: number;
}

/** Starts the stack; on failure stops what did start and rethrows. */
export function startMemoryStack(options: MemoryStackOptions): Promise<MemoryStack> {
  // Either runner could take every stream: round-robin splits them evenly, but a refused call
  // must never be what a memory figure rests on.
  const capacity = options.streams;
  return startGroup(options, async ({ env, level, group, startService }) => {
    const engines: ChildService[] = [];
    const runners: ChildService[] = [];
    for (let pair = 1; pair <= options.pairs; pair++) {
      const engine = await startService(
        simEngineArgs({ id: `bench-sim-${pair}` }, [...engineArgs(options.engine, capacity, capacity), ...level]),
        { env },
      );
      group.add(engine);
      engines.push(engine);
      const runner = await startService(
        runnerArgs({ engine: engine.url, id: `bench-runner-${pair}` }, ['--slots', String(capacity), ...level]),
        { env },
      );
      group.add(runner);
      runners.push(runner);
    }
    const maxInFlight = String(options.streams + FD_RESERVE);
    // Every stream comes from 127.0.0.1, one connection each: past the default per-client cap.
    const gateway = await startService(
      [
        'gateway',
        '--port',
        '0',
        '--runners',
        runners.map((r) => r.url).join(','),
        '--max-in-flight',
        maxInFlight,
        '--max-connections-per-client',
        maxInFlight,
        ...level,
      ],
      { env },
    );
    group.add(gateway);
    const files = options.nginxFiles ?? options.streams * SOCKETS_PER_STREAM + FD_RESERVE;
    const upstreams = runners.map((r) => new URL(r.url));
    const { started: nginx, skipped: nginxSkipped } = await referenceNginx(
      options.nginx,
      options.env.PATH,
      async (bin) => group.add(await startNginx(bin, upstreams, { buffering: false, files })),
    );
    return { engines, runners, gateway, nginx, nginxSkipped };
  });
}

/** The last lines the sluice children printed, for a failure message. */
export function memoryStackOutput(stack: MemoryStack): string {
  const named: [string, ChildService][] = [
    ...stack.engines.map((e, i): [string, ChildService] => [`engine ${i + 1}`, e]),
    ...stack.runners.map((r, i): [string, ChildService] => [`runner ${i + 1}`, r]),
    ['gateway', stack.gateway],
  ];
  return named
    .map(([name, service]) => `--- ${name}\n${service.output().split('\n').slice(-10).join('\n')}`)
    .join('\n');
}
