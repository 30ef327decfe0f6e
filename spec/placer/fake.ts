/**
 * Test doubles for the placement walk: a clock the test moves by hand, runners that follow a
 * script, and a pool that counts how often it was asked. Nothing here uses real timers.
 */
import { placeCall } from '../../placer/index.ts';
import type { Clock, Placer, Runner, RunnerCall, RunnerPool, TryExecResult } from '../../placer/index.ts';
import type { FakeLoads } from './fake-load.ts';

/** Where fake time starts; any fixed value works, a round one makes failures easy to read. */
export const T0 = 1_000_000;

interface Sleeper {
  readonly until: number;
  readonly resolve: () => void;
}

/**
 * A clock whose `now()` moves only when the test says so. In manual mode `sleep()` stays pending
 * until `advance()` or `set()` reaches its end; in auto mode it jumps time forward at once, for
 * tests that only care about what the walk did, not when.
 */
export class FakeClock implements Clock {
  /** Every `sleep()` duration asked for, in order. */
  readonly sleeps: number[] = [];
  readonly #auto: boolean;
  #now: number;
  #pending: Sleeper[] = [];
  #onSleep: (() => void)[] = [];

  constructor(options: { now?: number; auto?: boolean } = {}) {
    this.#now = options.now ?? T0;
    this.#auto = options.auto ?? false;
  }

  now(): number {
    return this.#now;
  }

  /** Moves time to `t` and wakes every sleeper whose end has come. */
  set(t: number): void {
    this.#now = t;
    const due = this.#pending.filter((s) => s.until <= t);
    this.#pending = this.#pending.filter((s) => s.until > t);
    for (const s of due) s.resolve();
  }

  advance(ms: number): void {
    this.set(this.#now + ms);
  }

  /** How many sleeps are pending. */
  get sleeping(): number {
    return this.#pending.length;
  }

  /** Resolves once someone is asleep on this clock (at once if someone already is). */
  untilSleeping(): Promise<void> {
    if (this.#pending.length > 0) return Promise.resolve();
    return new Promise((resolve) => this.#onSleep.push(resolve));
  }

  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    this.sleeps.push(ms);
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (this.#auto) {
      this.#now += Math.max(0, ms);
      return Promise.resolve();
    }
    return new Promise<void>((resolve, reject) => {
      const onAbort = (): void => {
        this.#pending = this.#pending.filter((s) => s !== sleeper);
        reject(signal?.reason);
      };
      const sleeper: Sleeper = {
        until: this.#now + ms,
        resolve: () => {
          signal?.removeEventListener('abort', onAbort);
          resolve();
        },
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#pending.push(sleeper);
      const waiters = this.#onSleep.splice(0);
      for (const wake of waiters) wake();
    });
  }
}

/**
 * One step of a runner's script. A function runs at the moment of the offer (to abort the call
 * or move the clock) and returns the outcome; if it throws, `tryExec` rejects with that error.
 */
export type Outcome = 'placed' | 'busy' | 'failed' | 'reject' | ((call: RunnerCall) => Outcome);

/** How a {@link Fleet}'s runners report load. */
export interface FleetOptions {
  /** When given, every runner has a `load()` that reads its entry here, live. */
  loads?: FakeLoads;
  /**
   * When true, a committed call adds one to its runner's in-flight count and never finishes, as
   * long-running calls do, so a test sees loads build up under a placer.
   * @default false
   */
  hold?: boolean;
}

/** Runners built from scripts, all writing to one log of offers so order across runners shows. */
export class Fleet {
  /** Runner ids in the order they were offered a call, across every runner of this fleet. */
  readonly offers: string[] = [];
  readonly #loads: FakeLoads | undefined;
  readonly #hold: boolean;

  constructor(options: FleetOptions = {}) {
    this.#loads = options.loads;
    this.#hold = options.hold ?? false;
  }

  /**
   * A runner that answers each offer with the next step of `script`; the last step repeats
   * once the script runs out, so `['busy']` is busy forever. Placed calls resolve to the id.
   */
  runner(id: string, script: readonly Outcome[] = ['placed']): Runner<string> {
    const steps = [...script];
    const loads = this.#loads;
    const runner: Runner<string> = {
      id,
      tryExec: async (call: RunnerCall): Promise<TryExecResult<string>> => {
        this.offers.push(id);
        let step = (steps.length > 1 ? steps.shift() : steps[0]) ?? 'placed';
        while (typeof step === 'function') step = step(call);
        switch (step) {
          case 'placed':
            if (this.#hold) loads?.add(id);
            return { kind: 'placed', value: id };
          case 'busy':
            return { kind: 'busy' };
          case 'failed':
            return { kind: 'failed', error: new Error(`${id} refused the connection`) };
          case 'reject':
            throw new Error(`${id} failed after commit`);
        }
      },
    };
    return loads === undefined ? runner : { ...runner, load: () => loads.get(id) };
  }

  /** One runner per entry, in the entry order. */
  runners(scripts: Record<string, readonly Outcome[]>): Runner<string>[] {
    return Object.entries(scripts).map(([id, script]) => this.runner(id, script));
  }
}

/** A pool that counts how often it was asked; `source` may change its answer per pass. */
export interface FakePool<T> extends RunnerPool<T> {
  readonly asked: number;
}

/** A fixed list, or a function of how many times the pool was asked before (0 on the first pass). */
export function fakePool<T>(
  source: readonly Runner<T>[] | ((asked: number) => readonly Runner<T>[] | Promise<readonly Runner<T>[]>),
): FakePool<T> {
  let asked = 0;
  return {
    get asked() {
      return asked;
    },
    runners: () => {
      const before = asked++;
      return typeof source === 'function' ? source(before) : source;
    },
  };
}

/** A sync call with a 1 s placer deadline from T0, unless overridden. */
export function fakeCall(overrides: Partial<RunnerCall> = {}): RunnerCall {
  return {
    id: 'call-1',
    fn: 'llama-3-8b',
    key: 'session-1',
    type: 'sync',
    placerDeadline: T0 + 1_000,
    signal: new AbortController().signal,
    ...overrides,
  };
}

/** Calls with the given affinity keys, one per key, ids in order. */
export function callsFor(keys: readonly string[]): RunnerCall[] {
  return keys.map((key, i) => fakeCall({ id: `call-${i + 1}`, key }));
}

/** `n` calls all sharing one key, for placers that ignore it. */
export function manyCalls(n: number, key = 'session-1'): RunnerCall[] {
  return callsFor(new Array<string>(n).fill(key));
}

/**
 * Places `calls` one after another through the real walk on an auto-advancing fake clock, each
 * with a fresh 1 s deadline, and returns the id of the runner each one landed on.
 */
export async function placeEach(
  placer: Placer,
  pool: RunnerPool<string>,
  calls: readonly RunnerCall[],
): Promise<string[]> {
  const clock = new FakeClock({ auto: true });
  const placed: string[] = [];
  for (const call of calls) {
    const timed = { ...call, placerDeadline: clock.now() + 1_000 };
    placed.push((await placeCall(timed, pool, placer, { retryAllDelay: 10, clock })).value);
  }
  return placed;
}

/** How often each value occurs, by value. */
export function tally(values: readonly string[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const value of values) counts[value] = (counts[value] ?? 0) + 1;
  return counts;
}
