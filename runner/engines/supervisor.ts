/**
 * Engine supervision: launches the engine process, waits for it to become ready, restarts it
 * with jittered exponential backoff when it dies, and stops it (SIGTERM, then SIGKILL) without
 * leaving a process behind. Every state change is logged and given to listeners with the
 * engine's last output lines, since an engine's own words are the only clue to why it died.
 *
 * The engine runs in its own process group: engines fork workers (vLLM's tensor-parallel
 * ranks, TGI's shards), and signalling the group reaches them all. The runner calls
 * {@link EngineSupervisor.killSync} from its process 'exit' hook; for a runner that dies without
 * running it (SIGKILL), every engine is launched through a watchdog (watchdog.ts) that kills the
 * group once the runner's end of a pipe closes.
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import type { Readable } from 'node:stream';
import { fullJitterBackoff, systemClock } from '../../placer/kernel/index.ts';
import { silentLogger } from '../../placer/kernel/index.ts';
import type { Logger, LogFields } from '../../placer/kernel/index.ts';
import type { Clock } from '../../placer/kernel/index.ts';
import { checksFor, rule, show } from '../../placer/kernel/index.ts';
import type { Resolved, Rule } from '../../placer/kernel/index.ts';
import { RunnerConfigError } from '../errors.ts';
import type { EngineExit, SupervisorState } from '../protocol/index.ts';
import type { EngineCommand } from './argv.ts';
import type { ValidProfile } from './profile.ts';
import { WATCH_FD, watchedSpawn } from './watchdog.ts';

/** What caused a state change. */
export type TransitionReason = 'launch' | 'ready' | 'exited' | 'start-timeout' | 'spawn-failed' | 'drain' | 'stop';

/**
 * One state change. A failure while starting is reported too, as `starting` to `starting`
 * with the exit and the delay before the next launch.
 */
export interface EngineStateChange {
  readonly from: SupervisorState;
  readonly to: SupervisorState;
  readonly reason: TransitionReason;
  /** The engine process the change is about; undefined when none was running. */
  readonly pid: number | undefined;
  readonly restarts: number;
  readonly exit?: EngineExit;
  /** Milliseconds until the engine is launched again, when a restart is scheduled. */
  readonly delay?: number;
  /** The engine's last output lines, on failures. */
  readonly output?: readonly string[];
}

/** What to supervise and how. */
export interface EngineSupervisorOptions {
  /** The validated profile; only kind and model (for logs) and startTimeout are read. */
  profile: Pick<ValidProfile, 'kind' | 'model' | 'startTimeout'>;
  /** What to spawn, from `engineCommand(profile)`. */
  command: EngineCommand;
  /** True once the engine can take calls; polled while starting. The signal aborts at a timeout or stop. */
  checkReady(signal: AbortSignal): Promise<boolean>;
  /** @default see supervisorDefaults */
  logger?: Logger;
  /** Output lines (stdout and stderr together) kept for status and failures. @default see supervisorDefaults */
  tailLines?: number;
  /** Pause between readiness checks, in ms. @default see supervisorDefaults */
  readyInterval?: number;
  /** Backoff before the first restart, in ms; full jitter takes a random part of it. @default see supervisorDefaults */
  backoffBase?: number;
  /** Growth of the backoff per failure in a row. @default see supervisorDefaults */
  backoffFactor?: number;
  /** Largest backoff, in ms. @default see supervisorDefaults */
  backoffCap?: number;
  /**
   * Restarts allowed before the supervisor gives up (state `failed` for good): at most this many
   * in a row without the engine becoming ready, and at most this many within `restartWindow`
   * (an engine that crashes each time it becomes ready resets the first count, not the second).
   * @default see supervisorDefaults
   */
  maxRestarts?: number;
  /** @default see supervisorDefaults */
  restartWindow?: number;
  /** How long a timed-out start gets between SIGTERM and SIGKILL, in ms. @default see supervisorDefaults */
  killGrace?: number;
  /** Uniform in [0, 1); for the backoff jitter. @default see supervisorDefaults */
  random?: () => number;
  /** @default see supervisorDefaults */
  clock?: Clock;
}

/** One launched process and its wait for readiness. */
interface Attempt {
  readonly child: ChildProcess;
  /** Aborted once the start is over: ready, exited, timed out, draining or stopping. */
  readonly starting: AbortController;
  readonly exited: Promise<void>;
  timedOut: boolean;
  done: boolean;
}

/** Longest wait after an exit for the engine's last output to arrive. */
const FLUSH_MS = 250;
/** Longer lines are cut: a runaway line must not hold the whole tail's memory. */
const MAX_LINE = 4096;

