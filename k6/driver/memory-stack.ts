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
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { connect, createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { startService } from '../../gateway/cli/processes.ts';
import type { ChildService } from '../../gateway/cli/processes.ts';
import { findOnPath } from './nginx.ts';
import type { NginxProxy } from './nginx.ts';
import { FD_RESERVE, SOCKETS_PER_STREAM } from './process-memory.ts';
import { childEnv } from './stack.ts';
import type { EngineTiming } from './stack.ts';

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
export interface MemoryStackOptions {
  env: NodeJS.ProcessEnv;
  logLevel: string;
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
export async function startMemoryStack(options: MemoryStackOptions): Promise<MemoryStack> {
  const env = childEnv(options.env);
  const level = ['--log-level', options.logLevel];
  // Either runner could take every stream: round-robin splits them evenly, but a refused call
  // must never be what a memory figure rests on.
  const capacity = String(options.streams);
  const started: { stop(): Promise<unknown> }[] = [];
  let stopping: Promise<void> | undefined;
  const stop = (): Promise<void> => {
    stopping ??= (async () => {
      for (const s of started.reverse()) await s.stop().catch(() => undefined);
    })();
    return stopping;
  };
  try {
    const { ttftMs, itlMs, outputTokens } = options.engine;
    const engines: ChildService[] = [];
    const runners: ChildService[] = [];
    for (let pair = 1; pair <= options.pairs; pair++) {
      const engine = await startService(
        ['sim-engine', '--port', '0', '--engine-id', `bench-sim-${pair}`, '--ttft-ms', String(ttftMs), '--itl-ms', String(itlMs), '--output-tokens', String(outputTokens), '--max-num-seqs', capacity, '--max-queue', capacity, ...level],
        { env },
      );
      started.push(engine);
      engines.push(engine);
      const runner = await startService(['runner', '--port', '0', '--engine', engine.url, '--engine-kind', 'sim', '--id', `bench-runner-${pair}`, '--slots', capacity, ...level], { env });
      started.push(runner);
      runners.push(runner);
    }
    const maxInFlight = String(options.streams + FD_RESERVE);
    const gateway = await startService(['gateway', '--port', '0', '--runners', runners.map((r) => r.url).join(','), '--max-in-flight', maxInFlight, ...level], { env });
    started.push(gateway);
    let nginx: NginxProxy | undefined;
    let nginxSkipped: string | undefined;
    const nginxBin = options.nginx ? findOnPath('nginx', options.env.PATH) : undefined;
    if (!options.nginx) nginxSkipped = 'nginx skipped: --nginx false';
    else if (!nginxBin) nginxSkipped = 'nginx skipped: no nginx on PATH (apt-get install -y nginx to compare with it)';
    else {
      try {
        const files = options.nginxFiles ?? options.streams * SOCKETS_PER_STREAM + FD_RESERVE;
        nginx = await startStreamingNginx(nginxBin, runners.map((r) => new URL(r.url)), files);
        started.push(nginx);
      } catch (error) {
        // nginx is the reference, not the subject: without it the gateway's figures still stand.
        nginxSkipped = `nginx skipped: ${(error as Error).message}`;
      }
    }
    return { engines, runners, gateway, nginx, nginxSkipped, stop };
  } catch (error) {
    await stop();
    throw error;
  }
}

/** The last lines the sluice children printed, for a failure message. */
export function memoryStackOutput(stack: MemoryStack): string {
  const named: [string, ChildService][] = [
    ...stack.engines.map((e, i): [string, ChildService] => [`engine ${i + 1}`, e]),
    ...stack.runners.map((r, i): [string, ChildService] => [`runner ${i + 1}`, r]),
    ['gateway', stack.gateway],
  ];
  return named.map(([name, service]) => `--- ${name}\n${service.output().split('\n').slice(-10).join('\n')}`).join('\n');
}

/**
 * The config for holding streams: one worker with `files` fds, answers passed on unbuffered,
 * keep-alive both sides, at most 64 idle upstream connections kept.
 *
 * `worker_connections` is nginx's own count of connection slots, on top of the fd limit, and it
 * runs out before the fds do: at 20,000 slots and 20,000 fds nginx held only about 9,400 streams
 * ("worker_connections are not enough, reusing connections", and the driver saw resets) while
 * its worker had fds to spare. Twice the fds leaves the fd limit, the bound the gateway has too,
 * as the only one; nginx warns that the slots exceed it, which is the point.
 */
export function streamingNginxConfig(dir: string, port: number, upstreams: readonly URL[], files: number): string {
  return `worker_processes 1;
worker_rlimit_nofile ${files};
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections ${files * 2}; }
http {
  access_log off;
  client_body_temp_path ${dir}/client-body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  keepalive_requests 1000000;
  keepalive_timeout 65s;
  upstream runners {
${upstreams.map((u) => `    server ${u.host};`).join('\n')}
    keepalive 64;
    keepalive_requests 1000000;
  }
  server {
    listen 127.0.0.1:${port};
    location / {
      proxy_pass http://runners;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_read_timeout 600s;
    }
  }
}
`;
}

/**
 * Starts nginx with {@link streamingNginxConfig} on a free 127.0.0.1 port; resolves once it
 * accepts connections.
 * @throws {Error} with nginx's error log when it exits or does not listen within 10 s.
 */
async function startStreamingNginx(nginx: string, upstreams: readonly URL[], files: number): Promise<NginxProxy> {
  const dir = await mkdtemp(join(tmpdir(), 'sluice-bench-memory-nginx-'));
  const port = await freePort();
  const conf = join(dir, 'nginx.conf');
  await writeFile(conf, streamingNginxConfig(dir, port, upstreams, files));
  const child = spawn(nginx, ['-e', join(dir, 'error.log'), '-c', conf, '-p', dir, '-g', 'daemon off;'], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
  const exited = once(child, 'exit').catch(() => undefined);
  let stopping: Promise<void> | undefined;
  const stop = (): Promise<void> => {
    stopping ??= (async () => {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
        await exited;
        clearTimeout(timer);
      }
      await rm(dir, { recursive: true, force: true });
    })();
    return stopping;
  };
  const deadline = Date.now() + 10_000;
  while (!(await accepts(port))) {
    if (child.exitCode !== null || child.signalCode !== null || Date.now() > deadline) {
      const log = await readFile(join(dir, 'error.log'), 'utf8').catch(() => '');
      await stop();
      throw new Error(`nginx did not start on 127.0.0.1:${port}: ${(stderr + log).trim().split('\n').slice(-5).join(' | ')}`);
    }
    await delay(50);
  }
  return { url: `http://127.0.0.1:${port}`, pid: child.pid, stop };
}

/** A port free right now; should another process take it first, nginx fails loudly. */
async function freePort(): Promise<number> {
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

function accepts(port: number): Promise<boolean> {
  return new Promise<boolean>((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}
