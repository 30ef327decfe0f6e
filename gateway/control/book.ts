/**
 * The reconciler's book: what this leader ordered from which runner and when, the start
 * operations under way (their attempts, backoff and the attempt in flight) and those resting,
 * and what came of them (dead letters, blocked deployments, scale events); with each model's
 * last wanted count, why its replica fits no runner, and its scaling memory.
 *
 * The book changes only by {@link Book.apply}ing a plan's actions (actions.ts). A plan drafts
 * on a {@link Book.clone}, so the plan's later steps read its earlier ones and the loop, applying
 * the same actions to its own book, ends where the draft did. Dead letters, blocks and scale
 * events outlast a change of leader ({@link Book.handover}); the rest is the leader's own.
 */
import type { EngineOrder } from '../../runner/protocol/index.ts';
import type { ReconcileAction } from './actions.ts';
import { FRESH_SCALE_MEMORY } from './autoscaler.ts';
import type { ScaleMemory } from './autoscaler.ts';
import type { FleetRunner } from './fleet.ts';
import { DeadLetters, StartOperation } from './operations.ts';
import type { DeadLetter, RetrySteps } from './operations.ts';
import { SCALE_EVENTS_KEPT } from './reconciler-options.ts';
import type { ReplicaState, ReplicaStatus, ScaleEventRecord } from './reconciler-options.ts';
import type { Occupant } from './replica-fit.ts';

/** An order this leader gave a runner. */
export interface OrderEntry {
  readonly order: EngineOrder;
  /** When it was ordered (or adopted). */
  readonly at: number;
  /** When the runner last reported the replica (the order's time until it does). */
  readonly reportedAt: number;
}

/** A start operation under the id the book knows it by. */
export interface PendingStart {
  readonly id: number;
  readonly op: StartOperation;
}

/** Why a deployment starts nothing until it changes. */
export interface Block {
  /** The deployment's updatedAt when it was blocked: a PUT changes it. */
  readonly updatedAt: number;
  readonly reason: string;
}

/** The bounds the book keeps: a start's retries and the dead letters per model. */
export interface BookLimits extends RetrySteps {
  readonly deadLetterKeep: number;
}

/** Starts dropped as unwanted after failed attempts, for the next scale-up of the same deployment. */
interface Resting {
  readonly updatedAt: number;
  readonly starts: PendingStart[];
}

/** The reconciler's record of orders and operations; see the file's comment. */
export class Book {
  readonly #limits: BookLimits;
  #adopted = false;
  #nextId = 1;
  readonly #orders = new Map<string, OrderEntry>();
  readonly #pending = new Map<string, PendingStart[]>();
  readonly #resting = new Map<string, Resting>();
  readonly #wanted = new Map<string, number>();
  readonly #unplaced = new Map<string, Readonly<Record<string, string>>>();
  readonly #memory = new Map<string, ScaleMemory>();
  readonly #blocked = new Map<string, Block>();
  readonly #scaleEvents = new Map<string, readonly ScaleEventRecord[]>();
  #deadLetters: DeadLetters;

  constructor(limits: BookLimits) {
    this.#limits = limits;
    this.#deadLetters = new DeadLetters(limits.deadLetterKeep);
  }

  /** True once a leader's first pass adopted what the runners host: orders may be answered. */
  get adopted(): boolean {
    return this.#adopted;
  }

  /** The id the next new start operation takes. */
  get nextId(): number {
    return this.#nextId;
  }

  /** The order `runner` holds, if any. */
  order(runner: string): OrderEntry | undefined {
    return this.#orders.get(runner);
  }

