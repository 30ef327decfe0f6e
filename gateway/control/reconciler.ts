/**
 * The reconciler: the loop that keeps each deployment's replicas at what its load wants. It
 * orders runners that take orders to host a replica (an {@link EngineOrder} in their heartbeat
 * answer) or to host nothing (`null`: drain, then stop), and reads back what they report.
 *
 * Rules (docs/operations.md, "The reconciler"):
 * - Leadership: every pass begins with `lease.hold()`. A gateway not holding the lease gives
 *   no orders (`orderFor` answers undefined: runners keep what they host). The first pass after
 *   taking the lease adopts what runners report hosting (starting or ready replicas of deployed
 *   models become this leader's orders, with their replica ids) before deciding anything, so a
 *   new leader never stops a healthy fleet. A hosted replica seen later without an order of
 *   this leader gets `null`.
 * - Replicas of model M: orders issued for M (reported or not yet) and runners reporting an
 *   engine of M. States: starting (ordered, or reported starting), ready, draining (reported
 *   draining, or hosting with a `null` order), failed.
 * - Concurrency of M, sampled every `sampleInterval`: slots in use on the runners hosting M plus
 *   calls for M waiting in this gateway's queue. The wanted count follows gateway/control/autoscaler.ts.
 * - Scale up at once: one start operation per missing replica, each placed by
 *   gateway/control/replica-fit.ts. Scale down one replica per pass once wanted has been below the
 *   current count for the deployment's scaleDownDelay: a starting replica before a ready one,
 *   the least loaded ready one first; its runner's order becomes `null`. Scale to zero is the
 *   same rule with minReplicas 0. A replica of a model with no deployment (deleted) gets `null`.
 * - Failed starts follow gateway/control/operations.ts: retried with backoff on another runner
 *   where one fits; after `startAttempts` the operation is dead-lettered with every attempt and
 *   the deployment is blocked (no new start) until it changes (a PUT: its updatedAt). A failed
 *   replica's runner gets `null`, which clears it. Every failure is logged with its reason;
 *   profile args and env values never are. A start with failed attempts that scale-down drops
 *   as unwanted rests: the next scale-up of the same deployment takes it back, attempts and
 *   backoff included, so demand that stops and comes back cannot restart a failing engine at
 *   once. While a start has failed and nothing else of the
 *   model starts or serves, `startFailure` says so (its reason without args or env values), so
 *   the calls waiting for a replica are answered at once rather than at their deadline.
 * - A replica whose runner stops reporting it for `orderTimeout` (the runner restarted without
 *   it) or leaves the fleet is forgotten; the count drops and a new start follows.
 * - A changed deployment rolls: every order carries the deployment's revision (its profile and
 *   runner labels, deployments.ts's deploymentRevision), and runners report it back. A replica of
 *   an older revision that is still starting stops at once (the scale-up starts a current one).
 *   Ready ones are replaced one at a time: a current replica starts beside the outdated one,
 *   uncounted until it is ready, and then the outdated one stops, so the ready count never dips.
 *   When no runner has room beside it, the outdated replica stops first and its runner takes the
 *   new one, if the new one would fit there. A replacement that keeps failing is dead-lettered
 *   like any start, and the outdated replicas keep serving.
 */
import { checksFor, drawIndex } from '../../placer/kernel/index.ts';
import { GatewayConfigError } from '../errors.ts';
import type { EngineOrder } from '../../runner/protocol/index.ts';
import { ModelAutoscaler } from './autoscaler.ts';
import type { FleetRunner } from './fleet.ts';
import { DeadLetters, StartOperation, attemptOutcome, startFailureOf } from './operations.ts';
import type { ReplacedReplica, StartAttempt, StartFailureView } from './operations.ts';
import { SCALE_EVENTS_KEPT, resolveReconcilerOptions, systemReconcilerTimers } from './reconciler-options.ts';
import type {
  ReconcilerConfig,
  ReconcilerDeploymentStatus,
  ReconcilerEvent,
  ReconcilerInit,
  ReconcilerTimers,
  ReplicaState,
  ReplicaStatus,
  ScaleEventRecord,
} from './reconciler-options.ts';
import { deploymentRevision } from './deployments.ts';
import type { Deployment } from './deployments.ts';
import { fitsOnceFreed, placeReplica } from './replica-fit.ts';
import type { Occupant } from './replica-fit.ts';
import type { StoredDeployment } from './store.ts';

const check = checksFor(GatewayConfigError);

