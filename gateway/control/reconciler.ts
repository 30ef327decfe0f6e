/**
 * The reconciler: the loop that keeps each deployment's replicas at what its load wants. It
 * orders runners that take orders to host a replica (an {@link EngineOrder} in their heartbeat
 * answer) or to host nothing (`null`: drain, then stop), and reads back what they report.
 *
 * The rules are plan.ts's: a pure function from the deployments, the fleet and the book
 * (book.ts: orders and start operations, and what came of them) to actions. This loop holds
 * what a plan must not: the lease, the timers, the concurrency samples, the clock and the
 * replica ids' randomness; it applies each pass's actions to its book, logs them and tells its
 * listener (docs/operations.md, "The reconciler").
 * - Leadership: every pass begins with `lease.hold()`. A gateway not holding the lease gives
 *   no orders (`orderFor` answers undefined: runners keep what they host); taking it starts a
 *   new book ({@link Book.handover}), whose first pass adopts what runners host.
 * - Concurrency of M, sampled every `sampleInterval`: slots in use on the runners hosting M plus
 *   calls for M waiting in this gateway's queue. A sample past the panic threshold asks for a
 *   pass at once rather than at the next period.
 * - While a start has failed and nothing else of the model starts or serves, `startFailure`
 *   says so (its reason without args or env values), so the calls waiting for a replica are
 *   answered at once rather than at their deadline. Failures are logged with their reasons;
 *   profile args and env values never are.
 */
import { checksFor, drawIndex } from '../../placer/kernel/index.ts';
import { GatewayConfigError } from '../errors.ts';
import type { EngineOrder } from '../../runner/protocol/index.ts';
import { ModelAutoscaler } from './autoscaler.ts';
import type { ScaleLoad } from './autoscaler.ts';
import { Book, replicasOf, reportedReplicas } from './book.ts';
import { deploymentRevision } from './deployments.ts';
import type { Deployment } from './deployments.ts';
import { narrate } from './narration.ts';
import { startFailureOf } from './operations.ts';
import type { StartFailureView } from './operations.ts';
import { plan } from './plan.ts';
import type { DeployedModel } from './plan.ts';
import { resolveReconcilerOptions, systemReconcilerTimers } from './reconciler-options.ts';
import type {
  ReconcilerConfig,
  ReconcilerDeploymentStatus,
  ReconcilerEvent,
  ReconcilerInit,
  ReconcilerTimers,
  ReplicaState,
} from './reconciler-options.ts';
import type { StoredDeployment } from './store.ts';

const check = checksFor(GatewayConfigError);

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
  return `${slug || 'replica'}-${drawIndex(random, 2 ** 32)
    .toString(16)
    .padStart(8, '0')}`;
}

/** Keeps every deployment's replicas at what its load wants, while this gateway holds the lease. */
export class Reconciler {
  readonly #deps: Required<Pick<ReconcilerInit, 'store' | 'fleet' | 'lease' | 'clock' | 'logger'>>;
  readonly #config: ReconcilerConfig;
  readonly #events: ((event: ReconcilerEvent) => void) | undefined;
  readonly #random: () => number;
  readonly #timers: ReconcilerTimers;

