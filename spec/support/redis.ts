/**
 * A real redis-server for tests, on 127.0.0.1 and a free port, with persistence off so nothing
 * is written to disk. Tests never skip when redis-server is missing: CI installs it, and a
 * silently skipped store suite would hide exactly the bugs it exists to catch.
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { Redis } from 'ioredis';
import { freePort } from '../../placer/kernel/processes.ts';

/** A running redis-server. */
export interface RedisServer {
  /** `redis://127.0.0.1:<port>/0`, without credentials even when the server wants a password. */
  url: string;
  port: number;
  /** The server's process id, for specs that stall it (SIGSTOP, SIGCONT) or kill it (SIGKILL). */
  pid: number;
  /** Stops the server (SIGTERM, and SIGCONT in case a spec left it stopped) and waits for it to exit; safe to call twice. */
  stop(): Promise<void>;
}

const READY = /Ready to accept connections/;
const START_TIMEOUT_MS = 15_000;
/** The free port found can be taken before redis binds it; a new port is tried this many times. */
const ATTEMPTS = 3;

/** How to start a redis-server. */
export interface RedisStartOptions {
  /** Clients must AUTH with this password (redis `requirepass`, user `default`). @default none */
  password?: string;
  /** Listen here instead of on a free port, to start a server again where a killed one listened. */
  port?: number;
}

/**
 * Starts redis-server and resolves once it answers PING: on a free port, or on `port` (to
 * start one again where a killed one listened).
 * @throws when redis-server is not installed (with the command that installs it) or cannot start.
 */
export async function startRedis(options: RedisStartOptions = {}): Promise<RedisServer> {
  if (options.port !== undefined) {
    try {
      return await startOn(options.port, options.password);
    } catch (error) {
      throw (error as { code?: unknown }).code === 'ENOENT' ? notInstalled(error) : error;
    }
  }
  let lastError: unknown;
  for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
    const port = await freePort();
    try {
      return await startOn(port, options.password);
    } catch (error) {
      if ((error as { code?: unknown }).code === 'ENOENT') throw notInstalled(error);
      lastError = error;
    }
  }
  throw lastError;
}

/** A port nothing listens on at the moment of asking (for unreachable-store tests too). */
export { freePort };

async function startOn(port: number, password: string | undefined): Promise<RedisServer> {
  const args = ['--port', String(port), '--save', '', '--appendonly', 'no', '--bind', '127.0.0.1'];
  // On the command line, not in a file: visible in ps, which is fine for a throwaway test server.
  if (password !== undefined) args.push('--requirepass', password);
  const child = spawn('redis-server', args, {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const stop = async () => {
    // No pid: the spawn itself failed (ENOENT), so there is no process and no exit to wait for.
    if (child.pid === undefined) return;
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      child.kill('SIGCONT');
    }
    await exited;
  };
  try {
    await ready(child);
    await ping(port, password);
  } catch (error) {
    await stop();
    throw error;
  }
  return { url: `redis://127.0.0.1:${port}/0`, port, pid: child.pid!, stop };
}

/** Resolves on redis's "Ready to accept connections"; rejects with its output if it exits first. */
function ready(child: ChildProcess): Promise<void> {
  return new Promise((resolve, reject) => {
    let output = '';
    const timer = setTimeout(
      () => fail(new Error(`redis-server did not start within ${START_TIMEOUT_MS} ms:\n${output}`)),
      START_TIMEOUT_MS,
    );
    const done = () => {
      clearTimeout(timer);
      child.stdout?.off('data', onData);
      child.off('exit', onExit);
      child.off('error', fail);
    };
    const fail = (error: Error) => {
      done();
      reject(error);
    };
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      if (!READY.test(output)) return;
      done();
      // Keep draining so a chatty server never blocks on a full pipe.
      child.stdout?.resume();
      resolve();
    };
    const onExit = (code: number | null) =>
      fail(new Error(`redis-server exited with ${code} before it was ready:\n${output}`));
    child.stdout?.on('data', onData);
    child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.once('exit', onExit);
    child.once('error', fail);
  });
}

async function ping(port: number, password: string | undefined): Promise<void> {
  const client = new Redis({
    host: '127.0.0.1',
    port,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    lazyConnect: true,
    ...(password === undefined ? {} : { password }),
  });
  client.on('error', () => {});
  try {
    await client.connect();
    const reply = await client.ping();
    if (reply !== 'PONG') throw new Error(`redis-server on port ${port} answered PING with ${reply}`);
  } finally {
    client.disconnect();
  }
}

function notInstalled(cause: unknown): Error {
  return new Error('redis-server is not installed; the store specs need it: apt-get install -y redis-server', {
    cause,
  });
}
