/**
 * One reconciler pass as a pure function: from the deployments, the fleet as observed and the
 * book, the actions that bring each deployment's replicas to what its load wants. It reads no
 * clock (`now` is given), does no I/O, and changes none of its inputs: it drafts on a clone of
 * the book, applying each action as it takes it, so a later step sees an earlier one (an order
 * given to a runner makes it occupied for the next start).
 *
 * The rules, in the order a pass applies them (docs/operations.md, "The reconciler"):
 * - Adopt: the first pass of a leader takes the starting and ready replicas of deployed models
 *   that order-taking runners host as its own orders, with their replica ids, before deciding
 *   anything, so a new leader never stops a healthy fleet. (A runner reporting no revision is
 *   taken as current.) A hosted replica seen later without an order of this leader gets `null`.
 * - Forget: a model with no deployment (deleted) loses its orders and everything kept of it.
 * - Read each order's fate: an attempt in flight becomes ready or fails (operations.ts's
 *   attemptOutcome); a failed attempt is retried with backoff, or after the book's `startAttempts` is
 *   dead-lettered with every attempt and its deployment blocked until it changes (its
 *   updatedAt). An established replica whose runner left, reports it failed or stopped, or has
 *   not reported it for `orderTimeout` is lost: the count drops and a new start follows.
 * - Per deployment, in the store's order: unblock it when it changed; stop its replicas of an
 *   older revision that are not ready yet; count its replicas (a replacement counts once the
 *   one it replaces stops) and take the wanted count from autoscaler.ts. Scale up at once, one
 *   start per missing replica, taking back a start that rested with failed attempts (so demand
 *   that stops and comes back cannot restart a failing engine at once); drop starts not yet
 *   ordered that are no longer wanted. Scale down one replica per pass once autoscaler.ts allows
 *   it: the newest starting one, else a ready one, outdated before current, the least loaded first.
 * - Roll a changed deployment: with no start under way and nothing starting, start a replacement
 *   for the least loaded ready outdated replica; it stops once its replacement is ready. A blocked
 *   deployment starts nothing.
 * - Place every due start by replica-fit.ts, or record every runner's reason. A replacement that
 *   finds no room lets its outdated replica stop first when no runner is about to be free and
 *   the new one fits on that runner once it is.
 */
import type { ReconcileAction } from './actions.ts';
import { decideScale } from './autoscaler.ts';
import type { AutoscalerWindows, ScaleDecision, ScaleLoad } from './autoscaler.ts';
import { occupantsOf, replicasOf } from './book.ts';
import type { Book, PendingStart } from './book.ts';
import type { Deployment } from './deployments.ts';
import type { FleetRunner } from './fleet.ts';
import { attemptOutcome } from './operations.ts';
import type { ReplacedReplica } from './operations.ts';
import type { ReplicaStatus } from './reconciler-options.ts';
import { fitsOnceFreed, placeReplica } from './replica-fit.ts';
import type { StoredDeployment } from './store.ts';

/** A deployment as a pass reads it: as stored, with its revision (deployments.ts's deploymentRevision). */
export interface DeployedModel {
  readonly stored: StoredDeployment;
  readonly revision: string;
}

/** The fleet as the loop observed it for one pass. */
export interface FleetSnapshot {
  readonly runners: readonly FleetRunner[];
  /** Calls waiting for a replica of each deployed model (absent: none). */
  readonly waiting: ReadonlyMap<string, number>;
  /** Each deployed model's concurrency averages at the pass's time (absent: no samples). */
  readonly load: ReadonlyMap<string, ScaleLoad>;
}

/** The options a plan follows (the reconciler's, resolved); a start's retries are the book's. */
export interface PlanConfig extends AutoscalerWindows {
  readonly orderTimeout: number;
}

/** What a plan is given besides the deployments, the fleet and the book. */
export interface PlanContext {
  /** The pass's time, ms since the epoch. */
  readonly now: number;
  readonly config: PlanConfig;
  /** A new replica id for `model`: the plan's one source of fresh values. */
  readonly newReplica: (model: string) => string;
}

