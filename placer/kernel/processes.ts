/**
 * Starting Node scripts (sluice commands, the bench's other children) as child processes and
 * learning where they listen: `sluice up`, the bench and the integration tests use this one
 * mechanism, which is why it sits in the kernel, below everything that starts a process. The
 * kernel knows no script of the product: whoever starts one names it (the CLI's entry module
 * names the `sluice` bin). A child reports `{type:'listening', url}` over the IPC channel once
 * its port is open, and exits when that channel closes, so a parent that dies (even by SIGKILL)
 * leaves nothing behind.
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';

/** A script (a sluice command, say) running as a child process. */
export interface ChildService {
  readonly url: string;
  readonly child: ChildProcess;
  /** The last lines the child printed (when its output is captured). */
  output(): string;
  /**
   * Sends `signal` and waits for the exit; after `graceMs` sends SIGKILL.
   * Resolves with the exit code (null when killed by a signal).
   */
  stop(signal?: NodeJS.Signals, graceMs?: number): Promise<number | null>;
}

/** How to start a child service. */
export interface StartOptions {
  /** `inherit` shares the parent's stdout/stderr; `capture` keeps the last lines for output(). */
  stdio?: 'inherit' | 'capture';
  env?: NodeJS.ProcessEnv;
  /**
   * With `capture`, gets everything the child writes to stdout and stderr, chunk by chunk, for a
   * caller that needs more than the last lines (a test checking that no output holds a secret).
   */
  onOutput?: (text: string) => void;
  /** Longest wait for the listening message, in ms. @default 30000 */
  timeout?: number;
}

const TAIL_LINES = 200;

/** A Node script to run as a child service. */
export interface ChildScript {
  /** Path of the script. */
  readonly script: string;
  /** Node's own arguments before it, e.g. `['--import', 'tsx']` for a TypeScript script. */
  readonly nodeArgs?: readonly string[];
  /**
   * What the child is called in an error message. @default the script's path. Never its
   * arguments: a flag's value may be a secret, and the message reaches logs and test output.
   */
  readonly name?: string;
}

/** Starts one command of a command-line program (`sluice gateway …`) and resolves once it listens. */
export type StartService = (args: readonly string[], options?: StartOptions) => Promise<ChildService>;

/**
 * A {@link StartService} for the program whose entry script is `script`: each child is named in
 * errors by the program's name and its first argument (`sluice gateway`), never by its flags.
 */
export function serviceStarter(script: string, program: string): StartService {
  return (args, options = {}) => startChild({ script, name: `${program} ${args[0] ?? ''}`.trimEnd() }, args, options);
}

/**
 * Starts `node <script> <args>` and resolves once it reports where it listens (with
 * {@link reportListening}); the child should exit when its IPC channel closes.
 * @throws {Error} with the child's last output when it exits, or does not listen within the timeout.
 */
export function startChild(
  command: ChildScript,
  args: readonly string[],
  options: StartOptions = {},
): Promise<ChildService> {
  const name = command.name ?? command.script;
  const capture = (options.stdio ?? 'capture') === 'capture';
  const child = spawn(process.execPath, [...(command.nodeArgs ?? []), command.script, ...args], {
    stdio: ['ignore', capture ? 'pipe' : 'inherit', capture ? 'pipe' : 'inherit', 'ipc'],
    env: options.env ?? process.env,
    // Its own process group: a terminal's Ctrl-C reaches only the parent, which stops children in order.
    detached: true,
  });
  const tail: string[] = [];
  const keep = (chunk: Buffer): void => {
    const text = chunk.toString('utf8');
    options.onOutput?.(text);
    for (const line of text.split('\n')) if (line) tail.push(line);
    if (tail.length > TAIL_LINES) tail.splice(0, tail.length - TAIL_LINES);
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const output = () => tail.join('\n');

  const stop = async (signal: NodeJS.Signals = 'SIGTERM', graceMs = 10_000): Promise<number | null> => {
    if (child.exitCode !== null || child.signalCode !== null) return child.exitCode;
    child.kill(signal);
    const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
    const code = await exited;
    clearTimeout(timer);
    return code;
  };

  return new Promise<ChildService>((resolve, reject) => {
    const timer = setTimeout(() => {
      void stop('SIGKILL');
      reject(new Error(`${name} did not listen within ${options.timeout ?? 30_000} ms\n${output()}`));
    }, options.timeout ?? 30_000);
    child.on('message', (message: { type?: string; url?: string }) => {
      if (message?.type !== 'listening' || typeof message.url !== 'string') return;
      clearTimeout(timer);
      resolve({ url: message.url, child, output, stop });
    });
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`${name} exited (${signal ?? code}) before listening\n${output()}`));
    });
  });
}

/**
 * In a child: tells the parent where this process listens (no-op when run by hand, or when the
 * parent already closed the channel: a stop that came while this process started, which the
 * channel's close then carries on to it).
 */
export function reportListening(url: string): void {
  if (!process.send || !process.connected) return;
  // A channel that closes while the message is on its way reports it here, not as a crash.
  process.send({ type: 'listening', url }, undefined, {}, () => {});
}

/**
 * A port on 127.0.0.1 nothing listens on at the moment of asking, for a process that cannot
 * take port 0: an engine a runner launches from a profile (the profile names its port), or a
 * server that must come back on the port its clients know.
 */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}
