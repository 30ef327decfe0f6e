/**
 * What a reconciler pass decides, one action at a time: the plan (plan.ts) returns them, the
 * book (book.ts) applies them, and the loop (reconciler.ts) logs each and tells its listener.
 * An action names its operation by the id the book gave it, its order by runner and replica.
 */
import type { EngineOrder } from '../../runner/protocol/index.ts';
import type { ScaleMemory } from './autoscaler.ts';
import type { ReplacedReplica, StartAttempt } from './operations.ts';
import type { ReconcilerEvent, ReplicaState, ScaleEventRecord } from './reconciler-options.ts';

/** One step of a pass, in the order the plan took it. */
export type ReconcileAction =
  /** The first pass of a leader: the starting and ready replicas runners host become its orders. */
  | {
      readonly kind: 'adopt';
      readonly orders: readonly { readonly runner: string; readonly order: EngineOrder }[];
      readonly at: number;
    }
  /** A model with no deployment: its orders go (`stopped` of them), and everything kept of it. */
  | { readonly kind: 'forget'; readonly model: string; readonly stopped: number }
  /** The runner still reports the replica it was ordered. */
  | { readonly kind: 'seen'; readonly runner: string; readonly replica: string; readonly at: number }
  /** An ordered replica is ready: its start operation is done. The event it is told as, unchanged. */
  | Extract<ReconcilerEvent, { kind: 'ready' }>
  /** An attempt of a start failed: its order goes; the operation retries, or is spent (a dead letter follows). */
  | {
      readonly kind: 'start-failed';
      readonly model: string;
      readonly replica: string;
      readonly runner: string;
      readonly attempt: number;
      readonly reason: string;
      readonly output: readonly string[] | undefined;
      readonly at: number;
    }
  /** A spent operation is dead-lettered; with `blocked`, its deployment starts nothing until it changes. */
  | {
      readonly kind: 'dead-letter';
      readonly model: string;
      readonly attempts: readonly StartAttempt[];
      readonly at: number;
      readonly blocked: { readonly updatedAt: number; readonly reason: string } | undefined;
    }
  /** An established replica is gone (failed, stopped, its runner lost or silent): its order goes. */
  | {
      readonly kind: 'lost';
      readonly model: string;
      readonly replica: string;
      readonly runner: string;
      readonly reason: string;
    }
  /** An outdated replica stops: the one replacing it (`by`) is ready. The event it is told as, unchanged. */
  | Extract<ReconcilerEvent, { kind: 'replaced' }>
  /** A blocked deployment changed: it may start replicas again. */
  | { readonly kind: 'unblock'; readonly model: string }
  /** A replica's order goes (its runner gets null), with the start in flight for it. */
  | {
      readonly kind: 'stop';
      readonly model: string;
      readonly replica: string;
      readonly runner: string;
      readonly state: ReplicaState;
      readonly reason: string;
    }
  /** The pass's wanted count of a model, and the scaling memory it leaves. */
  | { readonly kind: 'size'; readonly model: string; readonly wanted: number; readonly memory: ScaleMemory }
  /** The count of replicas the leader means to have changed: the event, as the book keeps it. */
  | ScaleEventRecord
  /** A new start operation (`id`), made at `at`. */
  | { readonly kind: 'start'; readonly model: string; readonly id: number; readonly at: number }
  /** A start operation that rested is wanted again, with its attempts and backoff. */
  | { readonly kind: 'revive'; readonly model: string; readonly id: number }
  /** A start not yet ordered is no longer wanted; with `rest`, kept (it has failed attempts) for the next scale-up of that deployment. */
  | {
      readonly kind: 'drop';
      readonly model: string;
      readonly id: number;
      readonly failedAttempts: number;
      readonly reason: string;
      readonly rest: number | undefined;
    }
  /** A replacement not yet ordered whose outdated replica is gone meanwhile. */
  | { readonly kind: 'abandon'; readonly model: string; readonly id: number }
  /** A new start operation (`id`) that replaces `target`, one of `outdated` outdated ready replicas. */
  | {
      readonly kind: 'replace';
      readonly model: string;
      readonly id: number;
      readonly at: number;
      readonly target: ReplacedReplica;
      readonly outdated: number;
    }
  /** No room beside `target`: it stops first, and the replacement `id` becomes a plain start. */
  | { readonly kind: 'go-first'; readonly model: string; readonly id: number; readonly target: ReplacedReplica }
  /** Start operation `id` orders `order` from `runner`: its attempt number `attempt`. */
  | {
      readonly kind: 'order';
      readonly model: string;
      readonly id: number;
      readonly runner: string;
      readonly order: EngineOrder;
      readonly at: number;
      readonly attempt: number;
    }
  /** Where the model's due starts stand: `unplaced`, every runner's reason when one fit none. */
  | { readonly kind: 'fit'; readonly model: string; readonly unplaced: Readonly<Record<string, string>> | undefined };