const NO_LOAD: ScaleLoad = Object.freeze({ stable: 0, panic: 0 });

/** The actions of one pass, in order; see the file's comment for the rules. */
export function plan(
  deployments: readonly DeployedModel[],
  fleet: FleetSnapshot,
  book: Book,
  context: PlanContext,
): ReconcileAction[] {
  return new Planner(deployments, fleet, book, context).run();
}

/** One pass's working state: the draft book and what the pass observed. */
class Planner {
  readonly #deployments: readonly DeployedModel[];
  readonly #deployed: ReadonlyMap<string, DeployedModel>;
  readonly #fleet: FleetSnapshot;
  readonly #byId: ReadonlyMap<string, FleetRunner>;
  readonly #takesOrders: ReadonlySet<string>;
  readonly #draft: Book;
  readonly #context: PlanContext;
  readonly #actions: ReconcileAction[] = [];

  constructor(deployments: readonly DeployedModel[], fleet: FleetSnapshot, book: Book, context: PlanContext) {
    this.#deployments = deployments;
    this.#deployed = new Map(deployments.map((d) => [d.stored.deployment.model, d]));
    this.#fleet = fleet;
    this.#byId = new Map(fleet.runners.map((r) => [r.id, r]));
    this.#takesOrders = new Set(fleet.runners.filter((r) => r.capacity?.orders === true).map((r) => r.id));
    this.#draft = book.clone();
    this.#context = context;
  }

  run(): ReconcileAction[] {
    if (!this.#draft.adopted) this.#adopt();
    this.#forgetDeleted();
    this.#readOrders();
    for (const deployed of this.#deployments) this.#reconcile(deployed);
    return this.#actions;
  }

  #act(action: ReconcileAction): void {
    this.#draft.apply(action);
    this.#actions.push(action);
  }

  #adopt(): void {
    const orders = [];
    for (const r of this.#fleet.runners) {
      const h = r.hosted;
      const deployed = h ? this.#deployed.get(h.model) : undefined;
      if (!h || !deployed || !this.#takesOrders.has(r.id) || (h.state !== 'starting' && h.state !== 'ready')) continue;
      const revision = h.revision ?? deployed.revision;
      orders.push({
        runner: r.id,
        order: { replica: h.replica, model: h.model, profile: deployed.stored.deployment.profile, revision },
      });
    }
    this.#act({ kind: 'adopt', orders, at: this.#context.now });
  }

  #forgetDeleted(): void {
    for (const model of this.#draft.models()) {
      if (this.#deployed.has(model)) continue;
      const stopped = this.#draft.orders().filter(([, e]) => e.order.model === model).length;
      this.#act({ kind: 'forget', model, stopped });
    }
  }

  /** Reads each order's fate from its runner: ready, failed, lost, or still on its way. */
  #readOrders(): void {
    const { now, config } = this.#context;
    for (const [runnerId, entry] of this.#draft.orders()) {
      const { replica, model } = entry.order;
      const runner = this.#byId.get(runnerId);
      const hosted = runner?.hosted?.replica === replica ? runner.hosted : undefined;
      if (hosted) this.#act({ kind: 'seen', runner: runnerId, replica, at: now });
      const start = this.#draft.pending(model).find((s) => s.op.inFlight?.replica === replica);
      if (start) {
        this.#attempt(start, runner, runnerId);
        continue;
      }
      // An established (or adopted) replica.
      const reportedAt = hosted ? now : entry.reportedAt;
      let lost: string | undefined;
      if (!runner) lost = 'runner lost: it left the fleet';
      else if (hosted?.state === 'failed') lost = hosted.reason ?? 'the runner reported the replica failed';
      else if (hosted?.state === 'stopped') lost = 'the runner reported the replica stopped';
      else if (!hosted && now - reportedAt >= config.orderTimeout)
        lost = `the runner has not reported the replica for ${Math.round((now - reportedAt) / 1000)} s`;
      if (lost !== undefined) this.#act({ kind: 'lost', model, replica, runner: runnerId, reason: lost });
    }
  }