/** An order this leader gave a runner. */
interface OrderEntry {
  readonly order: EngineOrder;
  /** When it was ordered (or adopted). */
  readonly at: number;
  /** When the runner last reported the replica (the order's time until it does). */
  reportedAt: number;
}

/**
 * A replica id: a short slug of the model's last path segment and 8 random hex digits, within
 * the wire's id rule (`Llama-3.1-8B` -> `llama-3-1-8b-0f3a9c21`).
 */
export function replicaId(model: string, random: () => number): string {
  const slug = (model.split('/').pop() ?? '')
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .slice(0, 40)
    .replace(/^-+|-+$/g, '');
  return `${slug || 'replica'}-${drawIndex(random, 2 ** 32).toString(16).padStart(8, '0')}`;
}

/** Keeps every deployment's replicas at what its load wants, while this gateway holds the lease. */
export class Reconciler {
  readonly #deps: Required<Pick<ReconcilerInit, 'store' | 'fleet' | 'lease' | 'clock' | 'logger'>>;
  readonly #config: ReconcilerConfig;
  readonly #events: ((event: ReconcilerEvent) => void) | undefined;
  readonly #random: () => number;
  readonly #timers: ReconcilerTimers;

  #leading = false;
  /** True once the first pass after taking the lease has adopted the fleet: orders may be answered. */
  #adopted = false;
  #deployed = new Map<string, StoredDeployment>();
  /** Each deployed model's revision (deploymentRevision), computed once per list read. */
  #revisions = new Map<string, string>();
  /** Runner ids that took orders at the last pass. */
  #takesOrders = new Set<string>();
  readonly #orders = new Map<string, OrderEntry>();
  readonly #ops = new Map<string, StartOperation[]>();
  readonly #scalers = new Map<string, ModelAutoscaler>();
  readonly #wanted = new Map<string, number>();
  readonly #unplaced = new Map<string, Readonly<Record<string, string>>>();
  /**
   * Start operations dropped as unwanted after failed attempts, by model, with the deployment's
   * updatedAt then: the next scale-up takes them back, so that a demand that comes and goes
   * (calls answered GW_DEPLOYMENT_FAILED stop waiting) cannot restart a failing engine at once.
   */
  readonly #resting = new Map<string, { readonly updatedAt: number; readonly ops: StartOperation[] }>();
  /** Blocked deployments: the updatedAt they were blocked at, and why. */
  readonly #blocked = new Map<string, { readonly updatedAt: number; readonly reason: string }>();
  readonly #deadLetters: DeadLetters;
  readonly #scaleEvents = new Map<string, ScaleEventRecord[]>();

  #running: Promise<void> | undefined;
  #queued: Promise<void> | undefined;
  #passTimer: unknown;
  #sampleTimer: unknown;
  #pokeTimer: unknown;
  #started = false;
  #closed = false;

  /** @throws {@link GatewayConfigError} naming the first bad option. */
  constructor(init: ReconcilerInit) {
    const { store, fleet, lease, clock, logger, events, random, timers, ...options } = init;
    this.#config = resolveReconcilerOptions(options);
    check.logger('logger', logger);
    check.fn('clock.now', clock?.now);
    check.fn('store.list', store?.list);
    check.fn('fleet.runners', fleet?.runners);
    check.fn('lease.hold', lease?.hold);
    if (events !== undefined) check.fn('events', events);
    if (random !== undefined) check.fn('random', random);
    this.#deps = { store, fleet, lease, clock, logger };
    this.#events = events;
    this.#random = random ?? Math.random;
    this.#timers = timers ?? systemReconcilerTimers;
    this.#deadLetters = new DeadLetters(this.#config.deadLetterKeep);
  }

  /** The resolved options. */
  get config(): ReconcilerConfig {
    return this.#config;
  }

  /** True while this gateway holds the lease (as of the last pass). */
  get leading(): boolean {
    return this.#leading;
  }

  /** Schedules a pass at once and every `period` after, and a concurrency sample every `sampleInterval`. */
  start(): void {
    if (this.#started || this.#closed) return;
    this.#started = true;
    const passLoop = (delay: number): void => {
      this.#passTimer = this.#timers.setTimeout(() => {
        void this.pass().then(() => {
          if (!this.#closed) passLoop(this.#config.period);
        });
      }, delay);
    };
    const sampleLoop = (): void => {
      this.#sampleTimer = this.#timers.setTimeout(() => {
        this.sample();
        if (!this.#closed) sampleLoop();
      }, this.#config.sampleInterval);
    };
    passLoop(0);
    sampleLoop();
  }

