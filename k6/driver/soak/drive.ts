/**
 * Driving the soak's calls: a short closed-loop probe that measures what the fleet serves, the
 * open-loop load at a share of it (a call is due every 1/rate seconds whatever the answers do, so
 * a stall shows in every call that queued behind it), and the polling of every accepted detached
 * call at the end. Every loop is bounded in count and in time.
 */
import { performance } from 'node:perf_hooks';
import { setTimeout as delay } from 'node:timers/promises';
import { openLoopSchedule } from '../load.ts';
import { CALL_TIMEOUT_MS, kindOf } from './client.ts';
import type { FateReading, SoakClient } from './client.ts';
import type { DetachedFate, Ledger } from './ledger.ts';
import { classify } from './ledger.ts';

/** What the capacity probe measured. */
export interface CapacityProbe {
  /** Whole answers per second. */
  rate: number;
  calls: number;
  errors: number;
  ms: number;
  connections: number;
}

/**
 * Closed loop for `ms`: `connections` workers, each sending its next sync or streamed call (the
 * load's mix without detached calls, whose 202 comes before the work is done) as soon as the last
 * answered. The rate of whole answers is what the fleet serves with every slot busy.
 */
export async function probeCapacity(
  client: SoakClient,
  connections: number,
  ms: number,
  signal?: AbortSignal,
): Promise<CapacityProbe> {
  const start = performance.now();
  const end = start + ms;
  let seq = 0;
  let calls = 0;
  let errors = 0;
  const worker = async (): Promise<void> => {
    while (performance.now() < end && !signal?.aborted) {
      let n = seq++;
      // Skip the detached slots of the mix.
      while (kindOf(n) === 'detached') n = seq++;
      const answer = await client.call(kindOf(n), n, signal);
      if (classify({ kind: kindOf(n), ...answer }) === 'ok') calls++;
      else errors++;
    }
  };
  await Promise.all(Array.from({ length: connections }, worker));
  const elapsed = performance.now() - start;
  return { rate: (calls * 1000) / elapsed, calls, errors, ms: elapsed, connections };
}

/** Bounds of the open-loop load. */
export interface LoadPlan {
  /** Calls per second. */
  readonly rate: number;
  readonly durationMs: number;
  /** Calls waiting for an answer at once; a call due past that is recorded `dropped`. */
  readonly maxInFlight: number;
  /** Most calls in all, whatever rate and duration say. */
  readonly maxCalls: number;
}

/**
 * Sends call i at `start + i / rate` until the duration or the call bound is reached, records each
 * in `ledger` with times from `start` (performance.now()'s clock), and resolves once the last
 * answer is in. `inFlight` reports the calls waiting, for the memory sampler.
 */
export function runLoad(
  client: SoakClient,
  ledger: Ledger,
  plan: LoadPlan,
  start: number,
  signal?: AbortSignal,
): { done: Promise<void>; inFlight: () => number } {
  const total = Math.min(plan.maxCalls, Math.floor((plan.rate * plan.durationMs) / 1000));
  const run = openLoopSchedule(
    { rate: plan.rate, total, maxInFlight: plan.maxInFlight, start, ...(signal ? { signal } : {}) },
    {
      send: async (seq, due) => {
        const kind = kindOf(seq);
        const sentMs = performance.now() - start;
        const answer = await client.call(kind, seq, signal);
        ledger.record({ seq, kind, dueMs: due - start, sentMs, endMs: performance.now() - start, ...answer });
      },
      drop: (seq, due) => {
        const dueMs = due - start;
        ledger.record({ seq, kind: kindOf(seq), dueMs, sentMs: dueMs, endMs: dueMs, status: 0, code: 'dropped' });
      },
    },
  );
  return { done: run.done, inFlight: run.inFlight };
}

/** How the detached calls are polled at the end. */
export interface PollPlan {
  /** Longest the polling may take in all; calls not final by then are recorded as they were. */
  readonly withinMs: number;
  /** Calls polled at once. */
  readonly concurrency: number;
  /** Pause before asking again about a call still running. */
  readonly everyMs: number;
}

/**
 * The polling after a load of `durationMs`: sixteen calls at a time, twice a second each, for a
 * quarter of the load's length, at least 10 s and at most the longest a call may take. A call
 * accepted (committed) at the load's last moment needs its execution time, seconds here; what is
 * still running after that bound is stuck, and a longer wait would only lengthen the run.
 */
export function pollPlan(durationMs: number): PollPlan {
  return Object.freeze({
    withinMs: Math.min(CALL_TIMEOUT_MS, Math.max(10_000, Math.round(durationMs / 4))),
    concurrency: 16,
    everyMs: 500,
  });
}

/**
 * Asks about every id until it is final (or not found) or the plan's bound passes; a call still
 * running then is recorded `running`, one the gateway could not tell about at the last asking
 * (its store down, no answer) `unreadable`.
 */
export async function pollDetached(
  client: SoakClient,
  ids: readonly string[],
  plan: PollPlan,
  signal?: AbortSignal,
): Promise<DetachedFate[]> {
  const deadline = performance.now() + plan.withinMs;
  const fates: DetachedFate[] = [];
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < ids.length) {
      const id = ids[next++]!;
      let last: FateReading = { kind: 'unreadable' };
      for (;;) {
        last = await client.fate(id, signal);
        if (last.kind === 'final' || performance.now() >= deadline || signal?.aborted) break;
        await delay(plan.everyMs);
      }
      fates.push(last.kind === 'final' ? last.fate : { id, status: last.kind });
    }
  };
  await Promise.all(Array.from({ length: Math.min(plan.concurrency, Math.max(1, ids.length)) }, worker));
  return fates;
}