/** The supervisor's defaults, in one place. */
export const supervisorDefaults = Object.freeze({
  logger: silentLogger as Logger,
  tailLines: 100,
  readyInterval: 250,
  backoffBase: 1000,
  backoffFactor: 2,
  backoffCap: 60_000,
  maxRestarts: 10,
  /** An hour, so that engines taking minutes to load still hit the limit. */
  restartWindow: 3_600_000,
  killGrace: 10_000,
  /** stop()'s grace between SIGTERM and SIGKILL when the caller gives none. */
  stopGrace: 10_000,
  random: Math.random,
  clock: systemClock as Clock,
});

/** {@link EngineSupervisorOptions} after defaults and checks; frozen. */
export type SupervisorConfig = Resolved<typeof supervisorDefaults> &
  Readonly<Pick<EngineSupervisorOptions, 'profile' | 'command' | 'checkReady'>>;

const check = checksFor(RunnerConfigError);

/** Below 1 the backoff would shrink with every failure in a row. */
const backoffFactor: Rule = (option, value, fail) => {
  if (typeof value !== 'number' || !(value >= 1) || !Number.isFinite(value))
    throw fail(`${option} must be a number of at least 1, got ${show(value)}`, option);
  return value;
};

/** How each defaulted option is checked, in the order the first bad one is reported. */
const supervisorRules = {
  random: rule.fn(),
  tailLines: rule.integer({ min: 1, max: 100_000 }),
  readyInterval: rule.ms(1),
  backoffBase: rule.ms(0),
  backoffFactor,
  backoffCap: rule.ms(0),
  maxRestarts: rule.integer({ min: 0 }),
  restartWindow: rule.ms(1),
  killGrace: rule.ms(0),
  logger: rule.logger(),
};

/**
 * Applies {@link supervisorDefaults} to `options` and checks them.
 * @throws {RunnerConfigError} naming the first bad option and its value.
 */
export function resolveSupervisorOptions(options: EngineSupervisorOptions): SupervisorConfig {
  const { profile, command, checkReady } = options;
  if (typeof command?.command !== 'string' || command.command === '')
    throw check.fail(`command.command must be a non-empty string, got ${show(command?.command)}`);
  check.fn('checkReady', checkReady);
  check.ms('profile.startTimeout', profile.startTimeout, 1);
  const checked = check.resolve(supervisorDefaults, supervisorRules, options);
  if (checked.backoffCap < checked.backoffBase)
    throw check.fail(`backoffCap must be at least backoffBase (${checked.backoffBase}), got ${checked.backoffCap}`);
  return Object.freeze({ ...checked, profile, command, checkReady });
}

/** Launches one engine and keeps it running; see the module comment. */
export class EngineSupervisor {
  readonly #config: SupervisorConfig;
  readonly #log: Logger;
  readonly #listeners = new Set<(change: EngineStateChange) => void>();
  readonly #tail: string[] = [];
  /** Aborted by drain() and stop(): cancels a restart waiting out its backoff. */
  readonly #halt = new AbortController();
  #state: SupervisorState = 'stopped';
  #attempt: Attempt | undefined;
  #restarts = 0;
  #streak = 0;
  #recent: number[] = [];
  #lastExit: EngineExit | undefined;
  #started = false;
  #stopping: Promise<void> | undefined;

  /** @throws {RunnerConfigError} naming the first bad option. */
  constructor(options: EngineSupervisorOptions) {
    this.#config = resolveSupervisorOptions(options);
    this.#log = this.#config.logger.child({ kind: options.profile.kind, model: options.profile.model });
  }

  /** Current state. */
  get state(): SupervisorState {
    return this.#state;
  }

  /** The running engine process, if one is running. */
  get pid(): number | undefined {
    return this.#attempt?.child.pid;
  }

  /** Launches made after the first. */
  get restarts(): number {
    return this.#restarts;
  }

  /** How the last engine process ended. */
  get lastExit(): EngineExit | undefined {
    return this.#lastExit;
  }

