/**
 * The reconciler's options with their defaults and checks, the timers it schedules with, and
 * the shapes it reports in: events and a deployment's status. The loop itself is reconciler.ts.
 */
import { checksFor } from '../../placer/kernel/index.ts';
import type { Clock, Logger, Resolved } from '../../placer/kernel/index.ts';
import { GatewayConfigError } from '../errors.ts';
import type { FleetView, Lease } from './fleet.ts';
import type { DeadLetter, StartAttempt } from './operations.ts';
import type { DeploymentStore } from './store.ts';

/**
 * The reconciler's defaults: LocalAI's 30 s pass and its pending-operation retries (30 s to
 * 15 min, dead-lettered after 10 attempts), Knative's 60 s stable and 6 s panic windows with
 * panic at twice the target.
 */
export const reconcilerDefaults = Object.freeze({
  period: 30_000,
  sampleInterval: 1_000,
  stableWindow: 60_000,
  panicWindow: 6_000,
  panicThreshold: 2,
  startBackoffBase: 30_000,
  startBackoffCap: 900_000,
  startAttempts: 10,
  orderTimeout: 30_000,
  deadLetterKeep: 20,
});

/** Tunables of the reconciler; every one optional. */
export interface ReconcilerOptions {
  /** ms between passes (a poke brings one sooner). @default 30000 */
  period?: number;
  /** ms between concurrency samples of each deployed model. @default 1000 */
  sampleInterval?: number;
  /** ms the stable concurrency average spans; also how long scale-down waits after a panic. @default 60000 */
  stableWindow?: number;
  /** ms the panic average spans; at most stableWindow. @default 6000 */
  panicWindow?: number;
  /** Panic when the panic average reaches this many times target x ready replicas. @default 2 */
  panicThreshold?: number;
  /** ms before the first retry of a failed start; each further retry waits twice as long. @default 30000 */
  startBackoffBase?: number;
  /** The longest wait between retries of a start, ms. @default 900000 */
  startBackoffCap?: number;
  /** Attempts of one start before it is dead-lettered and its deployment blocked. @default 10 */
  startAttempts?: number;
  /** ms a runner has to report an ordered replica (starting) before the attempt counts as failed. @default 30000 */
  orderTimeout?: number;
  /** Dead-lettered operations kept per model, the newest. @default 20 */
  deadLetterKeep?: number;
}

/** The options resolved and checked; frozen. */
export type ReconcilerConfig = Resolved<typeof reconcilerDefaults>;

