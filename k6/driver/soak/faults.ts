/**
 * Injecting the soak's faults into a running fleet and waiting for it to be whole again. Each
 * fault is what an operator meets in production, done the way it happens there:
 * - runner-kill: the runner process dies at once (SIGKILL: no drain, no deregistration) and a
 *   process manager starts it again after a pause; it registers itself again, on a new port.
 * - runner-stop: the runner freezes (SIGSTOP, as a VM paused or a process swapped out): its
 *   sockets stay open and accept connections but nothing answers, and its heartbeats stop.
 * - engine-crash: the engine a runner supervises dies (SIGKILL to its pid, read from the
 *   runner's /status); the runner relaunches it.
 * - redis-restart: the store dies (SIGKILL) and is started again on the same port after a pause.
 * Recovery is what a client would need: the gateway's pool has the runner live and ready again,
 * or the gateway reads its store again.
 */
import { setTimeout as delay } from 'node:timers/promises';
import { signal, statusOf } from './fleet.ts';
import type { SoakFleet, SoakNode } from './fleet.ts';
import { faultWindow } from './schedule.ts';
import type { FaultKind, FaultWindow, PlannedFault } from './schedule.ts';
import { until } from './wait.ts';

/** A process manager's pause before it starts a dead runner or Redis again. */
export const RESTART_PAUSE_MS = 2_000;

/** Longest wait for a fault's recovery; past it the window closes there and the fault counts as not recovered. */
const RECOVERY_BOUND_MS = 60_000;

/** What the injector needs. */
export interface InjectContext {
  readonly fleet: SoakFleet;
  /** ms since the load started. */
  readonly now: () => number;
  /** How long runner-stop holds the runner stopped. */
  readonly stopForMs: number;
  /** The pause before a killed runner or Redis is started again. @default {@link RESTART_PAUSE_MS} */
  readonly restartPauseMs?: number;
  readonly signal?: AbortSignal;
  /** Told when a fault is injected and when it recovered. */
  readonly progress: (text: string) => void;
}

/** The node each fault strikes: the supervised one for the engine, never it for a kill (its engine would outlive it). */
export function targetOf(kind: FaultKind, nodes: readonly SoakNode[]): SoakNode | undefined {
  if (kind === 'redis-restart') return undefined;
  if (kind === 'engine-crash') return nodes.find((n) => n.supervised);
  if (kind === 'runner-kill') return nodes[nodes.length - 1];
  return nodes[1 % nodes.length];
}

/**
 * Runs `schedule` in order, each fault at its planned time (or as soon as the one before it has
 * recovered, when that took longer), and resolves with every window.
 */
export async function runSchedule(schedule: readonly PlannedFault[], ctx: InjectContext): Promise<FaultWindow[]> {
  const windows: FaultWindow[] = [];
  for (const planned of schedule) {
    // Node's timers keep whole milliseconds on a clock of their own and may fire a fraction of
    // one early by performance.now(): wait again until the planned time has truly come.
    for (let wait = planned.atMs - ctx.now(); wait > 0 && !ctx.signal?.aborted; wait = planned.atMs - ctx.now()) {
      await delay(Math.ceil(wait), undefined, ctx.signal ? { signal: ctx.signal } : {}).catch(() => undefined);
    }
    if (ctx.signal?.aborted) break;
    const window = await inject(planned, ctx);
    windows.push(window);
    const back =
      window.recoveredMs === undefined
        ? `not recovered within ${RECOVERY_BOUND_MS / 1000}s`
        : `recovered at ${(window.recoveredMs / 1000).toFixed(1)}s`;
    ctx.progress(
      `  ${window.kind} ${window.target} at ${(window.injectedMs / 1000).toFixed(1)}s: ${back} (${window.note})\n`,
    );
  }
  return windows;
}

