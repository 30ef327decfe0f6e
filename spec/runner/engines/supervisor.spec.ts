import { mkdtempSync, readFileSync } from 'node:fs';
import { freePort } from '../../../placer/kernel/processes.ts';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { systemClock } from '../../../placer/kernel/index.ts';
import { createJsonLogger } from '../../../placer/kernel/index.ts';
import type { Clock } from '../../../placer/kernel/index.ts';
import { RunnerConfigError } from '../../../runner/errors.ts';
import { EngineSupervisor, resolveSupervisorOptions, supervisorDefaults } from '../../../runner/engines/supervisor.ts';
import type { EngineStateChange, EngineSupervisorOptions } from '../../../runner/engines/supervisor.ts';
import type { SupervisorState } from '../../../runner/protocol/index.ts';

const FAKE_ENGINE = fileURLToPath(new URL('../../fixtures/engines/fake-engine.mjs', import.meta.url));
const supervisors: EngineSupervisor[] = [];

afterEach(async () => {
  await Promise.all(supervisors.splice(0).map((s) => s.stop(0)));
});

/** True while `pid` runs; a zombie (dead, not yet reaped by its new parent) counts as gone. */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    return readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.[0] !== 'Z';
  } catch {
    return false; // reaped between the two looks
  }
}

/**
 * Resolves once `pid` is gone. A worker of the engine is no child of ours: SIGKILL reaches it
 * when kill() returns but it dies when the kernel next schedules it, so this polls for that.
 */
async function gone(pid: number): Promise<boolean> {
  for (let i = 0; i < 200 && alive(pid); i++) await new Promise((r) => setTimeout(r, 10));
  return !alive(pid);
}

interface Harness {
  sup: EngineSupervisor;
  changes: EngineStateChange[];
  lines: Record<string, unknown>[];
  /** Resolves with the first change (past or future) matching `match`. */
  until(match: (change: EngineStateChange) => boolean): Promise<EngineStateChange>;
  path(): string;
}

/** A supervisor over the fake engine with fast timings; extra fake-engine flags in `flags`. */
async function supervise(flags: string[], options: Partial<EngineSupervisorOptions> = {}): Promise<Harness> {
  const port = await freePort();
  const lines: Record<string, unknown>[] = [];
  const sup = new EngineSupervisor({
    profile: { kind: 'sim', model: 'fake', startTimeout: 20_000 },
    command: {
      command: process.execPath,
      args: [FAKE_ENGINE, '--port', String(port), ...flags],
      env: { PATH: process.env.PATH ?? '' },
    },
    checkReady: async (signal) => (await fetch(`http://127.0.0.1:${port}/health`, { signal })).ok,
    logger: createJsonLogger({
      level: 'debug',
      write: (line) => lines.push(JSON.parse(line) as Record<string, unknown>),
    }),
    readyInterval: 20,
    backoffBase: 10,
    random: () => 0.5,
    ...options,
  });
  supervisors.push(sup);
  const changes: EngineStateChange[] = [];
  const waiters: Array<{ match: (c: EngineStateChange) => boolean; resolve: (c: EngineStateChange) => void }> = [];
  sup.onState((change) => {
    changes.push(change);
    for (const w of waiters.splice(0)) w.match(change) ? w.resolve(change) : waiters.push(w);
  });
  const until = (match: (c: EngineStateChange) => boolean) =>
    new Promise<EngineStateChange>((resolve) => {
      const seen = changes.find(match);
      if (seen) resolve(seen);
      else waiters.push({ match, resolve });
    });
  const path = () => changes.map((c) => `${c.from}>${c.to}:${c.reason}`).join(' ');
  return { sup, changes, lines, until, path };
}

const to = (state: SupervisorState) => (c: EngineStateChange) => c.to === state;