  #leading = false;
  #book: Book;
  /** The deployments as of the last list read, in the store's order, with their revisions. */
  #deployed = new Map<string, DeployedModel>();
  /** Runner ids that took orders at the last pass. */
  #takesOrders = new Set<string>();
  /** Each deployed model's concurrency samples (kept across leaders). */
  readonly #scalers = new Map<string, ModelAutoscaler>();

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
    this.#book = new Book(this.#config);
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
    for (const timer of [this.#passTimer, this.#sampleTimer, this.#pokeTimer])
      if (timer !== undefined) this.#timers.clearTimeout(timer);
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
    for (const [model, { stored }] of this.#deployed) {
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
      const { maxReplicas, targetConcurrency } = stored.deployment;
      const under = (this.#book.wanted(model) ?? 0) < maxReplicas;
      if (this.#leading && under && panic >= this.#config.panicThreshold * targetConcurrency * Math.max(ready, 1))
        this.poke(model);
    }
  }

  /**
   * The order for a runner's heartbeat answer: undefined when this gateway does not lead, has
   * not finished its first pass since taking the lease, or the runner takes no orders (as of the
   * last pass); else the runner's order, or null for none.
   */
  orderFor(runnerId: string): EngineOrder | null | undefined {
    if (!this.#leads() || !this.#takesOrders.has(runnerId)) return undefined;
    return this.#book.order(runnerId)?.order ?? null;
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
    const deployed = this.#deployed.get(model);
    if (!this.#leads() || !deployed) return undefined;
    return startFailureOf(this.status(model), deployed.stored.deployment.profile, this.#deps.clock.now());
  }

  /** The deployment of `model`, as of the last list read. */
  deployment(model: string): Deployment | undefined {
    return this.#deployed.get(model)?.stored.deployment;
  }

  /** A deployment's status now: replicas from the runners' reports (and this leader's orders). */
  status(model: string): ReconcilerDeploymentStatus {
    const leading = this.#leads();
    const runners = this.#deps.fleet.runners();
    const revision = this.#deployed.get(model)?.revision;
    const replicas = leading
      ? replicasOf(this.#book, model, runners, revision)
      : reportedReplicas(model, runners, revision);
    const count = (state: ReplicaState): number => replicas.filter((r) => r.state === state).length;
    const outdated = replicas.filter((r) => r.outdated && r.state !== 'draining').length;
    const base = {
      starting: count('starting'),
      ready: count('ready'),
      draining: count('draining'),
      outdated,
      replicas,
    };
    if (!leading) return { reconciler: 'following', wanted: 0, ...base, pending: [], deadLettered: [], events: [] };
    const book = this.#book;
    const unplaced = book.unplaced(model);
    const blocked = book.blocked(model);
    return {
      reconciler: 'leading',
      wanted: book.wanted(model) ?? 0,
      ...base,
      ...(unplaced ? { unplaced: { reason: `no runner fits a replica of ${model}`, runners: unplaced } } : {}),
      pending: book.pending(model).map(({ op }) => ({
        ...(op.inFlight ? { replica: op.inFlight.replica } : {}),
        attempts: op.attempts,
        nextAttemptAt: op.nextAttemptAt,
        lastReason:
          op.attempts.at(-1)?.reason ??
          (op.inFlight ? `ordered on runner ${op.inFlight.runner}` : unplaced ? 'no runner fits' : 'not ordered yet'),
      })),
      deadLettered: book.deadLetters(model).map(({ at, attempts }) => ({ at, attempts })),
      ...(blocked ? { blocked: blocked.reason } : {}),
      events: [...book.scaleEvents(model)],
    };
  }

  /** True while leading with the fleet adopted: orders and the leader's status may be answered. */
  #leads(): boolean {
    return this.#leading && this.#book.adopted;
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
    this.#deployed = new Map(
      list.map((stored) => [stored.deployment.model, { stored, revision: deploymentRevision(stored.deployment) }]),
    );
    for (const model of this.#scalers.keys()) if (!this.#deployed.has(model)) this.#scalers.delete(model);
    if (!held || this.#closed) {
      this.#lose('lease not held');
      return;
    }
    const now = clock.now();
    const runners = fleet.runners();
    this.#takesOrders = new Set(runners.filter((r) => r.capacity?.orders === true).map((r) => r.id));
    if (!this.#leading) this.#gain();
    const waiting = new Map<string, number>();
    const load = new Map<string, ScaleLoad>();
    for (const model of this.#deployed.keys()) {
      waiting.set(model, fleet.waiting(model));
      load.set(model, this.#scaler(model).load(now));
    }
    const actions = plan([...this.#deployed.values()], { runners, waiting, load }, this.#book, {
      now,
      config: this.#config,
      newReplica: (model) => replicaId(model, this.#random),
    });
    const emit = (event: ReconcilerEvent): void => this.#emit(event);
    for (const action of actions) {
      // Told before applied: a line may say what changed (a model newly unplaced).
      narrate(action, this.#book, logger, emit);
      this.#book.apply(action);
    }
  }

  /** Took the lease: a new book, whose first pass adopts what runners host before deciding anything. */
  #gain(): void {
    this.#leading = true;
    this.#book = this.#book.handover();
  }

  /** Stopped leading: a loss while running is news (warn); giving the lease up at close is not. */
  #lose(why: string): void {
    if (!this.#leading) return;
    this.#leading = false;
    this.#book = this.#book.handover();
    if (this.#closed) this.#deps.logger.info('reconciler lease released', {});
    else this.#deps.logger.warn('reconciler lease lost', { why });
    this.#emit({ kind: 'leader', leading: false });
  }

  #scaler(model: string): ModelAutoscaler {
    let scaler = this.#scalers.get(model);
    if (!scaler) {
      scaler = new ModelAutoscaler(this.#config);
      this.#scalers.set(model, scaler);
    }
    return scaler;
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