  /** The engine's last output lines, oldest first, across restarts. */
  outputTail(): string[] {
    return [...this.#tail];
  }

  /** Calls `listener` on every state change; returns a function that removes it. */
  onState(listener: (change: EngineStateChange) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Launches the engine. Only the first call does anything, and none after stop(). */
  start(): void {
    if (this.#started) return;
    this.#started = true;
    this.#launch();
  }

  /** Marks the engine draining so the runner admits no more calls; cancels a pending restart. */
  drain(): void {
    if (this.#state !== 'starting' && this.#state !== 'ready') return;
    this.#halt.abort();
    this.#attempt?.starting.abort();
    this.#transition('draining', 'drain', { pid: this.pid });
  }

  /**
   * SIGTERM to the engine's process group, SIGKILL after `graceMs`; resolves once it exited.
   * Idempotent; cancels a pending restart; a `failed` supervisor stays `failed`.
   */
  stop(graceMs: number = supervisorDefaults.stopGrace): Promise<void> {
    try {
      check.ms('graceMs', graceMs, 0);
    } catch (error) {
      return Promise.reject(error);
    }
    this.#stopping ??= this.#stop(graceMs);
    return this.#stopping;
  }

  /** SIGKILLs the engine's process group at once; for the runner's process 'exit' hook, where nothing async runs. */
  killSync(): void {
    const pid = this.pid;
    if (pid !== undefined) signalGroup(pid, 'SIGKILL');
  }

  async #stop(graceMs: number): Promise<void> {
    this.#started = true;
    this.#halt.abort();
    const attempt = this.#attempt;
    if (attempt) {
      attempt.starting.abort();
      await this.#terminate(attempt, graceMs);
    }
    if (this.#state === 'stopped' || this.#state === 'failed') return;
    this.#transition('stopped', 'stop', { pid: attempt?.child.pid, ...(attempt ? { exit: this.#lastExit } : {}) });
  }

  #launch(): void {
    const { command, args, env } = this.#config.command;
    const first = this.#state === 'stopped';
    let child: ChildProcess;
    try {
      // Without PATH in its environment, spawn() would search the system's default one.
      const watched = watchedSpawn(command, args, env.PATH ?? '/usr/bin:/bin');
      child = spawn(watched.file, watched.args, { env, stdio: ['ignore', 'pipe', 'pipe', 'pipe'], detached: true });
    } catch (error) {
      // Bad arguments throw at once; a missing binary arrives as an 'error' event below.
      if (first) this.#transition('starting', 'launch', { pid: undefined });
      return this.#failed(
        { code: null, signal: null, error: (error as Error).message, at: this.#config.clock.now() },
        'spawn-failed',
        undefined,
      );
    }
    let resolveExited!: () => void;
    const attempt: Attempt = {
      child,
      starting: new AbortController(),
      exited: new Promise<void>((resolve) => (resolveExited = resolve)),
      timedOut: false,
      done: false,
    };
    this.#attempt = attempt;
    const ended = (exit: Omit<EngineExit, 'at'>): void => {
      if (attempt.done) return;
      attempt.done = true;
      attempt.starting.abort();
      this.#lastExit = { ...exit, at: this.#config.clock.now() };
      // Workers the engine forked die with it, or they would hold the GPU and the port.
      if (child.pid !== undefined) signalGroup(child.pid, 'SIGKILL');
      if (this.#attempt === attempt) this.#attempt = undefined;
      resolveExited();
      void this.#flushed(child).then(() => this.#afterExit(attempt, this.#lastExit!));
    };
    child.once('exit', (code, signal) => ended({ code, signal }));
    child.once('error', (error) => {
      if (child.pid === undefined) ended({ code: null, signal: null, error: error.message });
      else this.#log.warn('engine process error', { pid: child.pid, error });
    });
    for (const stream of [child.stdout, child.stderr]) if (stream) this.#capture(stream);
    // The watchdog's pipe carries nothing; read to its end so the child's 'close' can come.
    const watch = child.stdio[WATCH_FD] as Readable | null | undefined;
    watch?.on('error', () => {}).resume();
    if (first) this.#transition('starting', 'launch', { pid: child.pid });
    else this.#log.info('engine relaunched', { pid: child.pid, restarts: this.#restarts });
    void this.#awaitReady(attempt);
  }

  async #awaitReady(attempt: Attempt): Promise<void> {
    const { clock, checkReady, readyInterval, profile } = this.#config;
    const signal = attempt.starting.signal;
    clock.sleep(profile.startTimeout, signal).then(
      () => {
        if (attempt.done || this.#stopping) return;
        attempt.timedOut = true;
        attempt.starting.abort();
        this.#log.warn('engine start timed out', { pid: attempt.child.pid, startTimeout: profile.startTimeout });
        void this.#terminate(attempt, this.#config.killGrace);
      },
      () => {},
    );
    while (!signal.aborted) {
      let ready = false;
      try {
        ready = await checkReady(signal);
      } catch {
        // Refused connections and the like: the engine is still loading.
      }
      if (signal.aborted) return;
      if (ready) {
        attempt.starting.abort();
        this.#streak = 0;
        return this.#transition('ready', 'ready', { pid: attempt.child.pid });
      }
      await clock.sleep(readyInterval, signal).catch(() => {});
    }
  }

  #afterExit(attempt: Attempt, exit: EngineExit): void {
    if (this.#stopping) return; // stop() reports the exit itself
    const pid = attempt.child.pid;
    if (this.#state === 'draining') {
      return this.#transition('stopped', 'exited', { pid, exit, output: this.outputTail() }, 'warn');
    }
    if (this.#state !== 'starting' && this.#state !== 'ready') return;
    this.#failed(exit, attempt.timedOut ? 'start-timeout' : exit.error ? 'spawn-failed' : 'exited', pid);
  }

  /** A crash or failed start: restart after a backoff, or give up past the limits. */
  #failed(exit: EngineExit, reason: TransitionReason, pid: number | undefined): void {
    const { clock, maxRestarts, restartWindow, backoffBase, backoffFactor, backoffCap, random } = this.#config;
    const now = clock.now();
    this.#lastExit = exit;
    this.#recent = this.#recent.filter((at) => now - at < restartWindow);
    this.#streak++;
    const output = this.outputTail();
    if (this.#streak > maxRestarts || this.#recent.length >= maxRestarts) {
      const limits = { maxRestarts, restartWindow, inWindow: this.#recent.length, inARow: this.#streak - 1 };
      return this.#transition('failed', reason, { pid, exit, output }, 'error', limits);
    }
    // Full jitter: restarts of engines that died together (a node-wide fault) spread out.
    const delay = fullJitterBackoff(
      this.#streak,
      { base: backoffBase, cap: backoffCap, factor: backoffFactor },
      random,
    );
    this.#transition('starting', reason, { pid, exit, delay, output }, 'warn');
    clock.sleep(delay, this.#halt.signal).then(
      () => {
        if (this.#stopping || this.#state !== 'starting') return;
        this.#restarts++;
        this.#recent.push(clock.now());
        this.#launch();
      },
      () => {},
    );
  }

  /** SIGTERM to the group, SIGKILL after `graceMs`; resolves at the exit. */
  async #terminate(attempt: Attempt, graceMs: number): Promise<void> {
    if (attempt.done || attempt.child.pid === undefined) return attempt.exited;
    const pid = attempt.child.pid;
    signalGroup(pid, 'SIGTERM');
    const exited = new AbortController();
    this.#config.clock.sleep(graceMs, exited.signal).then(
      () => {
        this.#log.warn('engine ignored SIGTERM, killing it', { pid, graceMs });
        signalGroup(pid, 'SIGKILL');
      },
      () => {},
    );
    await attempt.exited;
    exited.abort();
  }

  /** Resolves once the exited engine's output is all read, or after {@link FLUSH_MS}. */
  #flushed(child: ChildProcess): Promise<void> {
    return new Promise((resolve) => {
      const closed = new AbortController();
      child.once('close', () => {
        closed.abort();
        resolve();
      });
      this.#config.clock.sleep(FLUSH_MS, closed.signal).then(
        () => {
          // Something outside the group still holds the pipes; stop reading them.
          child.stdout?.destroy();
          child.stderr?.destroy();
          resolve();
        },
        () => {},
      );
    });
  }

  #capture(stream: Readable): void {
    let partial = '';
    stream.setEncoding('utf8');
    stream.on('data', (chunk: string) => {
      const lines = (partial + chunk).split('\n');
      partial = lines.pop() ?? '';
      for (const line of lines) this.#keep(line);
      if (partial.length > MAX_LINE) {
        this.#keep(partial);
        partial = '';
      }
    });
    stream.on('end', () => partial && this.#keep(partial));
    // A pipe error must not crash the runner; the exit reports what matters.
    stream.on('error', () => {});
  }

  #keep(raw: string): void {
    // Progress bars redraw with \r: keep the last drawing, not every frame.
    const line = raw.replace(/\r$/, '').split('\r').pop() ?? '';
    if (line === '') return;
    this.#tail.push(line.length > MAX_LINE ? `${line.slice(0, MAX_LINE)}…` : line);
    if (this.#tail.length > this.#config.tailLines) this.#tail.shift();
  }

  #transition(
    to: SupervisorState,
    reason: TransitionReason,
    extra: Omit<EngineStateChange, 'from' | 'to' | 'reason' | 'restarts'>,
    level: 'info' | 'warn' | 'error' = 'info',
    fields: LogFields = {},
  ): void {
    const change: EngineStateChange = { from: this.#state, to, reason, restarts: this.#restarts, ...extra };
    this.#state = to;
    const { exit, ...rest } = change;
    this.#log[level]('engine state changed', {
      ...rest,
      code: exit?.code,
      signal: exit?.signal,
      error: exit?.error,
      ...fields,
    });
    for (const listener of this.#listeners) {
      try {
        listener(change);
      } catch (error) {
        this.#log.warn('engine state listener threw', { error: error as Error });
      }
    }
  }
}

/** Signals a process group; falls back to the leader alone, and ignores one already gone. */
function signalGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal);
  } catch {
    try {
      process.kill(pid, signal);
    } catch {
      // Already exited.
    }
  }
}