/** Injects one fault and waits (bounded) for its recovery. */
export async function inject(planned: PlannedFault, ctx: InjectContext): Promise<FaultWindow> {
  const { fleet } = ctx;
  const node = targetOf(planned.kind, fleet.nodes);
  const target = node?.id ?? 'redis';
  const live = (n: SoakNode, url?: string) => async () =>
    (await fleet.poolRunners()).some(
      (r) => r.id === n.id && r.state === 'live' && r.ready && (url === undefined || r.url === url),
    );
  const recover = async (check: () => Promise<boolean>, startedMs: number): Promise<number | undefined> =>
    (await until(check, Math.max(0, startedMs + RECOVERY_BOUND_MS - ctx.now()), ctx.signal)) ? ctx.now() : undefined;
  const done = (injectedMs: number, note: string, recoveredMs: number | undefined): FaultWindow =>
    faultWindow(
      { kind: planned.kind, target, plannedMs: planned.atMs, injectedMs, note },
      recoveredMs,
      injectedMs + RECOVERY_BOUND_MS,
    );

  switch (planned.kind) {
    case 'runner-kill': {
      const n = node!;
      const old = n.runner;
      const injectedMs = ctx.now();
      const exited = new Promise<void>((resolve) =>
        old.child.exitCode !== null || old.child.signalCode !== null
          ? resolve()
          : old.child.once('exit', () => resolve()),
      );
      signal(old, 'SIGKILL');
      await exited;
      await delay(ctx.restartPauseMs ?? RESTART_PAUSE_MS);
      let note = `killed ${old.url}`;
      try {
        await fleet.restartRunner(n);
        note += `, started again on ${n.runner.url}`;
      } catch (error) {
        return done(
          injectedMs,
          `${note}, could not start again: ${(error as Error).message.split('\n')[0]}`,
          undefined,
        );
      }
      return done(injectedMs, note, await recover(live(n, n.runner.url), injectedMs));
    }
    case 'runner-stop': {
      const n = node!;
      const injectedMs = ctx.now();
      signal(n.runner, 'SIGSTOP');
      n.stopped = true;
      await delay(ctx.stopForMs, undefined, ctx.signal ? { signal: ctx.signal } : {}).catch(() => undefined);
      signal(n.runner, 'SIGCONT');
      n.stopped = false;
      return done(injectedMs, `stopped for ${(ctx.stopForMs / 1000).toFixed(1)}s`, await recover(live(n), injectedMs));
    }
    case 'engine-crash': {
      const n = node!;
      const pidOf = async (): Promise<number | undefined> => (await fleet.runnerStatus(n)).engines[0]?.supervised?.pid;
      const pid = await pidOf().catch(() => undefined);
      const injectedMs = ctx.now();
      if (pid === undefined)
        return done(injectedMs, "no engine pid in the runner's /status: nothing was killed", undefined);
      try {
        process.kill(pid, 'SIGKILL');
      } catch (error) {
        return done(
          injectedMs,
          `engine pid ${pid} could not be killed (${(error as { code?: string }).code ?? 'error'})`,
          undefined,
        );
      }
      let next: number | undefined;
      const relaunched = async (): Promise<boolean> => {
        const status = await fleet.runnerStatus(n);
        next = status.engines[0]?.supervised?.pid;
        return status.ready && next !== undefined && next !== pid;
      };
      const recoveredMs = await recover(async () => (await relaunched()) && (await live(n)()), injectedMs);
      return done(
        injectedMs,
        `engine pid ${pid} killed${next !== undefined && next !== pid ? `, relaunched as ${next}` : ''}`,
        recoveredMs,
      );
    }
    case 'redis-restart': {
      const injectedMs = ctx.now();
      const pid = fleet.redis.pid();
      await fleet.redis.kill();
      await delay(ctx.restartPauseMs ?? RESTART_PAUSE_MS);
      try {
        await fleet.redis.start();
      } catch (error) {
        return done(
          injectedMs,
          `redis pid ${pid} killed, could not start again: ${(error as Error).message.split('\n')[0]}`,
          undefined,
        );
      }
      // The store is back for the gateway when an unknown id gets 404 again rather than 503.
      const storeBack = async (): Promise<boolean> =>
        (await statusOf(new URL('/v1/calls/soak-store-probe', fleet.gateway.url))) === 404;
      return done(
        injectedMs,
        `redis pid ${pid} killed, started again as ${fleet.redis.pid()} on port ${fleet.redis.port}`,
        await recover(storeBack, injectedMs),
      );
    }
  }
}