  /** Stops the timers, lets a running pass finish and releases the lease. Idempotent. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    for (const timer of [this.#passTimer, this.#sampleTimer, this.#pokeTimer]) if (timer !== undefined) this.#timers.clearTimeout(timer);
    await (this.#queued ?? this.#running);
    try {
      await this.#deps.lease.release();
    } catch (error) {
      this.#deps.logger.warn('reconciler lease release failed', { error: (error as Error).message });
    }
    this.#lose('closed');
  }

  /** Asks for a pass soon: many pokes before it runs make one pass. The activator pokes for a call with no replica. */
  poke(model: string): void {
    if (this.#closed || this.#pokeTimer !== undefined) return;
    this.#deps.logger.debug('reconciler poked', { model });
    this.#pokeTimer = this.#timers.setTimeout(() => {
      this.#pokeTimer = undefined;
      void this.pass();
    }, 0);
  }

  /**
   * One pass now; a pass asked for while one runs follows it (once, for every ask meanwhile).
   * Never rejects: a failed pass is logged and the next one tries again.
   */
  pass(): Promise<void> {
    if (this.#queued) return this.#queued;
    if (this.#running) {
      this.#queued = this.#running.then(() => {
        this.#queued = undefined;
        return this.pass();
      });
      return this.#queued;
    }
    this.#running = this.#passOnce()
      .catch((error: unknown) => this.#deps.logger.error('reconciler pass failed', { error: (error as Error).message }))
      .finally(() => {
        this.#running = undefined;
      });
    return this.#running;
  }

  /** Takes one concurrency sample of every deployed model (start() does it every sampleInterval). */
  sample(): void {
    const { fleet, clock } = this.#deps;
    const now = clock.now();
    const runners = fleet.runners();
    for (const [model, { deployment }] of this.#deployed) {
      let concurrency = fleet.waiting(model);
      let ready = 0;
      for (const r of runners) {
        if (r.hosted?.model !== model || r.hosted.state === 'stopped') continue;
        concurrency += r.slotsInUse;
        if (r.hosted.state === 'ready') ready++;
      }
      const scaler = this.#scaler(model);
      scaler.sample(now, concurrency);
      // A burst past the panic threshold is acted on now, not at the next period's pass.
      const panic = scaler.average(now, this.#config.panicWindow);
      const under = (this.#wanted.get(model) ?? 0) < deployment.maxReplicas;
      if (this.#leading && under && panic >= this.#config.panicThreshold * deployment.targetConcurrency * Math.max(ready, 1)) this.poke(model);
    }
  }

  /**
   * The order for a runner's heartbeat answer: undefined when this gateway does not lead, has
   * not finished its first pass since taking the lease, or the runner takes no orders (as of the
   * last pass); else the runner's order, or null for none.
   */
  orderFor(runnerId: string): EngineOrder | null | undefined {
    if (!this.#leading || !this.#adopted || !this.#takesOrders.has(runnerId)) return undefined;
    return this.#orders.get(runnerId)?.order ?? null;
  }

  /** The deployed models, as of the last list read. */
  deployedModels(): string[] {
    return [...this.#deployed.keys()];
  }

  /** True when `model` has a deployment, as of the last list read. */
  isDeployed(model: string): boolean {
    return this.#deployed.has(model);
  }

  /**
   * Why `model` cannot get a replica now, for the calls waiting for one ({@link startFailureOf}
   * over its status): undefined while one may still come, or when this gateway does not lead.
   */
  startFailure(model: string): StartFailureView | undefined {
    const stored = this.#deployed.get(model);
    if (!this.#leading || !this.#adopted || !stored) return undefined;
    return startFailureOf(this.status(model), stored.deployment.profile, this.#deps.clock.now());
  }

  /** The deployment of `model`, as of the last list read. */
  deployment(model: string): Deployment | undefined {
    return this.#deployed.get(model)?.deployment;
  }

  /** A deployment's status now: replicas from the runners' reports (and this leader's orders). */
  status(model: string): ReconcilerDeploymentStatus {
    const leading = this.#leading && this.#adopted;
    const replicas = this.#replicas(model, this.#deps.fleet.runners(), leading);
    const count = (state: ReplicaState): number => replicas.filter((r) => r.state === state).length;
    const outdated = replicas.filter((r) => r.outdated && r.state !== 'draining').length;
    const base = { starting: count('starting'), ready: count('ready'), draining: count('draining'), outdated, replicas };
    if (!leading) return { reconciler: 'following', wanted: 0, ...base, pending: [], deadLettered: [], events: [] };
    const unplaced = this.#unplaced.get(model);
    const blocked = this.#blocked.get(model);
    return {
      reconciler: 'leading',
      wanted: this.#wanted.get(model) ?? 0,
      ...base,
      ...(unplaced ? { unplaced: { reason: `no runner fits a replica of ${model}`, runners: unplaced } } : {}),
      pending: (this.#ops.get(model) ?? []).map((op) => ({
        ...(op.inFlight ? { replica: op.inFlight.replica } : {}),
        attempts: op.attempts,
        nextAttemptAt: op.nextAttemptAt,
        lastReason: op.attempts.at(-1)?.reason ?? (op.inFlight ? `ordered on runner ${op.inFlight.runner}` : unplaced ? 'no runner fits' : 'not ordered yet'),
      })),
      deadLettered: this.#deadLetters.of(model).map(({ at, attempts }) => ({ at, attempts })),
      ...(blocked ? { blocked: blocked.reason } : {}),
      events: [...(this.#scaleEvents.get(model) ?? [])],
    };
  }

  async #passOnce(): Promise<void> {
    const { store, fleet, lease, clock, logger } = this.#deps;
    // A closed reconciler never takes the lease again.
    if (this.#closed) return;
    let held: boolean;
    try {
      held = await lease.hold();
    } catch (error) {
      logger.warn('reconciler lease check failed', { error: (error as Error).message });
      held = false;
    }
    // Every gateway reads the list: isDeployed and status answer on followers too.
    let list: readonly StoredDeployment[];
    try {
      list = await store.list();
    } catch (error) {
      logger.warn('reconciler could not read deployments', { error: (error as Error).message });
      if (!held) this.#lose('lease not held');
      return;
    }
    this.#deployed = new Map(list.map((s) => [s.deployment.model, s]));
    this.#revisions = new Map(list.map((s) => [s.deployment.model, deploymentRevision(s.deployment)]));
    for (const model of this.#scalers.keys()) if (!this.#deployed.has(model)) this.#scalers.delete(model);
    if (!held || this.#closed) {
      this.#lose('lease not held');
      return;
    }
    const now = clock.now();
    const runners = fleet.runners();
    this.#takesOrders = new Set(runners.filter((r) => r.capacity?.orders === true).map((r) => r.id));
    if (!this.#leading) this.#gain(runners, now);
    const byId = new Map(runners.map((r) => [r.id, r]));
    this.#forgetDeleted(runners);
    this.#checkOrders(byId, now);
    for (const stored of list) this.#reconcile(stored, runners, now);
    this.#adopted = true;
  }

  /** Took the lease: adopt what runners host before deciding anything. */
  #gain(runners: readonly FleetRunner[], now: number): void {
    this.#leading = true;
    this.#adopted = false;
    this.#clearLeaderState();
    let adopted = 0;
    for (const r of runners) {
      const h = r.hosted;
      const stored = h ? this.#deployed.get(h.model) : undefined;
      if (!h || !stored || !this.#takesOrders.has(r.id) || (h.state !== 'starting' && h.state !== 'ready')) continue;
      // A runner older than revisions reports none: its replica is taken as current.
      const revision = h.revision ?? this.#revisions.get(h.model)!;
      this.#orders.set(r.id, { order: { replica: h.replica, model: h.model, profile: stored.deployment.profile, revision }, at: now, reportedAt: now });
      adopted++;
    }
    this.#deps.logger.info('reconciler lease taken', { adoptedReplicas: adopted });
    this.#emit({ kind: 'leader', leading: true });
  }

  #lose(why: string): void {
    if (!this.#leading) return;
    this.#leading = false;
    this.#adopted = false;
    this.#clearLeaderState();
    this.#deps.logger.warn('reconciler lease lost', { why });
    this.#emit({ kind: 'leader', leading: false });
  }

  #clearLeaderState(): void {
    this.#orders.clear();
    this.#ops.clear();
    this.#resting.clear();
    this.#wanted.clear();
    this.#unplaced.clear();
    for (const scaler of this.#scalers.values()) scaler.reset();
  }

  /** Drops everything of models with no deployment: their replicas get null. */
  #forgetDeleted(runners: readonly FleetRunner[]): void {
    const gone = new Set<string>([...this.#orders.values()].map((e) => e.order.model));
    for (const model of [...this.#ops.keys(), ...this.#resting.keys(), ...this.#scalers.keys(), ...this.#scaleEvents.keys(), ...this.#blocked.keys(), ...this.#deadLetters.models()]) gone.add(model);
    for (const r of runners) if (r.hosted && this.#takesOrders.has(r.id)) gone.add(r.hosted.model);
    for (const model of gone) {
      if (this.#deployed.has(model)) continue;
      let stopped = 0;
      for (const [runner, entry] of this.#orders) {
        if (entry.order.model !== model) continue;
        this.#orders.delete(runner);
        stopped++;
      }
      if (stopped > 0) {
        this.#deps.logger.info('replicas of a deleted deployment stopped', { model, replicas: stopped });
        this.#emit({ kind: 'scale', model, from: stopped, to: 0, reason: 'deployment deleted' });
      }
      for (const map of [this.#ops, this.#resting, this.#scalers, this.#wanted, this.#unplaced, this.#blocked, this.#scaleEvents]) map.delete(model);
      this.#deadLetters.forget(model);
    }
  }

  /** Reads each order's fate from its runner: ready, failed, lost, or still on its way. */
  #checkOrders(byId: ReadonlyMap<string, FleetRunner>, now: number): void {
    const { logger } = this.#deps;
    for (const [runnerId, entry] of [...this.#orders]) {
      const { replica, model } = entry.order;
      const runner = byId.get(runnerId);
      const hosted = runner?.hosted?.replica === replica ? runner.hosted : undefined;
      if (hosted) entry.reportedAt = now;
      const ops = this.#ops.get(model) ?? [];
      const op = ops.find((o) => o.inFlight?.replica === replica);
      if (op) {
        const outcome = attemptOutcome(op.inFlight!, runner, now, this.#config.orderTimeout);
        if (outcome.kind === 'ready') {
          ops.splice(ops.indexOf(op), 1);
          const startMs = Math.round(now - op.inFlight!.orderedAt);
          logger.info('replica ready', { model, replica, runner: runnerId, startMs });
          this.#emit({ kind: 'ready', model, replica, runner: runnerId, startMs });
          if (op.replaces) this.#replaced(op.replaces, replica);
        } else if (outcome.kind === 'failed') {
          this.#orders.delete(runnerId);
          this.#failAttempt(op, outcome.reason, outcome.output, now);
        }
        continue;
      }
      // An established (or adopted) replica.
      let lost: string | undefined;
      if (!runner) lost = 'runner lost: it left the fleet';
      else if (hosted?.state === 'failed') lost = hosted.reason ?? 'the runner reported the replica failed';
      else if (hosted?.state === 'stopped') lost = 'the runner reported the replica stopped';
      else if (!hosted && now - entry.reportedAt >= this.#config.orderTimeout) lost = `the runner has not reported the replica for ${Math.round((now - entry.reportedAt) / 1000)} s`;
      if (lost === undefined) continue;
      this.#orders.delete(runnerId);
      logger.warn('replica failed', { model, replica, runner: runnerId, reason: lost });
      this.#emit({ kind: 'failed', model, replica, runner: runnerId, reason: lost });
    }
  }

  #failAttempt(op: StartOperation, reason: string, output: readonly string[] | undefined, now: number): void {
    const { logger } = this.#deps;
    const { model } = op;
    const { runner, replica } = op.inFlight!;
    const attempt = op.attempts.length + 1;
    logger.warn('replica start failed', { model, replica, runner, attempt, reason });
    this.#emit({ kind: 'failed', model, replica, runner, reason });
    if (op.fail(reason, output, now, this.#config) === 'retry') return;
    const ops = this.#ops.get(model) ?? [];
    ops.splice(ops.indexOf(op), 1);
    const attempts: readonly StartAttempt[] = [...op.attempts];
    this.#deadLetters.add({ model, at: now, attempts });
    const stored = this.#deployed.get(model);
    const why = `a start failed ${attempts.length} times (last: ${reason}); no replica starts until the deployment changes (PUT it again)`;
    if (stored) this.#blocked.set(model, { updatedAt: stored.updatedAt, reason: why });
    logger.error('start operation dead-lettered', { model, attempts: attempts.length, reasons: attempts.map((a) => `${a.runner}: ${a.reason}`) });
    this.#emit({ kind: 'dead-letter', model, attempts });
  }

  /** One deployment's pass: decide the count, start or stop to reach it, place due starts. */
  #reconcile(stored: StoredDeployment, runners: readonly FleetRunner[], now: number): void {
    const { deployment } = stored;
    const { model } = deployment;
    const { logger, fleet } = this.#deps;
    const block = this.#blocked.get(model);
    if (block && block.updatedAt !== stored.updatedAt) {
      this.#blocked.delete(model);
      logger.info('deployment unblocked', { model });
    }
    const blocked = this.#blocked.has(model);
    const revision = this.#revisions.get(model)!;
    const ops = this.#ops.get(model) ?? [];
    this.#ops.set(model, ops);
    this.#stopOutdatedStarts(model, revision, ops, runners);
    const replicas = this.#replicas(model, runners, true);
    // A replacement's replica counts once it is ready and the one it replaces stops, not before.
    const surging = new Set(ops.flatMap((op) => (op.replaces && op.inFlight ? [op.inFlight.replica] : [])));
    const ordered = replicas.filter((r) => this.#orders.get(r.runner)?.order.replica === r.replica && !surging.has(r.replica));
    const ready = ordered.filter((r) => r.state === 'ready').length;
    const starting = ordered.filter((r) => r.state === 'starting').length;
    const current = ready + starting;
    const decision = this.#scaler(model).decide({ now, deployment, ready, current, waiting: fleet.waiting(model) });
    this.#wanted.set(model, decision.wanted);

    const waitingOps = ops.filter((op) => !op.inFlight && !op.replaces);
    const intended = current + waitingOps.length;
    if (decision.wanted > intended && !blocked) {
      for (let i = intended; i < decision.wanted; i++) ops.push(this.#revive(model, stored.updatedAt) ?? new StartOperation(model, now));
      this.#scale(model, intended, decision.wanted, decision.reason, now);
    } else if (decision.wanted < intended && waitingOps.length > 0) {
      // Starts not yet ordered are intentions, not replicas: drop the unwanted ones at once.
      const drop = waitingOps.slice(-Math.min(waitingOps.length, intended - decision.wanted));
      for (const op of drop) {
        ops.splice(ops.indexOf(op), 1);
        if (op.attempts.length > 0) this.#rest(model, stored.updatedAt, op);
        logger.info('start operation dropped', { model, failedAttempts: op.attempts.length, reason: decision.reason });
      }
      this.#scale(model, intended, intended - drop.length, decision.reason, now);
    }
    if (decision.scaleDown && decision.wanted < current) this.#stopOne(model, ordered, runners, decision.downReason, now);
    if (blocked) {
      // A blocked deployment starts nothing; its pending retries were dead-lettered with it.
      this.#unplaced.delete(model);
      return;
    }
    this.#roll(model, ops, runners, now);
    this.#placeDue(stored, ops, runners, now);
  }

  /** Keeps a dropped operation that had failed attempts for the next scale-up of the same deployment. */
  #rest(model: string, updatedAt: number, op: StartOperation): void {
    const entry = this.#resting.get(model);
    if (entry?.updatedAt === updatedAt) entry.ops.push(op);
    else this.#resting.set(model, { updatedAt, ops: [op] });
  }

  /**
   * A resting operation of `model` for a scale-up, with its attempts and its backoff; none once
   * the deployment changed (a PUT is a fresh start).
   */
  #revive(model: string, updatedAt: number): StartOperation | undefined {
    const entry = this.#resting.get(model);
    if (entry === undefined) return undefined;
    const op = entry.updatedAt === updatedAt ? entry.ops.pop() : undefined;
    if (entry.updatedAt !== updatedAt || entry.ops.length === 0) this.#resting.delete(model);
    return op;
  }

  /**
   * Stops every replica of `model` ordered at an older revision that is not ready yet (a
   * replacement's too): it serves nothing, so a current one is started in its place at once.
   */
  #stopOutdatedStarts(model: string, revision: string, ops: StartOperation[], runners: readonly FleetRunner[]): void {
    const byId = new Map(runners.map((r) => [r.id, r]));
    for (const [runnerId, { order }] of [...this.#orders]) {
      if (order.model !== model || order.revision === revision) continue;
      const hosted = byId.get(runnerId)?.hosted;
      if (hosted?.replica === order.replica && hosted.state === 'ready') continue;
      this.#orders.delete(runnerId);
      const op = ops.find((o) => o.inFlight?.replica === order.replica);
      if (op) ops.splice(ops.indexOf(op), 1);
      this.#deps.logger.info('replica stopping', { model, replica: order.replica, runner: runnerId, state: 'starting', reason: 'the deployment changed before it was ready' });
    }
  }

  /**
   * Replaces the ready replicas of an older revision, one at a time: orders a start that
   * replaces the least loaded of them once the model has no start under way (a replacement, a
   * scale-up, a start in place) and no replica starting. A replacement not yet ordered whose
   * outdated replica is gone meanwhile (scaled down, failed) is dropped.
   */
  #roll(model: string, ops: StartOperation[], runners: readonly FleetRunner[], now: number): void {
    for (const op of [...ops]) {
      const target = op.replaces;
      if (target && !op.inFlight && this.#orders.get(target.runner)?.order.replica !== target.replica) ops.splice(ops.indexOf(op), 1);
    }
    if (ops.length > 0) return;
    const replicas = this.#replicas(model, runners, true);
    if (replicas.some((r) => r.state === 'starting')) return;
    const load = new Map(runners.map((r) => [r.id, r.slotsInUse]));
    const outdated = replicas
      .filter((r) => r.state === 'ready' && this.#orders.get(r.runner)?.order.replica === r.replica && r.outdated)
      .sort((a, b) => (load.get(a.runner) ?? 0) - (load.get(b.runner) ?? 0) || (a.runner < b.runner ? -1 : 1));
    const target = outdated[0];
    if (!target) return;
    ops.push(new StartOperation(model, now, { runner: target.runner, replica: target.replica }));
    this.#deps.logger.info('replica replacing', { model, replica: target.replica, runner: target.runner, outdated: outdated.length, reason: 'the deployment changed' });
  }

  /** A replacement is ready: the outdated replica it replaces stops, if it is still there. */
  #replaced(target: ReplacedReplica, by: string): void {
    const entry = this.#orders.get(target.runner);
    if (entry?.order.replica !== target.replica) return;
    this.#orders.delete(target.runner);
    const { model } = entry.order;
    this.#deps.logger.info('replica replaced', { model, replica: target.replica, runner: target.runner, by });
    this.#emit({ kind: 'replaced', model, replica: target.replica, runner: target.runner, by });
  }

  /**
   * True when a replacement finding no room must let its outdated replica stop first: no runner
   * is about to be free, and the new one fits on that replica's runner once it is.
   */
  #mustGoFirst(target: ReplacedReplica, deployment: Deployment, runners: readonly FleetRunner[]): boolean {
    const held = this.#orders.get(target.runner)?.order.profile.gpus;
    const runner = runners.find((r) => r.id === target.runner);
    return held !== undefined && runner !== undefined && !this.#freeing(runners) && fitsOnceFreed(runner, held, deployment);
  }

  /**
   * True when a runner that takes orders is stopping an engine it was not re-ordered (draining):
   * it is free soon, so a replacement waits for it rather than stop a replica first.
   */
  #freeing(runners: readonly FleetRunner[]): boolean {
    return runners.some((r) => r.placeable && this.#takesOrders.has(r.id) && r.hosted !== undefined && r.hosted.state !== 'stopped' && r.hosted.state !== 'failed' && !this.#orders.has(r.id));
  }

  /** Stops one replica: the newest starting one, else a ready one, outdated before current, the least loaded first. */
  #stopOne(model: string, ordered: readonly ReplicaStatus[], runners: readonly FleetRunner[], reason: string, now: number): void {
    const load = new Map(runners.map((r) => [r.id, r.slotsInUse]));
    const startingOnes = ordered.filter((r) => r.state === 'starting').sort((a, b) => b.since - a.since || (a.runner < b.runner ? -1 : 1));
    // An outdated replica goes before a current one: it was to be replaced anyway.
    const stale = (r: ReplicaStatus): number => (r.outdated ? 0 : 1);
    const readyOnes = ordered
      .filter((r) => r.state === 'ready')
      .sort((a, b) => stale(a) - stale(b) || (load.get(a.runner) ?? 0) - (load.get(b.runner) ?? 0) || (a.runner < b.runner ? -1 : 1));
    const victim = startingOnes[0] ?? readyOnes[0];
    if (!victim) return;
    const current = startingOnes.length + readyOnes.length;
    this.#orders.delete(victim.runner);
    const ops = this.#ops.get(model) ?? [];
    const op = ops.find((o) => o.inFlight?.replica === victim.replica);
    if (op) ops.splice(ops.indexOf(op), 1);
    this.#deps.logger.info('replica stopping', { model, replica: victim.replica, runner: victim.runner, state: victim.state, reason });
    this.#scale(model, current, current - 1, reason, now);
  }

  /** Orders every due start operation onto a runner, or records why none fits. */
  #placeDue(stored: StoredDeployment, ops: StartOperation[], runners: readonly FleetRunner[], now: number): void {
    const { deployment } = stored;
    const { model } = deployment;
    let unplaced: Readonly<Record<string, string>> | undefined;
    const revision = this.#revisions.get(model)!;
    for (const op of ops) {
      if (!op.due(now)) continue;
      const placement = placeReplica({ deployment, runners, occupants: this.#occupants(runners), failedOn: op.failedOn });
      if (placement.kind === 'unplaced') {
        unplaced = placement.reasons;
        const target = op.replaces;
        if (target && this.#mustGoFirst(target, deployment, runners)) {
          // No room beside it: the outdated replica drains and stops first, and the start,
          // plain from here on, takes its runner at a later pass.
          this.#orders.delete(target.runner);
          op.replaces = undefined;
          this.#deps.logger.info('replica stopping', { model, replica: target.replica, runner: target.runner, state: 'ready', reason: 'replaced in place: no runner has room beside it' });
        }
        continue;
      }
      const runner = placement.runner.id;
      const replica = replicaId(model, this.#random);
      this.#orders.set(runner, { order: { replica, model, profile: deployment.profile, revision }, at: now, reportedAt: now });
      op.order(runner, replica, now);
      this.#deps.logger.info('replica ordered', { model, replica, runner, attempt: op.attempts.length + 1 });
    }
    if (unplaced) {
      if (!this.#unplaced.has(model)) this.#deps.logger.warn('no runner fits a replica', { model, runners: Object.keys(unplaced).length });
      this.#unplaced.set(model, unplaced);
    } else {
      this.#unplaced.delete(model);
    }
  }

  /** What each runner hosts or is ordered, for placement. */
  #occupants(runners: readonly FleetRunner[]): Map<string, Occupant> {
    const occupants = new Map<string, Occupant>();
    for (const r of runners) {
      // A failed or stopped engine holds nothing: the runner launches the next order over it.
      if (r.hosted && r.hosted.state !== 'stopped' && r.hosted.state !== 'failed') occupants.set(r.id, { replica: r.hosted.replica, model: r.hosted.model, how: 'hosted' });
    }
    for (const [runner, { order }] of this.#orders) if (!occupants.has(runner)) occupants.set(runner, { replica: order.replica, model: order.model, how: 'ordered' });
    return occupants;
  }

  /**
   * The replicas of `model`: with `orders`, this leader's orders (reported or not) and any other
   * engine of the model a runner reports (draining: its order is null); without, only reports.
   */
  #replicas(model: string, runners: readonly FleetRunner[], orders: boolean): ReplicaStatus[] {
    const out: ReplicaStatus[] = [];
    const seen = new Set<string>();
    const revision = this.#revisions.get(model);
    if (orders) {
      const byId = new Map(runners.map((r) => [r.id, r]));
      for (const [runnerId, { order, at }] of this.#orders) {
        if (order.model !== model) continue;
        const h = byId.get(runnerId)?.hosted;
        const hosted = h?.replica === order.replica ? h : undefined;
        const state: ReplicaState = !hosted ? 'starting' : hosted.state === 'stopped' ? 'draining' : hosted.state;
        const outdated = revision !== undefined && order.revision !== revision;
        out.push({ replica: order.replica, runner: runnerId, state, since: hosted?.since ?? at, ...(outdated ? { outdated: true as const } : {}) });
        seen.add(runnerId);
      }
    }
    for (const r of runners) {
      const h = r.hosted;
      if (!h || h.model !== model || h.state === 'stopped' || seen.has(r.id)) continue;
      const state: ReplicaState = !orders || h.state === 'failed' ? h.state : 'draining';
      const outdated = revision !== undefined && h.revision !== undefined && h.revision !== revision;
      out.push({ replica: h.replica, runner: r.id, state, since: h.since, ...(outdated ? { outdated: true as const } : {}) });
    }
    return out.sort((a, b) => (a.runner < b.runner ? -1 : a.runner > b.runner ? 1 : 0));
  }

  #scaler(model: string): ModelAutoscaler {
    let scaler = this.#scalers.get(model);
    if (!scaler) {
      scaler = new ModelAutoscaler(this.#config);
      this.#scalers.set(model, scaler);
    }
    return scaler;
  }

  #scale(model: string, from: number, to: number, reason: string, now: number): void {
    if (from === to) return;
    const event = { kind: 'scale', model, from, to, reason } as const;
    const list = this.#scaleEvents.get(model) ?? [];
    list.push({ ...event, at: now });
    if (list.length > SCALE_EVENTS_KEPT) list.splice(0, list.length - SCALE_EVENTS_KEPT);
    this.#scaleEvents.set(model, list);
    this.#deps.logger.info('deployment scaled', { model, from, to, reason });
    this.#emit(event);
  }

  #emit(event: ReconcilerEvent): void {
    if (!this.#events) return;
    try {
      this.#events(event);
    } catch (error) {
      this.#deps.logger.warn('reconciler event listener threw', { kind: event.kind, error: (error as Error).message });
    }
  }
}
