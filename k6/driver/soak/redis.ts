/**
 * The soak's redis-server: the gateway's detached-call store, on 127.0.0.1 and a free port, that
 * the redis-restart fault kills and starts again on the same port. It keeps an append-only file
 * synced on every write in a folder of its own, so a restart loses nothing Redis acknowledged:
 * a detached call lost across the restart is then sluice's loss, not the store's.
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { setTimeout as delay } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { freePort } from '../../../placer/index.ts';

/** A redis-server the soak controls. */
export interface BenchRedis {
  /** `redis://127.0.0.1:<port>/0`. */
  readonly url: string;
  readonly port: number;
  /** The running server's pid; undefined while it is down. */
  pid(): number | undefined;
  /** Kills the server with SIGKILL and waits for it to exit. */
  kill(): Promise<void>;
  /** Starts it again on the same port and folder; resolves once it answers PING. */
  start(): Promise<void>;
  /** Stops it (SIGTERM, then SIGKILL) if it runs; safe to call twice. */
  stop(): Promise<void>;
}

const START_TIMEOUT_MS = 15_000;
const PING_EVERY_MS = 50;

/**
 * Starts redis-server with its data in `dir` (which must exist) and resolves once it answers PING.
 * @throws when redis-server is not installed (saying how to install it) or does not start.
 */
export async function startBenchRedis(dir: string): Promise<BenchRedis> {
  const port = await freePort();
  let child: ChildProcess | undefined;
  let exited: Promise<void> = Promise.resolve();
  let output = '';
  const launch = async (): Promise<void> => {
    output = '';
    const c = spawn(
      'redis-server',
      [
        '--port',
        String(port),
        '--bind',
        '127.0.0.1',
        '--dir',
        dir,
        '--save',
        '',
        '--appendonly',
        'yes',
        '--appendfsync',
        'always',
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    child = c;
    exited = new Promise<void>((resolve) => c.once('exit', () => resolve()));
    const keep = (chunk: Buffer): void => void (output = (output + chunk.toString()).slice(-4_000));
    c.stdout?.on('data', keep);
    c.stderr?.on('data', keep);
    const spawned = new Promise<void>((resolve, reject) => {
      c.once('spawn', resolve);
      c.once('error', (error) =>
        reject(
          (error as { code?: string }).code === 'ENOENT'
            ? new Error(
                'redis-server is not installed; the soak needs it for the store: apt-get install -y redis-server',
                { cause: error },
              )
            : error,
        ),
      );
    });
    await spawned;
    await waitForPing(port, c, () => output);
  };
  // redis-server does not die with its parent as the sluice children do (they watch their IPC
  // channel): a bench that exits without stopping it, an error or a test runner's teardown,
  // must not leave it behind. Only SIGKILL of the bench itself escapes this.
  const onExit = (): void => void child?.kill('SIGKILL');
  process.once('exit', onExit);
  const kill = async (signal: NodeJS.Signals): Promise<void> => {
    const c = child;
    if (!c || c.exitCode !== null || c.signalCode !== null) return;
    c.kill(signal);
    await exited;
  };
  try {
    await launch();
  } catch (error) {
    process.off('exit', onExit);
    await kill('SIGKILL');
    throw error;
  }
  return {
    url: `redis://127.0.0.1:${port}/0`,
    port,
    pid: () => (child && child.exitCode === null && child.signalCode === null ? child.pid : undefined),
    kill: () => kill('SIGKILL'),
    start: launch,
    async stop() {
      process.off('exit', onExit);
      const c = child;
      if (!c || c.exitCode !== null || c.signalCode !== null) return;
      const timer = setTimeout(() => c.kill('SIGKILL'), 5_000);
      await kill('SIGTERM');
      clearTimeout(timer);
    },
  };
}

/** Polls PING until it answers PONG; rejects when the server exits or the start bound passes. */
async function waitForPing(port: number, child: ChildProcess, output: () => string): Promise<void> {
  const deadline = Date.now() + START_TIMEOUT_MS;
  const client = new Redis({
    host: '127.0.0.1',
    port,
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    connectTimeout: 1_000,
  });
  client.on('error', () => {});
  try {
    while (Date.now() < deadline) {
      if (child.exitCode !== null || child.signalCode !== null)
        throw new Error(
          `redis-server on port ${port} exited (${child.signalCode ?? child.exitCode}) before it answered:\n${output()}`,
        );
      try {
        if (client.status !== 'ready') await client.connect();
        if ((await client.ping()) === 'PONG') return;
      } catch {
        client.disconnect();
      }
      await delay(PING_EVERY_MS);
    }
    throw new Error(`redis-server on port ${port} did not answer PING within ${START_TIMEOUT_MS} ms:\n${output()}`);
  } finally {
    client.disconnect();
  }
}
