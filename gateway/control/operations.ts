/**
 * Start operations: one per replica the reconciler wants and has not got, with every attempt it
 * made and why each failed, retried with exponential backoff and given up on into a dead-letter
 * list after a bounded number of attempts (LocalAI's pending node operations: 30 s to 15 min,
 * ten attempts). Nothing here reads a clock or schedules a timer: the reconciler passes `now`.
 *
 * An attempt (an order issued to one runner for one new replica id) fails when:
 * - the runner reports the replica `failed` (its reason and the engine's output tail are kept),
 *   or `stopped` before it was ready;
 * - the runner leaves the fleet, or stops being placeable, before the replica is ready
 *   ("runner lost");
 * - `orderTimeout` passes without the runner reporting the replica at all. Once reported
 *   starting, the runner's own start timeout (the profile's) bounds the start.
 * It succeeds when the runner reports the replica `ready`.
 */
import { createRedactor } from '../../placer/kernel/index.ts';
import type { HostedEngine, OrderedProfile } from '../../runner/protocol/index.ts';
import type { FleetRunner } from './fleet.ts';

/** One failed attempt of a start operation. */
export interface StartAttempt {
  readonly runner: string;
  readonly replica: string;
  /** Why it failed, in one line. */
  readonly reason: string;
  /** The engine's last output lines, when the runner sent them. */
  readonly output?: readonly string[];
  /** When the failure was seen, ms since the epoch. */
  readonly at: number;
}

/** The attempt an operation is waiting on. */
export interface InFlightAttempt {
  readonly runner: string;
  readonly replica: string;
  /** When the order was issued. */
  readonly orderedAt: number;
}

/** A replica a start replaces. */
export interface ReplacedReplica {
  readonly runner: string;
  readonly replica: string;
}

/** A start operation given up on, with every attempt. */
export interface DeadLetter {
  readonly model: string;
  readonly at: number;
  readonly attempts: readonly StartAttempt[];
}

/** How an in-flight attempt stands at a pass. */
export type AttemptOutcome =
  | { readonly kind: 'waiting' }
  | { readonly kind: 'ready' }
  | { readonly kind: 'failed'; readonly reason: string; readonly output?: readonly string[] };

/** Longest start failure reason a client is shown, in characters. */
export const CLIENT_REASON_MAX = 300;

/**
 * A start failure's reason as a client may read it: every value of the profile's args and env
 * hidden (a runner or an engine may quote them; values under the kernel's MIN_SCRUBBED_LENGTH
 * are too short to hide without blanking ordinary words), control characters flattened, and cut
 * to {@link CLIENT_REASON_MAX}. The engine's output is never part of it.
 */