/** Timers the reconciler schedules with; specs inject ones they fire by hand. */
export interface ReconcilerTimers {
  setTimeout(callback: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

/** The process's timers, unref'd: a reconciler never keeps a process alive on its own. */
export const systemReconcilerTimers: ReconcilerTimers = Object.freeze({
  setTimeout: (callback: () => void, ms: number): unknown => setTimeout(callback, ms).unref(),
  clearTimeout: (handle: unknown): void => clearTimeout(handle as NodeJS.Timeout),
});

/** What the reconciler is given besides its options. */
export interface ReconcilerDependencies {
  readonly store: DeploymentStore;
  readonly fleet: FleetView;
  readonly lease: Lease;
  readonly clock: Clock;
  readonly logger: Logger;
  /** Told of scale events, ready replicas, failures, dead letters and leadership; must not throw (a throw is logged). */
  readonly events?: (event: ReconcilerEvent) => void;
  /** Draws replica ids. @default Math.random */
  readonly random?: () => number;
  /** @default systemReconcilerTimers */
  readonly timers?: ReconcilerTimers;
}

/** What `new Reconciler(...)` takes. */
export type ReconcilerInit = ReconcilerDependencies & ReconcilerOptions;

/** Something the reconciler did or saw, for metrics and logs. */
export type ReconcilerEvent =
  /** The count of replicas it means to have changed, with the reason in words. */
  | {
      readonly kind: 'scale';
      readonly model: string;
      readonly from: number;
      readonly to: number;
      readonly reason: string;
    }
  /** An ordered replica became ready `startMs` after its order. */
  | {
      readonly kind: 'ready';
      readonly model: string;
      readonly replica: string;
      readonly runner: string;
      readonly startMs: number;
    }
  /** A replica failed (to start, or after). */
  | {
      readonly kind: 'failed';
      readonly model: string;
      readonly replica: string;
      readonly runner: string;
      readonly reason: string;
    }
  /** A ready replica of an older revision of its deployment stopped: `by`, of the current one, is ready in its place. */
  | {
      readonly kind: 'replaced';
      readonly model: string;
      readonly replica: string;
      readonly runner: string;
      readonly by: string;
    }
  /** A start operation spent its attempts. */
  | { readonly kind: 'dead-letter'; readonly model: string; readonly attempts: readonly StartAttempt[] }
  /** This gateway took or lost the lease. */
  | { readonly kind: 'leader'; readonly leading: boolean };

/** A scale event as kept in a deployment's status. */
export type ScaleEventRecord = Extract<ReconcilerEvent, { kind: 'scale' }> & { readonly at: number };

/** Where a replica stands: ordered or starting, ready, draining (stopping, or no longer wanted), failed. */
export type ReplicaState = 'starting' | 'ready' | 'draining' | 'failed';

/** One replica of a deployment in its status. */
export interface ReplicaStatus {
  readonly replica: string;
  readonly runner: string;
  readonly state: ReplicaState;
  /** Since when, ms since the epoch: the runner's report, or the order's time before the first report. */
  readonly since: number;
  /** True for a replica ordered at an older revision of its deployment (its profile or runner labels changed): it is being replaced. */
  readonly outdated?: true;
}

/** A start operation in a deployment's status. */
export interface PendingStatus {
  /** The replica id of the attempt in flight; absent while waiting for a retry or a runner. */
  readonly replica?: string;
  /** Failed attempts so far. */
  readonly attempts: readonly StartAttempt[];
  /** When the next attempt may be ordered. */
  readonly nextAttemptAt: number;
  readonly lastReason: string;
}

/**
 * A deployment's status as one gateway sees it. A follower reports the replicas runners report
 * and leaves the leader's fields (wanted, pending, dead letters, events) empty.
 */
export interface ReconcilerDeploymentStatus {
  readonly reconciler: 'leading' | 'following';
  readonly wanted: number;
  readonly starting: number;
  readonly ready: number;
  readonly draining: number;
  /** Replicas starting or ready at an older revision of the deployment: being replaced, one at a time. */
  readonly outdated: number;
  readonly replicas: readonly ReplicaStatus[];
  /** When a wanted replica fits no runner: why, per runner id. */
  readonly unplaced?: { readonly reason: string; readonly runners: Readonly<Record<string, string>> };
  readonly pending: readonly PendingStatus[];
  readonly deadLettered: readonly Pick<DeadLetter, 'at' | 'attempts'>[];
  /** Why no new replica starts, until the deployment changes. */
  readonly blocked?: string;
  /** The last scale events, oldest first. */
  readonly events: readonly ScaleEventRecord[];
}

/** Scale events kept per deployment for its status. */
export const SCALE_EVENTS_KEPT = 20;

const check = checksFor(GatewayConfigError);

/**
 * Applies defaults and checks every option, with messages naming the option and the value.
 * @throws {@link GatewayConfigError} naming the first bad option.
 */
export function resolveReconcilerOptions(options: ReconcilerOptions): ReconcilerConfig {
  const config = check.resolve(
    reconcilerDefaults,
    {
      period: (o, v) => check.ms(o, v, 1),
      sampleInterval: (o, v) => check.ms(o, v, 1),
      stableWindow: (o, v) => check.ms(o, v, 1),
      panicWindow: (o, v) => check.ms(o, v, 1),
      panicThreshold: (o, v) => check.number(o, v, { min: 1, max: 1000 }),
      startBackoffBase: (o, v) => check.ms(o, v, 1),
      startBackoffCap: (o, v) => check.ms(o, v, 1),
      startAttempts: (o, v) => check.integer(o, v, { min: 1, max: 1000 }),
      orderTimeout: (o, v) => check.ms(o, v, 1),
      deadLetterKeep: (o, v) => check.integer(o, v, { min: 1, max: 1000 }),
    },
    options,
  );
  if (config.panicWindow > config.stableWindow)
    throw check.fail(`panicWindow must be at most stableWindow (${config.stableWindow} ms), got ${config.panicWindow}`);
  if (config.startBackoffCap < config.startBackoffBase)
    throw check.fail(
      `startBackoffCap must be at least startBackoffBase (${config.startBackoffBase} ms), got ${config.startBackoffCap}`,
    );
  if (config.sampleInterval > config.panicWindow)
    throw check.fail(
      `sampleInterval must be at most panicWindow (${config.panicWindow} ms), got ${config.sampleInterval}`,
    );
  return config;
}