  /** An attempt in flight: ready (and the replica it replaces stops), failed, or waiting. */
  #attempt(start: PendingStart, runner: FleetRunner | undefined, runnerId: string): void {
    const { now, config } = this.#context;
    const { op } = start;
    const inFlight = op.inFlight!;
    const { model } = op;
    const outcome = attemptOutcome(inFlight, runner, now, config.orderTimeout);
    if (outcome.kind === 'ready') {
      const replaces = op.replaces;
      this.#act({
        kind: 'ready',
        model,
        replica: inFlight.replica,
        runner: runnerId,
        startMs: Math.round(now - inFlight.orderedAt),
      });
      if (replaces) this.#replaced(replaces, inFlight.replica);
    } else if (outcome.kind === 'failed') {
      this.#act({
        kind: 'start-failed',
        model,
        replica: inFlight.replica,
        runner: runnerId,
        attempt: op.attempts.length + 1,
        reason: outcome.reason,
        output: outcome.output,
        at: now,
      });
      // The book dropped the operation when that was its last attempt (its limits, startAttempts).
      if (!this.#draft.pending(model).some((s) => s.id === start.id)) this.#deadLetter(model, start, outcome.reason);
    }
  }

  #replaced(target: ReplacedReplica, by: string): void {
    const entry = this.#draft.order(target.runner);
    if (entry?.order.replica !== target.replica) return;
    this.#act({ kind: 'replaced', model: entry.order.model, replica: target.replica, runner: target.runner, by });
  }

  #deadLetter(model: string, start: PendingStart, reason: string): void {
    const attempts = [...start.op.attempts];
    const stored = this.#deployed.get(model)?.stored;
    const why = `a start failed ${attempts.length} times (last: ${reason}); no replica starts until the deployment changes (PUT it again)`;
    this.#act({
      kind: 'dead-letter',
      model,
      attempts,
      at: this.#context.now,
      blocked: stored ? { updatedAt: stored.updatedAt, reason: why } : undefined,
    });
  }

  /** One deployment: decide the count, start or stop to reach it, roll, place due starts. */
  #reconcile({ stored, revision }: DeployedModel): void {
    const { deployment } = stored;
    const { model } = deployment;
    const block = this.#draft.blocked(model);
    if (block && block.updatedAt !== stored.updatedAt) this.#act({ kind: 'unblock', model });
    const blocked = this.#draft.blocked(model) !== undefined;
    this.#stopOutdatedStarts(model, revision);
    const ordered = this.#counted(model, revision);
    const ready = ordered.filter((r) => r.state === 'ready').length;
    const starting = ordered.filter((r) => r.state === 'starting').length;
    const current = ready + starting;
    const decision = this.#size(deployment, ready, current);
    const waitingStarts = this.#draft.pending(model).filter((s) => !s.op.inFlight && !s.op.replaces);
    const intended = current + waitingStarts.length;
    if (decision.wanted > intended && !blocked) this.#scaleUp(stored, intended, decision);
    else if (decision.wanted < intended && waitingStarts.length > 0)
      this.#dropUnwanted(stored, waitingStarts, intended, decision);
    if (decision.scaleDown && decision.wanted < current) this.#stopOne(model, ordered, decision.downReason);
    if (blocked) {
      // A blocked deployment starts nothing; its pending retries were dead-lettered with it.
      this.#act({ kind: 'fit', model, unplaced: undefined });
      return;
    }
    this.#roll(model, revision);
    this.#placeDue(deployment, revision);
  }

  /** The replicas that count: this leader's orders, a replacement's not before the one it replaces stops. */
  #counted(model: string, revision: string): ReplicaStatus[] {
    const replicas = replicasOf(this.#draft, model, this.#fleet.runners, revision);
    const pending = this.#draft.pending(model);
    const surging = new Set(pending.flatMap((s) => (s.op.replaces && s.op.inFlight ? [s.op.inFlight.replica] : [])));
    return replicas.filter((r) => this.#draft.order(r.runner)?.order.replica === r.replica && !surging.has(r.replica));
  }

  #size(deployment: Deployment, ready: number, current: number): ScaleDecision {
    const { model } = deployment;
    const { now, config } = this.#context;
    const input = { now, deployment, ready, current, waiting: this.#fleet.waiting.get(model) ?? 0 };
    const { decision, memory } = decideScale(
      config,
      this.#fleet.load.get(model) ?? NO_LOAD,
      this.#draft.memory(model),
      input,
    );
    this.#act({ kind: 'size', model, wanted: decision.wanted, memory });
    return decision;
  }

  #scaleUp(stored: StoredDeployment, intended: number, decision: ScaleDecision): void {
    const { model } = stored.deployment;
    const at = this.#context.now;
    for (let i = intended; i < decision.wanted; i++) {
      const resting = this.#draft.revivable(model, stored.updatedAt);
      this.#act(
        resting === undefined
          ? { kind: 'start', model, id: this.#draft.nextId, at }
          : { kind: 'revive', model, id: resting },
      );
    }
    this.#scale(model, intended, decision.wanted, decision.reason);
  }

  /** Starts not yet ordered are intentions, not replicas: the unwanted ones go at once. */
  #dropUnwanted(
    stored: StoredDeployment,
    waiting: readonly PendingStart[],
    intended: number,
    decision: ScaleDecision,
  ): void {
    const { model } = stored.deployment;
    const drop = waiting.slice(-Math.min(waiting.length, intended - decision.wanted));
    for (const { id, op } of drop) {
      const failedAttempts = op.attempts.length;
      this.#act({
        kind: 'drop',
        model,
        id,
        failedAttempts,
        reason: decision.reason,
        rest: failedAttempts > 0 ? stored.updatedAt : undefined,
      });
    }
    this.#scale(model, intended, intended - drop.length, decision.reason);
  }

  #scale(model: string, from: number, to: number, reason: string): void {
    if (from !== to) this.#act({ kind: 'scale', model, from, to, reason, at: this.#context.now });
  }

  /**
   * Stops every replica of `model` ordered at an older revision that is not ready yet (a
   * replacement's too): it serves nothing, so a current one is started in its place at once.
   */
  #stopOutdatedStarts(model: string, revision: string): void {
    for (const [runnerId, { order }] of this.#draft.orders()) {
      if (order.model !== model || order.revision === revision) continue;
      const hosted = this.#byId.get(runnerId)?.hosted;
      if (hosted?.replica === order.replica && hosted.state === 'ready') continue;
      this.#act({
        kind: 'stop',
        model,
        replica: order.replica,
        runner: runnerId,
        state: 'starting',
        reason: 'the deployment changed before it was ready',
      });
    }
  }

  /** Stops one replica: the newest starting one, else a ready one, outdated before current, the least loaded first. */
  #stopOne(model: string, ordered: readonly ReplicaStatus[], reason: string): void {
    const load = this.#load();
    const startingOnes = ordered
      .filter((r) => r.state === 'starting')
      .sort((a, b) => b.since - a.since || (a.runner < b.runner ? -1 : 1));
    // An outdated replica goes before a current one: it was to be replaced anyway.
    const stale = (r: ReplicaStatus): number => (r.outdated ? 0 : 1);
    const readyOnes = ordered
      .filter((r) => r.state === 'ready')
      .sort(
        (a, b) =>
          stale(a) - stale(b) ||
          (load.get(a.runner) ?? 0) - (load.get(b.runner) ?? 0) ||
          (a.runner < b.runner ? -1 : 1),
      );
    const victim = startingOnes[0] ?? readyOnes[0];
    if (!victim) return;
    const current = startingOnes.length + readyOnes.length;
    this.#act({ kind: 'stop', model, replica: victim.replica, runner: victim.runner, state: victim.state, reason });
    this.#scale(model, current, current - 1, reason);
  }

  /**
   * Replaces the ready replicas of an older revision, one at a time: a start that replaces the
   * least loaded of them once the model has no start under way and no replica starting. A
   * replacement not yet ordered whose outdated replica is gone meanwhile is abandoned.
   */
  #roll(model: string, revision: string): void {
    for (const { id, op } of [...this.#draft.pending(model)]) {
      const target = op.replaces;
      if (target && !op.inFlight && this.#draft.order(target.runner)?.order.replica !== target.replica)
        this.#act({ kind: 'abandon', model, id });
    }
    if (this.#draft.pending(model).length > 0) return;
    const replicas = replicasOf(this.#draft, model, this.#fleet.runners, revision);
    if (replicas.some((r) => r.state === 'starting')) return;
    const load = this.#load();
    const outdated = replicas
      .filter((r) => r.state === 'ready' && this.#draft.order(r.runner)?.order.replica === r.replica && r.outdated)
      .sort((a, b) => (load.get(a.runner) ?? 0) - (load.get(b.runner) ?? 0) || (a.runner < b.runner ? -1 : 1));
    const target = outdated[0];
    if (target)
      this.#act({
        kind: 'replace',
        model,
        id: this.#draft.nextId,
        at: this.#context.now,
        target: { runner: target.runner, replica: target.replica },
        outdated: outdated.length,
      });
  }

  /** Orders every due start onto a runner, or records why none fits. */
  #placeDue(deployment: Deployment, revision: string): void {
    const { model } = deployment;
    const { now, newReplica } = this.#context;
    const runners = this.#fleet.runners;
    let unplaced: Readonly<Record<string, string>> | undefined;
    for (const { id, op } of [...this.#draft.pending(model)]) {
      if (!op.due(now)) continue;
      const placement = placeReplica({
        deployment,
        runners,
        occupants: occupantsOf(this.#draft, runners),
        failedOn: op.failedOn,
      });
      if (placement.kind === 'unplaced') {
        unplaced = placement.reasons;
        const target = op.replaces;
        // No room beside it: the outdated replica drains and stops first, and the start, plain
        // from here on, takes its runner at a later pass.
        if (target && this.#mustGoFirst(target, deployment)) this.#act({ kind: 'go-first', model, id, target });
        continue;
      }
      const order = { replica: newReplica(model), model, profile: deployment.profile, revision };
      this.#act({
        kind: 'order',
        model,
        id,
        runner: placement.runner.id,
        order,
        at: now,
        attempt: op.attempts.length + 1,
      });
    }
    this.#act({ kind: 'fit', model, unplaced });
  }

  /**
   * True when a replacement finding no room must let its outdated replica stop first: no runner
   * is about to be free, and the new one fits on that replica's runner once it is.
   */
  #mustGoFirst(target: ReplacedReplica, deployment: Deployment): boolean {
    const held = this.#draft.order(target.runner)?.order.profile.gpus;
    const runner = this.#byId.get(target.runner);
    return held !== undefined && runner !== undefined && !this.#freeing() && fitsOnceFreed(runner, held, deployment);
  }

  /**
   * True when a runner that takes orders is stopping an engine it was not re-ordered (draining):
   * it is free soon, so a replacement waits for it rather than stop a replica first.
   */
  #freeing(): boolean {
    return this.#fleet.runners.some(
      (r) =>
        r.placeable &&
        this.#takesOrders.has(r.id) &&
        r.hosted !== undefined &&
        r.hosted.state !== 'stopped' &&
        r.hosted.state !== 'failed' &&
        !this.#draft.order(r.id),
    );
  }

  #load(): Map<string, number> {
    return new Map(this.#fleet.runners.map((r) => [r.id, r.slotsInUse]));
  }
}