export function clientReason(reason: string, profile: Pick<OrderedProfile, 'args' | 'env'>): string {
  const hidden = createRedactor([...(profile.args ?? []), ...Object.values(profile.env ?? {})])(reason);
  const flat = hidden
    .replace(/\x1b\[[0-9;]*[A-Za-z]/g, '')
    .replace(/[\x00-\x1f\x7f]/g, ' ')
    .trim();
  return flat.length > CLIENT_REASON_MAX ? `${flat.slice(0, CLIENT_REASON_MAX - 1)}…` : flat;
}

/** What {@link startFailureOf} reads of a deployment's status: the leader's own, or as it published it. */
export interface FailureView {
  readonly starting: number;
  readonly ready: number;
  /** Set while the deployment is blocked after a dead letter. */
  readonly blocked?: string;
  /** Start operations; `replica` is set on one whose attempt is in flight. */
  readonly pending: readonly {
    readonly replica?: string;
    readonly attempts: readonly Pick<StartAttempt, 'reason' | 'at'>[];
    readonly nextAttemptAt: number;
  }[];
  readonly deadLettered: readonly { readonly attempts: readonly Pick<StartAttempt, 'reason'>[] }[];
}

/** Why a deployment cannot get a replica now; see {@link startFailureOf}. */
export interface StartFailureView {
  /** The last failed attempt's reason, fit for a client ({@link clientReason}). */
  readonly reason: string;
  /** Until the next attempt, in ms from `now`; absent for a blocked deployment. */
  readonly retryInMs?: number;
}

/**
 * Why a deployment cannot get a replica now, read from its status: a start failed and nothing
 * of it is starting or ready, so the last failure stands until the next attempt or, blocked,
 * until the deployment changes. Undefined while a replica may still come: one starts or
 * serves, an attempt is in flight, or no start has failed.
 */
export function startFailureOf(
  status: FailureView,
  profile: Pick<OrderedProfile, 'args' | 'env'>,
  now: number,
): StartFailureView | undefined {
  if (status.ready + status.starting > 0 || status.pending.some((op) => op.replica !== undefined)) return undefined;
  if (status.blocked !== undefined) {
    const last = status.deadLettered.at(-1)?.attempts.at(-1);
    return { reason: clientReason(last ? last.reason : 'its starts were given up on', profile) };
  }
  let last: Pick<StartAttempt, 'reason' | 'at'> | undefined;
  let next = Number.POSITIVE_INFINITY;
  for (const op of status.pending) {
    const attempt = op.attempts.at(-1);
    if (attempt === undefined) continue;
    if (last === undefined || attempt.at >= last.at) last = attempt;
    next = Math.min(next, op.nextAttemptAt);
  }
  if (last === undefined) return undefined;
  return { reason: clientReason(last.reason, profile), retryInMs: Math.max(0, next - now) };
}

/** The delay before retry number `failures` (1 after the first failure): base x 2^(failures-1), at most cap. */
export function startBackoff(failures: number, base: number, cap: number): number {
  // Past 2^30 the product only matters for being above cap; stop doubling before it overflows.
  return Math.min(cap, base * 2 ** Math.min(Math.max(failures - 1, 0), 30));
}

/** Reads one attempt's fate from the runner's last report. */
export function attemptOutcome(
  attempt: InFlightAttempt,
  runner: FleetRunner | undefined,
  now: number,
  orderTimeout: number,
): AttemptOutcome {
  if (!runner) return { kind: 'failed', reason: 'runner lost: it left the fleet before the replica was ready' };
  const hosted: HostedEngine | undefined = runner.hosted?.replica === attempt.replica ? runner.hosted : undefined;
  if (hosted?.state === 'ready') return { kind: 'ready' };
  if (hosted?.state === 'failed') {
    return {
      kind: 'failed',
      reason: hosted.reason ?? 'the runner reported the replica failed',
      ...(hosted.output ? { output: [...hosted.output] } : {}),
    };
  }
  if (hosted?.state === 'stopped' || hosted?.state === 'draining')
    return { kind: 'failed', reason: `the runner reported the replica ${hosted.state} before it was ready` };
  if (!runner.placeable)
    return {
      kind: 'failed',
      reason: 'runner lost: it stopped being placeable (draining, or missing heartbeats) before the replica was ready',
    };
  if (!hosted && now - attempt.orderedAt >= orderTimeout) {
    return {
      kind: 'failed',
      reason: `the runner did not report the replica within ${Math.round(orderTimeout / 1000)} s of the order`,
    };
  }
  return { kind: 'waiting' };
}

/** Bounds of an operation's retries; the reconciler's options. */
export interface RetrySteps {
  readonly startBackoffBase: number;
  readonly startBackoffCap: number;
  readonly startAttempts: number;
}

/** One replica being started: its attempts so far, the one in flight, and when the next may go. */
export class StartOperation {
  readonly model: string;
  /**
   * The outdated replica this start replaces (a deployment changed): it stops once the new one
   * is ready. Cleared when the old one must go first (no room beside it): a plain start then.
   */
  replaces: ReplacedReplica | undefined;
  readonly #attempts: StartAttempt[] = [];
  #inFlight: InFlightAttempt | undefined;
  #nextAttemptAt: number;

  constructor(model: string, now: number, replaces?: ReplacedReplica) {
    this.model = model;
    this.#nextAttemptAt = now;
    this.replaces = replaces;
  }

  /** Failed attempts, oldest first. */
  get attempts(): readonly StartAttempt[] {
    return this.#attempts;
  }

  get inFlight(): InFlightAttempt | undefined {
    return this.#inFlight;
  }

  /** When the next attempt may be ordered (now or past for a new operation). */
  get nextAttemptAt(): number {
    return this.#nextAttemptAt;
  }

  /** Runners an attempt of this operation failed on, with when each last failed there. */
  get failedOn(): ReadonlyMap<string, number> {
    return new Map(this.#attempts.map((a) => [a.runner, a.at]));
  }

  /** True when no attempt is in flight and the backoff has passed. */
  due(now: number): boolean {
    return this.#inFlight === undefined && now >= this.#nextAttemptAt;
  }

  /** A copy to change without changing this one (a plan's draft of the book). */
  clone(): StartOperation {
    const copy = new StartOperation(this.model, this.#nextAttemptAt, this.replaces);
    copy.#attempts.push(...this.#attempts);
    copy.#inFlight = this.#inFlight;
    return copy;
  }

  /** Records the order of `replica` to `runner`. */
  order(runner: string, replica: string, now: number): void {
    this.#inFlight = { runner, replica, orderedAt: now };
  }

  /**
   * Records the in-flight attempt as failed. Returns `retry` with the next attempt's time
   * (backoff from now), or `spent` when this was the last attempt allowed.
   */
  fail(reason: string, output: readonly string[] | undefined, now: number, steps: RetrySteps): 'retry' | 'spent' {
    const attempt = this.#inFlight;
    if (!attempt) throw new Error('StartOperation.fail with no attempt in flight');
    this.#inFlight = undefined;
    this.#attempts.push(
      Object.freeze({
        runner: attempt.runner,
        replica: attempt.replica,
        reason,
        ...(output ? { output: Object.freeze([...output]) } : {}),
        at: now,
      }),
    );
    if (this.#attempts.length >= steps.startAttempts) return 'spent';
    this.#nextAttemptAt = now + startBackoff(this.#attempts.length, steps.startBackoffBase, steps.startBackoffCap);
    return 'retry';
  }
}

/** The dead-letter lists, per model, each keeping its last `keep` entries. */
export class DeadLetters {
  readonly #keep: number;
  readonly #byModel = new Map<string, DeadLetter[]>();

  constructor(keep: number) {
    this.#keep = keep;
  }

  /** A copy to change without changing this one. */
  clone(): DeadLetters {
    const copy = new DeadLetters(this.#keep);
    for (const [model, list] of this.#byModel) copy.#byModel.set(model, [...list]);
    return copy;
  }

  add(letter: DeadLetter): void {
    const list = this.#byModel.get(letter.model) ?? [];
    list.push(Object.freeze(letter));
    if (list.length > this.#keep) list.splice(0, list.length - this.#keep);
    this.#byModel.set(letter.model, list);
  }

  /** A model's dead letters, oldest first. */
  of(model: string): readonly DeadLetter[] {
    return this.#byModel.get(model) ?? [];
  }

  /** Forgets a model's letters (its deployment was deleted). */
  forget(model: string): void {
    this.#byModel.delete(model);
  }

  /** Models with letters. */
  models(): string[] {
    return [...this.#byModel.keys()];
  }
}