  /** Every order, by runner id, in the order they were given. */
  orders(): [string, OrderEntry][] {
    return [...this.#orders];
  }

  /** The start operations of `model`, oldest first. */
  pending(model: string): readonly PendingStart[] {
    return this.#pending.get(model) ?? [];
  }

  /** The id of the start a scale-up of `model` at deployment `updatedAt` takes back, if one rests. */
  revivable(model: string, updatedAt: number): number | undefined {
    const entry = this.#resting.get(model);
    return entry?.updatedAt === updatedAt ? entry.starts.at(-1)?.id : undefined;
  }

  wanted(model: string): number | undefined {
    return this.#wanted.get(model);
  }

  unplaced(model: string): Readonly<Record<string, string>> | undefined {
    return this.#unplaced.get(model);
  }

  memory(model: string): ScaleMemory {
    return this.#memory.get(model) ?? FRESH_SCALE_MEMORY;
  }

  blocked(model: string): Block | undefined {
    return this.#blocked.get(model);
  }

  deadLetters(model: string): readonly DeadLetter[] {
    return this.#deadLetters.of(model);
  }

  scaleEvents(model: string): readonly ScaleEventRecord[] {
    return this.#scaleEvents.get(model) ?? [];
  }

  /** Every model the book keeps anything of. */
  models(): Set<string> {
    const models = new Set<string>([...this.#orders.values()].map((e) => e.order.model));
    for (const map of this.#byModel()) for (const model of map.keys()) models.add(model);
    for (const model of this.#deadLetters.models()) models.add(model);
    return models;
  }

  /** A copy to draft on: applying to it leaves this book as it is. */
  clone(): Book {
    const copy = this.handover();
    copy.#adopted = this.#adopted;
    copy.#nextId = this.#nextId;
    for (const [runner, entry] of this.#orders) copy.#orders.set(runner, entry);
    for (const [model, list] of this.#pending) copy.#pending.set(model, list.map(cloneStart));
    for (const [model, { updatedAt, starts }] of this.#resting)
      copy.#resting.set(model, { updatedAt, starts: starts.map(cloneStart) });
    for (const [model, wanted] of this.#wanted) copy.#wanted.set(model, wanted);
    for (const [model, reasons] of this.#unplaced) copy.#unplaced.set(model, reasons);
    for (const [model, memory] of this.#memory) copy.#memory.set(model, memory);
    return copy;
  }

  /** A new leader's book: the history of this one (dead letters, blocks, scale events), nothing ordered, not adopted. */
  handover(): Book {
    const next = new Book(this.#limits);
    next.#deadLetters = this.#deadLetters.clone();
    for (const [model, block] of this.#blocked) next.#blocked.set(model, block);
    for (const [model, events] of this.#scaleEvents) next.#scaleEvents.set(model, events);
    return next;
  }

  /** Applies one action of a plan. */
  apply(action: ReconcileAction): void {
    switch (action.kind) {
      case 'adopt':
        for (const { runner, order } of action.orders)
          this.#orders.set(runner, { order, at: action.at, reportedAt: action.at });
        this.#adopted = true;
        return;
      case 'forget':
        return this.#forget(action.model);
      case 'seen': {
        const entry = this.#orders.get(action.runner);
        if (entry?.order.replica === action.replica)
          this.#orders.set(action.runner, { ...entry, reportedAt: action.at });
        return;
      }
      case 'ready':
        return this.#remove(action.model, this.#inFlight(action.model, action.replica));
      case 'start-failed':
        return this.#startFailed(action);
      case 'dead-letter':
        this.#deadLetters.add({ model: action.model, at: action.at, attempts: action.attempts });
        if (action.blocked) this.#blocked.set(action.model, action.blocked);
        return;
      case 'lost':
      case 'replaced':
        return this.#dropOrder(action.runner, action.replica);
      case 'unblock':
        this.#blocked.delete(action.model);
        return;
      case 'stop':
        this.#dropOrder(action.runner, action.replica);
        return this.#remove(action.model, this.#inFlight(action.model, action.replica));
      case 'size':
        this.#wanted.set(action.model, action.wanted);
        this.#memory.set(action.model, action.memory);
        return;
      case 'scale':
        return this.#scale(action);
      case 'start':
        return this.#add(action.model, action.id, new StartOperation(action.model, action.at));
      case 'replace':
        return this.#add(action.model, action.id, new StartOperation(action.model, action.at, action.target));
      case 'revive':
        return this.#revive(action.model, action.id);
      case 'drop':
      case 'abandon': {
        const start = this.#byId(action.model, action.id);
        this.#remove(action.model, start);
        if (action.kind === 'drop' && action.rest !== undefined && start) this.#rest(action.model, action.rest, start);
        return;
      }
      case 'go-first': {
        this.#dropOrder(action.target.runner, action.target.replica);
        const start = this.#byId(action.model, action.id);
        if (start) start.op.replaces = undefined;
        return;
      }
      case 'order':
        this.#orders.set(action.runner, { order: action.order, at: action.at, reportedAt: action.at });
        this.#byId(action.model, action.id)?.op.order(action.runner, action.order.replica, action.at);
        return;
      case 'fit':
        if (action.unplaced) this.#unplaced.set(action.model, action.unplaced);
        else this.#unplaced.delete(action.model);
        return;
    }
  }

  /** The book's maps keyed by model: what a model keeps, beside its orders and dead letters. */
  #byModel(): Map<string, unknown>[] {
    return [this.#pending, this.#resting, this.#wanted, this.#unplaced, this.#memory, this.#blocked, this.#scaleEvents];
  }

  #forget(model: string): void {
    for (const [runner, entry] of [...this.#orders]) if (entry.order.model === model) this.#orders.delete(runner);
    for (const map of this.#byModel()) map.delete(model);
    this.#deadLetters.forget(model);
  }

  #startFailed(action: Extract<ReconcileAction, { kind: 'start-failed' }>): void {
    this.#dropOrder(action.runner, action.replica);
    const start = this.#inFlight(action.model, action.replica);
    if (start?.op.fail(action.reason, action.output, action.at, this.#limits) === 'spent')
      this.#remove(action.model, start);
  }

  #scale(action: Extract<ReconcileAction, { kind: 'scale' }>): void {
    const { model, from, to, reason, at } = action;
    const list = [...this.scaleEvents(model), { kind: 'scale' as const, model, from, to, reason, at }];
    this.#scaleEvents.set(model, list.slice(-SCALE_EVENTS_KEPT));
  }

  #add(model: string, id: number, op: StartOperation): void {
    this.#list(model).push({ id, op });
    this.#nextId = Math.max(this.#nextId, id + 1);
  }

  #revive(model: string, id: number): void {
    const entry = this.#resting.get(model);
    const start = entry?.starts.find((s) => s.id === id);
    if (!entry || !start) return;
    entry.starts.splice(entry.starts.indexOf(start), 1);
    if (entry.starts.length === 0) this.#resting.delete(model);
    this.#list(model).push(start);
  }

  #rest(model: string, updatedAt: number, start: PendingStart): void {
    const entry = this.#resting.get(model);
    if (entry?.updatedAt === updatedAt) entry.starts.push(start);
    else this.#resting.set(model, { updatedAt, starts: [start] });
  }

  #dropOrder(runner: string, replica: string): void {
    if (this.#orders.get(runner)?.order.replica === replica) this.#orders.delete(runner);
  }

  #list(model: string): PendingStart[] {
    let list = this.#pending.get(model);
    if (!list) {
      list = [];
      this.#pending.set(model, list);
    }
    return list;
  }

  #byId(model: string, id: number): PendingStart | undefined {
    return this.#pending.get(model)?.find((s) => s.id === id);
  }

  #inFlight(model: string, replica: string): PendingStart | undefined {
    return this.#pending.get(model)?.find((s) => s.op.inFlight?.replica === replica);
  }

  #remove(model: string, start: PendingStart | undefined): void {
    const list = this.#pending.get(model);
    if (start && list) list.splice(list.indexOf(start), 1);
  }
}

function cloneStart(start: PendingStart): PendingStart {
  return { id: start.id, op: start.op.clone() };
}

/**
 * The replicas of `model` as a leader sees them: its orders (reported or not; `starting` until
 * reported) and any other engine of the model a runner reports (`draining`: its order is null;
 * or `failed`). Outdated when ordered (or reported) at a revision other than `revision`.
 */
export function replicasOf(
  book: Book,
  model: string,
  runners: readonly FleetRunner[],
  revision: string | undefined,
): ReplicaStatus[] {
  const out: ReplicaStatus[] = [];
  const seen = new Set<string>();
  const byId = new Map(runners.map((r) => [r.id, r]));
  for (const [runnerId, { order, at }] of book.orders()) {
    if (order.model !== model) continue;
    const h = byId.get(runnerId)?.hosted;
    const hosted = h?.replica === order.replica ? h : undefined;
    const state: ReplicaState = !hosted ? 'starting' : hosted.state === 'stopped' ? 'draining' : hosted.state;
    const outdated = revision !== undefined && order.revision !== revision;
    out.push({
      replica: order.replica,
      runner: runnerId,
      state,
      since: hosted?.since ?? at,
      ...(outdated ? { outdated: true as const } : {}),
    });
    seen.add(runnerId);
  }
  out.push(...reported(model, runners, revision, seen, (state) => (state === 'failed' ? state : 'draining')));
  return sortByRunner(out);
}

/** The replicas of `model` as the runners report them, each in the state reported: a follower's view. */
export function reportedReplicas(
  model: string,
  runners: readonly FleetRunner[],
  revision: string | undefined,
): ReplicaStatus[] {
  return sortByRunner(reported(model, runners, revision, new Set(), (state) => state));
}

function reported(
  model: string,
  runners: readonly FleetRunner[],
  revision: string | undefined,
  skip: ReadonlySet<string>,
  stateOf: (state: ReplicaState) => ReplicaState,
): ReplicaStatus[] {
  const out: ReplicaStatus[] = [];
  for (const r of runners) {
    const h = r.hosted;
    if (!h || h.model !== model || h.state === 'stopped' || skip.has(r.id)) continue;
    const outdated = revision !== undefined && h.revision !== undefined && h.revision !== revision;
    out.push({
      replica: h.replica,
      runner: r.id,
      state: stateOf(h.state),
      since: h.since,
      ...(outdated ? { outdated: true as const } : {}),
    });
  }
  return out;
}

function sortByRunner(replicas: ReplicaStatus[]): ReplicaStatus[] {
  return replicas.sort((a, b) => (a.runner < b.runner ? -1 : a.runner > b.runner ? 1 : 0));
}

/** What each runner hosts or is ordered, for placement. */
export function occupantsOf(book: Book, runners: readonly FleetRunner[]): Map<string, Occupant> {
  const occupants = new Map<string, Occupant>();
  for (const r of runners) {
    // A failed or stopped engine holds nothing: the runner launches the next order over it.
    if (r.hosted && r.hosted.state !== 'stopped' && r.hosted.state !== 'failed')
      occupants.set(r.id, { replica: r.hosted.replica, model: r.hosted.model, how: 'hosted' });
  }
  for (const [runner, { order }] of book.orders())
    if (!occupants.has(runner)) occupants.set(runner, { replica: order.replica, model: order.model, how: 'ordered' });
  return occupants;
}
