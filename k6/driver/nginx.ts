/**
 * nginx as the reference proxy: the same hop sluice makes, done by a C event loop, so the
 * figures separate "a proxy costs this much" from "sluice costs this much". Optional: when
 * nginx is not on PATH the scenario says so and measures without it.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { accessSync, constants } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { freePort } from '../../placer/index.ts';

/** A running nginx. */
export interface NginxProxy {
  readonly url: string;
  /** The master's pid; its one worker is its child. */
  readonly pid: number | undefined;
  /** Stops nginx (SIGTERM, then SIGKILL after 5 s) and removes its temp folder. Idempotent. */
  stop(): Promise<void>;
}

/** Finds an executable named `name` on `pathVar` (a PATH value); undefined when there is none. */
function findOnPath(name: string, pathVar: string | undefined): string | undefined {
  for (const dir of (pathVar ?? '').split(delimiter)) {
    if (!dir) continue;
    const candidate = join(dir, name);
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // Not here; keep looking.
    }
  }
  return undefined;
}

/** How nginx spreads calls over several upstreams, and whether it buffers their answers. */
export interface NginxBalance {
  /** nginx's default weighted round-robin, or `least_conn` (fewest active connections first). @default 'round-robin' */
  method?: 'round-robin' | 'least_conn';
  /**
   * Buffer upstream answers (nginx's default). Off for streams: anyone putting nginx in front of
   * an SSE engine turns it off, so that tokens are passed on as they come. @default true
   */
  buffering?: boolean;
  /**
   * Open files for the worker (`worker_rlimit_nofile`), for holding many streams. nginx's
   * `worker_connections` then gets twice as many slots: it counts connections on its own and runs
   * out before the files do (at 20,000 of each it held only about 9,400 streams, "worker_connections
   * are not enough"), so the file limit stays the one bound, as it is for the gateway.
   * @default the process's own limit, and 4096 connections
   */
  files?: number;
}

/**
 * The config: one worker (sluice's gateway is one Node thread, so more workers would compare
 * unlike with unlike), keep-alive both sides, nothing logged per request.
 */
export function nginxConfig(
  dir: string,
  port: number,
  upstream: URL | readonly URL[],
  balance: NginxBalance = {},
): string {
  const servers = (Array.isArray(upstream) ? upstream : [upstream]) as readonly URL[];
  const method = balance.method === 'least_conn' ? '\n    least_conn;' : '';
  // Unbuffered answers are streams, and a slow stream may go quiet for longer than nginx's 60 s default.
  const buffering = balance.buffering === false ? '\n      proxy_buffering off;\n      proxy_read_timeout 600s;' : '';
  const files = balance.files === undefined ? '' : `\nworker_rlimit_nofile ${balance.files};`;
  const connections = balance.files === undefined ? 4096 : balance.files * 2;
  return `worker_processes 1;${files}
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections ${connections}; }
http {
  access_log off;
  # Request bodies stay in memory, as sluice keeps them: long prompts never touch a temp file,
  # which a worker running as another user than the master could not write.
  client_body_buffer_size 1m;
  client_body_temp_path ${dir}/client-body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  # nginx closes a keep-alive connection after 1000 requests by default; sluice never does,
  # so the default would make nginx pay reconnects sluice does not.
  keepalive_requests 1000000;
  keepalive_timeout 65s;
  upstream runner {${method}
${servers.map((u) => `    server ${u.host};`).join('\n')}
    keepalive 64;
    keepalive_requests 1000000;
  }
  server {
    listen 127.0.0.1:${port};
    location / {
      proxy_pass http://runner;
      proxy_http_version 1.1;
      proxy_set_header Connection "";${buffering}
    }
  }
}
`;
}

/**
 * Starts `nginx` (the executable path) in front of `upstream` on a free 127.0.0.1 port and
 * resolves once it accepts connections.
 * @throws {Error} with nginx's error log when it exits or does not listen within 10 s.
 */
export async function startNginx(
  nginx: string,
  upstream: URL | readonly URL[],
  balance: NginxBalance = {},
): Promise<NginxProxy> {
  const dir = await mkdtemp(join(tmpdir(), 'sluice-bench-nginx-'));
  const port = await freePort();
  const conf = join(dir, 'nginx.conf');
  await writeFile(conf, nginxConfig(dir, port, upstream, balance));
  // Not detached: a Ctrl-C in the terminal reaches nginx too, so an interrupted bench leaves nothing.
  const child = spawn(nginx, ['-e', join(dir, 'error.log'), '-c', conf, '-p', dir, '-g', 'daemon off;'], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
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
      throw new Error(
        `nginx did not start on 127.0.0.1:${port}: ${(stderr + log).trim().split('\n').slice(-5).join(' | ')}`,
      );
    }
    await delay(50);
  }
  return { url: `http://127.0.0.1:${port}`, pid: child.pid, stop };
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

/**
 * Starts the reference nginx with `start` when it is wanted and on `pathVar`, or says why not.
 * nginx is the reference, not the subject: a scenario without it still has its sluice figures, so
 * a failed start is a reason to print, not an error.
 */
export async function referenceNginx<T>(
  wanted: boolean,
  pathVar: string | undefined,
  start: (nginx: string) => Promise<T>,
): Promise<{ started: T; skipped?: undefined } | { started?: undefined; skipped: string }> {
  if (!wanted) return { skipped: 'nginx skipped: --nginx false' };
  const nginx = findOnPath('nginx', pathVar);
  if (!nginx) return { skipped: 'nginx skipped: no nginx on PATH (apt-get install -y nginx to compare with it)' };
  try {
    return { started: await start(nginx) };
  } catch (error) {
    return { skipped: `nginx skipped: ${(error as Error).message}` };
  }
}