describe('EngineSupervisor', () => {
  it('reaches ready, logs each transition with kind, model and pid, and stops the process', async () => {
    const h = await supervise([]);
    h.sup.start();
    await h.until(to('ready'));
    const pid = h.sup.pid!;
    expect(alive(pid)).toBe(true);
    expect(h.sup.state).toBe('ready');
    await h.sup.stop();
    expect(h.path()).toBe('stopped>starting:launch starting>ready:ready ready>stopped:stop');
    expect(h.changes.map((c) => c.pid)).toEqual([pid, pid, pid]);
    expect(alive(pid)).toBe(false);
    expect(h.sup.pid).toBeUndefined();
    expect(h.sup.lastExit).toMatchObject({ code: null, signal: 'SIGTERM' });
    const logged = h.lines.filter((l) => l.msg === 'engine state changed');
    expect(logged.map((l) => [l.kind, l.model, l.pid, l.from, l.to])).toEqual([
      ['sim', 'fake', pid, 'stopped', 'starting'],
      ['sim', 'fake', pid, 'starting', 'ready'],
      ['sim', 'fake', pid, 'ready', 'stopped'],
    ]);
  });

  it('restarts a crashed engine with a new pid, and is ready again', async () => {
    const marker = join(mkdtempSync(join(tmpdir(), 'sluice-sup-')), 'crashed');
    const h = await supervise(['--exit-after', '150', '--exit-code', '3', '--crash-unless', marker]);
    h.sup.start();
    const crash = await h.until((c) => c.reason === 'exited');
    expect(crash).toMatchObject({
      from: 'ready',
      to: 'starting',
      exit: { code: 3, signal: null },
      delay: 5,
      restarts: 0,
    });
    expect(crash.output).toContain('fatal: simulated crash');
    await h.until((c) => c.to === 'ready' && c.restarts === 1);
    expect(h.sup.restarts).toBe(1);
    expect(h.sup.pid).not.toBe(crash.pid);
    expect(alive(crash.pid!)).toBe(false);
    expect(h.path()).toBe('stopped>starting:launch starting>ready:ready ready>starting:exited starting>ready:ready');
    const warned = h.lines.find((l) => l.reason === 'exited');
    expect(warned).toMatchObject({ level: 'warn', code: 3, from: 'ready', to: 'starting', delay: 5 });
    expect(warned!.output).toContain('fatal: simulated crash');
  });

  it('backs off as floor(random * min(cap, base * factor^n)), then fails for good past maxRestarts', async () => {
    const draws = [0.9, 0.5, 0.1, 0.99];
    const h = await supervise(['--exit-after', '0'], {
      backoffBase: 20,
      backoffFactor: 2,
      backoffCap: 50,
      maxRestarts: 4,
      random: () => draws.shift()!,
    });
    h.sup.start();
    const failed = await h.until(to('failed'));
    // 0.9 x 20, 0.5 x 40, 0.1 x min(50, 80), 0.99 x min(50, 160)
    expect(h.changes.filter((c) => c.reason === 'exited').map((c) => c.delay)).toEqual([18, 20, 5, 49, undefined]);
    expect(failed).toMatchObject({ from: 'starting', to: 'failed', reason: 'exited', restarts: 4, exit: { code: 1 } });
    expect(h.sup.restarts).toBe(4);
    expect(h.lines.find((l) => l.to === 'failed')).toMatchObject({ level: 'error', maxRestarts: 4, inARow: 4 });
  });

  it('gives up when maxRestarts restarts fall within restartWindow, even with ready in between', async () => {
    const h = await supervise(['--exit-after', '300'], { maxRestarts: 2, restartWindow: 60_000 });
    h.sup.start();
    await h.until(to('failed'));
    expect(h.path()).toBe(
      'stopped>starting:launch starting>ready:ready ready>starting:exited starting>ready:ready ' +
        'ready>starting:exited starting>ready:ready ready>failed:exited',
    );
  });

  it('keeps the last tailLines lines of stdout and stderr and shows them on failure', async () => {
    const h = await supervise(['--print', '150', '--exit-after', '50'], { maxRestarts: 0, tailLines: 100 });
    h.sup.start();
    const failed = await h.until(to('failed'));
    const tail = h.sup.outputTail();
    expect(tail).toHaveLength(100);
    expect(failed.output).toEqual(tail);
    expect(tail).toEqual(expect.arrayContaining(['line 150 on stderr', 'line 149 on stdout']));
    expect(tail).not.toContain('line 1 on stdout');
    expect(tail.at(-1)).toBe('fatal: simulated crash');
    expect(h.lines.find((l) => l.to === 'failed')?.output).toEqual(tail);
  });

  it('keeps only the last drawing of a line redrawn with carriage returns', async () => {
    const h = await supervise(['--progress']);
    h.sup.start();
    await h.until(to('ready'));
    expect(h.sup.outputTail().filter((line) => line.includes('%'))).toEqual(['loading 100%']);
  });

  it('kills a start that is not ready within startTimeout and counts it as a failed start', async () => {
    const h = await supervise(['--unready-for', '600000'], {
      profile: { kind: 'sim', model: 'fake', startTimeout: 300 },
      maxRestarts: 1,
    });
    h.sup.start();
    const failed = await h.until(to('failed'));
    expect(h.path()).toBe('stopped>starting:launch starting>starting:start-timeout starting>failed:start-timeout');
    expect(failed.exit).toMatchObject({ signal: 'SIGTERM' });
    expect(h.sup.restarts).toBe(1);
    for (const change of h.changes) expect(alive(change.pid!)).toBe(false);
  });

  it('sends SIGTERM, then SIGKILL after the grace period to an engine ignoring SIGTERM', async () => {
    const h = await supervise(['--ignore-sigterm']);
    h.sup.start();
    await h.until(to('ready'));
    const pid = h.sup.pid!;
    const started = performance.now();
    await h.sup.stop(300);
    expect(performance.now() - started).toBeGreaterThanOrEqual(290);
    expect(h.sup.lastExit).toMatchObject({ code: null, signal: 'SIGKILL' });
    expect(h.sup.outputTail()).toContain('got SIGTERM, ignoring it');
    expect(alive(pid)).toBe(false);
    expect(h.lines.some((l) => l.msg === 'engine ignored SIGTERM, killing it')).toBe(true);
  });

  it('leaves no process behind after stop, workers of the engine included', async () => {
    const h = await supervise(['--worker']);
    h.sup.start();
    await h.until(to('ready'));
    const worker = Number(/worker pid (\d+)/.exec(h.sup.outputTail().join('\n'))![1]);
    const pid = h.sup.pid!;
    expect(alive(worker)).toBe(true);
    await h.sup.stop();
    expect(alive(pid)).toBe(false);
    expect(await gone(worker)).toBe(true);
  });

  it('cancels a pending restart when stopped during the backoff', async () => {
    const pending = new Set<number>();
    let next = 0;
    // The system clock, counting sleeps not yet over, so the cancelled backoff is seen at once.
    const clock: Clock = {
      now: () => systemClock.now(),
      sleep: (ms, signal) => {
        const id = next++;
        pending.add(id);
        return systemClock.sleep(ms, signal).finally(() => pending.delete(id));
      },
    };
    const h = await supervise(['--exit-after', '0'], { clock, backoffBase: 60_000, random: () => 0.99 });
    h.sup.start();
    const crash = await h.until((c) => c.reason === 'exited');
    expect(crash.delay).toBe(59_400);
    await h.sup.stop();
    await new Promise(setImmediate);
    expect(pending.size).toBe(0);
    expect(h.sup.state).toBe('stopped');
    expect(h.sup.restarts).toBe(0);
    expect(h.path()).toBe('stopped>starting:launch starting>starting:exited starting>stopped:stop');
  });

  it('stops idempotently, after a failed start and before any start', async () => {
    const h = await supervise([], { command: { command: '/nonexistent/engine', args: [], env: {} }, maxRestarts: 0 });
    h.sup.start();
    const failed = await h.until(to('failed'));
    expect(failed).toMatchObject({ reason: 'spawn-failed', exit: { code: null, signal: null } });
    expect(failed.exit?.error).toContain('ENOENT');
    const first = h.sup.stop();
    expect(h.sup.stop()).toBe(first);
    await first;
    expect(h.sup.state).toBe('failed');

    const idle = await supervise([]);
    await idle.sup.stop();
    idle.sup.start();
    expect(idle.sup.state).toBe('stopped');
    expect(idle.changes).toEqual([]);
  });

  it('drains without restarting: an exit while draining ends in stopped', async () => {
    const h = await supervise(['--exit-after', '300']);
    h.sup.start();
    await h.until(to('ready'));
    h.sup.drain();
    expect(h.sup.state).toBe('draining');
    const ended = await h.until(to('stopped'));
    expect(ended).toMatchObject({ from: 'draining', reason: 'exited', exit: { code: 1 } });
    expect(h.sup.restarts).toBe(0);
    await h.sup.stop();
    expect(h.path()).toBe('stopped>starting:launch starting>ready:ready ready>draining:drain draining>stopped:exited');
  });

  it('kills the process group at once with killSync', async () => {
    const h = await supervise(['--worker', '--ignore-sigterm'], { maxRestarts: 0 });
    h.sup.start();
    await h.until(to('ready'));
    const pid = h.sup.pid!;
    const worker = Number(/worker pid (\d+)/.exec(h.sup.outputTail().join('\n'))![1]);
    h.sup.killSync();
    const failed = await h.until(to('failed'));
    expect(failed.exit).toMatchObject({ signal: 'SIGKILL' });
    expect(alive(pid)).toBe(false);
    expect(await gone(worker)).toBe(true);
  });

  it('keeps going when a listener throws', async () => {
    const h = await supervise([]);
    h.sup.onState(() => {
      throw new Error('listener bug');
    });
    h.sup.start();
    await h.until(to('ready'));
    expect(h.lines.filter((l) => l.msg === 'engine state listener threw')).toHaveLength(2);
  });

  it.each([
    [{ tailLines: 0 }, 'tailLines must be a positive integer, got 0'],
    [{ readyInterval: 1.5 }, 'readyInterval must be a positive integer, got 1.5'],
    [{ backoffBase: -1 }, 'backoffBase must be a non-negative integer, got -1'],
    [{ backoffFactor: 0.5 }, 'backoffFactor must be a number of at least 1, got 0.5'],
    [{ backoffBase: 100, backoffCap: 50 }, 'backoffCap must be at least backoffBase (100), got 50'],
    [{ maxRestarts: -1 }, 'maxRestarts must be a non-negative integer, got -1'],
    [{ restartWindow: 0 }, 'restartWindow must be a positive integer, got 0'],
    [{ killGrace: Number.NaN }, 'killGrace must be a non-negative integer, got NaN'],
    [{ random: 0.5 as unknown as () => number }, 'random must be a function, got 0.5'],
    [{ checkReady: 'yes' as unknown as () => Promise<boolean> }, 'checkReady must be a function, got "yes"'],
    [{ command: { command: '', args: [], env: {} } }, 'command.command must be a non-empty string, got ""'],
    [
      { profile: { kind: 'sim', model: 'fake', startTimeout: 0 } },
      'profile.startTimeout must be a positive integer, got 0',
    ],
    [{ logger: {} as never }, 'logger must have debug, info, warn and error methods, got {}'],
  ] as Array<[Partial<EngineSupervisorOptions>, string]>)(
    'refuses %o with one message naming the option',
    (bad, message) => {
      const options: EngineSupervisorOptions = {
        profile: { kind: 'sim', model: 'fake', startTimeout: 1000 },
        command: { command: process.execPath, args: [], env: {} },
        checkReady: async () => true,
        ...bad,
      };
      expect(() => new EngineSupervisor(options)).toThrow(new RunnerConfigError(message));
    },
  );

  it('returns a frozen config of the defaults and what was given', () => {
    const given = {
      profile: { kind: 'sim', model: 'fake', startTimeout: 1000 },
      command: { command: process.execPath, args: [], env: {} },
      checkReady: async () => true,
    };
    const config = resolveSupervisorOptions({ ...given, backoffCap: 5000 } as EngineSupervisorOptions);
    expect(config).toMatchObject({
      ...supervisorDefaults,
      backoffCap: 5000,
      profile: given.profile,
      command: given.command,
      checkReady: given.checkReady,
    });
    expect(Object.isFrozen(config)).toBe(true);
  });

  it('refuses a negative stop grace', async () => {
    const h = await supervise([]);
    await expect(h.sup.stop(-1)).rejects.toThrow('graceMs must be a non-negative integer, got -1');
  });
});
