/**
 * The sluice path in the simulator: runners that are `Runner`s to the real placers, and the
 * gateway's own walk (placer/walk.ts) placing calls on them, on the virtual clock.
 *
 * A {@link SimRunner} is one gateway's view of a runner with `--slots` slots, answering as an
 * HttpRunner does: busy while all the runner's slots hold calls, whichever gateways sent them (its
 * {@link RunnerSlots} are shared by every gateway's view), placed otherwise; its `load()` is the
 * gateway's own reading (`runnerLoad`, as HttpRunner.load()), this gateway's in-flight count plus
 * the runner's last status report (which counts every gateway's calls), refreshed every
 * `statusInterval` as the gateway's pool probes static runners (and, where runners have cache
 * feeds, whenever the feed carries it: simulation.ts), less the calls of ours that report counted
 * and that have ended since. With one gateway, the runner's slots are its calls.
 *
 * The walk is `walkSteps`, the steps `placeCall` awaits, answered synchronously by
 * {@link stepWalker}: the runners listed, each offer answered at once. Offers and answers take no
 * virtual time (the shortcut answers without a round trip, and a placed call's trip to the engine
 * is the simulation's hop overhead).
 *
 * A call that finds every runner full waits as in the gateway: in the product's own
 * {@link WaitQueue} (gateway/calls/wait-queue.ts), on the virtual clock, with the agent's rules around it
 * (gateway/calls/agent.ts): a new call lines up behind calls already waiting; a waiting call walks the
 * pool once when woken and goes back to the head of its turn if it finds nothing; one that placed
 * wakes the next. Its flow is the workload's session (the body's `user`), its class the gateway's
 * default. It is woken on what wakes it in the gateway: one of this gateway's calls on a runner
 * ending, a status report with free slots, and the queue's own fallback, which offers the head of
 * the line every `retryAllDelay`; its deadline ends its wait. (Runners here never register, leave
 * or trip a breaker, so those wakes never come.) The queue's waits are promises: the simulation
 * awaits {@link SimWalker.settled} after each event, so that what an event set going happens at
 * its virtual time.
 *
 * One shortcut, for speed: a pass fails only when every runner is full (placers never skip a
 * runner), so while the fleet has no free slot ({@link FleetSlots}) the pool lists no runners and
 * the placer is not asked to order none. What is lost is what those failed passes (a woken call
 * that finds nothing, the fallback's offers) would have done to a placer's own state: the
 * round-robin counter, random draws.
 */
import { EndedCalls, QueueFullError, WaitQueue, gatewayDefaults, runnerLoad } from '../../../gateway/index.ts';
import type { Priority, Waiter } from '../../../gateway/index.ts';
import { PlacerTimeoutError, placeCall, walkSteps } from '../../../placer/index.ts';
import type {
  Clock,
  Placement,
  Placer,
  Runner,
  RunnerCall,
  RunnerLoad,
  TryExecResult,
  WalkAnswer,
  WalkStep,
} from '../../../placer/index.ts';
import type { Schedule, VirtualEngine } from './engine.ts';

/** What a runner last reported at its status probe, as the gateway keeps it. */
interface StatusReport {
  readonly slotsInUse: number;
  readonly slots: number;
  readonly queue: number;
  readonly kvCacheUsage: number;
  readonly at: number;
}

/** Free slots over the whole fleet, kept by its runners: zero means any pass would fail. */
export class FleetSlots {
  free = 0;
}

/**
 * One runner's slots, shared by every gateway's view of it: the runner answers busy when all are
 * taken, whichever gateways sent the calls, and its status report counts them all.
 */
export class RunnerSlots {
  readonly slots: number;
  readonly fleet: FleetSlots;
  used = 0;
  /** Hears each change of `used`: the runner's cache feed, which carries its load to every gateway. */
  onChange: (() => void) | undefined;

  /** @param fleet the fleet's free-slot count; these slots are added to it. */
  constructor(slots: number, fleet: FleetSlots) {
    this.slots = slots;
    this.fleet = fleet;
    fleet.free += slots;
  }
}

/** A runner in front of one virtual engine, as one gateway sees it. */
export class SimRunner implements Runner<SimRunner> {
  readonly id: string;
  readonly slots: number;
  readonly engine: VirtualEngine;
  readonly #shared: RunnerSlots;
  #inFlight = 0;
  #report: StatusReport | undefined;
  readonly #ended = new EndedCalls();
  /** The last load() answer, kept until the count or the report changes: placers read every runner per call. */
  #load: RunnerLoad | undefined;

  /**
   * @param fleet the fleet's free-slot count, shared by its runners; this one's slots are added to
   *   it unless `shared` (the runner's slots, when several gateways send it calls) already were.
   */
  constructor(
    id: string,
    slots: number,
    engine: VirtualEngine,
    fleet: FleetSlots = new FleetSlots(),
    shared: RunnerSlots = new RunnerSlots(slots, fleet),
  ) {
    this.id = id;
    this.slots = slots;
    this.engine = engine;
    this.#shared = shared;
  }

  /** Calls this gateway placed here that have not finished. */
  get inFlight(): number {
    return this.#inFlight;
  }

  /** Slots no gateway's call holds. */
  get free(): number {
    return this.slots - this.#shared.used;
  }

  /** The offer, answered at once: busy while every slot holds a call, else placed (and counted). */
  offer(): TryExecResult<SimRunner> {
    if (this.#shared.used >= this.slots) return BUSY;
    this.#inFlight++;
    this.#shared.used++;
    this.#shared.fleet.free--;
    this.#shared.onChange?.();
    this.#load = undefined;
    return { kind: 'placed', value: this };
  }

  /** {@link offer} behind the Runner contract, for code that walks with placer/walk.ts. */
  tryExec(_call: RunnerCall): Promise<TryExecResult<SimRunner>> {
    return Promise.resolve(this.offer());
  }

  /** A call placed here at `sent` finished at `now`: its slot is free again. */
  finished(sent: number, now: number): void {
    this.#inFlight--;
    this.#shared.used--;
    this.#shared.fleet.free++;
    this.#shared.onChange?.();
    this.#ended.record(sent, now);
    this.#load = undefined;
  }

  /**
   * Takes the runner's status as the pool's probe does, or as its cache feed carries it: slots in
   * use (every gateway's), the engine's queue and KV use.
   */
  probe(now: number): void {
    this.#report = {
      slotsInUse: this.#shared.used,
      slots: this.slots,
      queue: this.engine.waiting,
      kvCacheUsage: this.engine.kvCacheUsage(now),
      at: now,
    };
    this.#load = undefined;
  }

  /** The same shape HttpRunner.load() returns: own in-flight count, and the last report if any. */
  load(): RunnerLoad {
    this.#load ??= this.#loadNow();
    return this.#load;
  }

  #loadNow(): RunnerLoad {
    const report = this.#report;
    return runnerLoad(this.#inFlight, report && { load: report, at: report.at }, this.#ended);
  }
}

const BUSY: TryExecResult<SimRunner> = Object.freeze({ kind: 'busy' });

/** The gateway's walk and queue settings (its defaults in simulation.ts's `GATEWAY_DEFAULTS`). */
export interface WalkSettings {
  readonly retryAllDelay: number;
  readonly placerTimeout: number;
  /** The queue's bound over all calls (`--max-queued`). @default the gateway's */
  readonly maxQueued?: number;
  /** The queue's bound per flow (`--max-queued-per-flow`). @default the gateway's */
  readonly maxQueuedPerFlow?: number;
  /** The class of calls that name none (`--default-priority`). @default the gateway's */
  readonly defaultPriority?: Priority;
}

/** What a walker is told of one call's end of placement, at the virtual time it happens. */
export interface WalkEnd {
  /** `runner` committed to the call at `at`. */
  placed(runner: SimRunner, at: number): void;
  /** The placer deadline passed at `at` with no runner committed (the gateway answers 503). */
  timedOut(at: number): void;
  /** The wait queue was at a bound at `at` (the gateway answers 503 GW_QUEUE_FULL). */
  queueFull(at: number): void;
}

/** Places calls on the virtual clock with the gateway's walk and wait queue. */
export interface SimWalker {
  /**
   * Starts the walk for `call` at `now` in `flow` (the gateway's flow key: the workload's
   * session, as the body's `user`); `end` hears once how it went.
   */
  start(call: RunnerCall, now: number, end: WalkEnd, flow: string): void;
  /**
   * A runner may have room for `free` more calls at `now` (one of this gateway's calls there
   * ended, or its status report showed free slots): wakes that many waiters, as the pool's
   * room listener, the wait queue (`WaitQueue.freed`), does; `runner` is the runner with the room, when known.
   */
  freed(now: number, free?: number, runner?: string): void;
  /** Calls that joined the wait queue (every runner was full, or others were already waiting). */
  readonly waited: number;
  /** The gateway's queue the calls wait in. */
  readonly queue: WaitQueue;
  /**
   * Resolves once the walks the last event set going (a wake, a deadline, the fallback, a new
   * call's first steps) have taken their steps; undefined when there are none. The simulation
   * awaits it after each event, so that every step happens at the event's virtual time.
   * @throws what a walk failed with other than the placer's timeout or a full queue.
   */
  settled(): Promise<void> | undefined;
}

/** What a walker places with: the fleet's runners and their free slots, the placer, the clock. */
export interface WalkerContext {
  /** One stable array, as the gateway's pool hands out: placers cache their sorted orders on it. */
  readonly runners: readonly SimRunner[];
  readonly fleet: FleetSlots;
  readonly placer: Placer;
  readonly settings: WalkSettings;
  readonly schedule: Schedule;
  /** The virtual time, ms. */
  readonly now: () => number;
}

/** One call's walk, suspended at the step it asked for last. */
type Walk = Generator<WalkStep<SimRunner>, Placement<SimRunner>, WalkAnswer<SimRunner>>;

const NO_RUNNERS: readonly SimRunner[] = Object.freeze([]);

/** The runners a pass is offered: none while the fleet is full (see the file comment). */
function listed({ fleet, runners }: WalkerContext): readonly SimRunner[] {
  return fleet.free === 0 ? NO_RUNNERS : runners;
}

/**
 * `placer` not asked to order an empty list: a pass over a full fleet fails without it (see the
 * file comment).
 */
function skippingEmptyPasses(placer: Placer): Placer {
  return {
    name: placer.name,
    order: (call, runners) => (runners.length === 0 ? runners : placer.order(call, runners)),
    placed: (call, runner) => placer.placed?.(call, runner),
  };
}

/**
 * The gateway's wait queue (gateway/calls/wait-queue.ts) on the virtual clock, and what the agent
 * (gateway/calls/agent.ts) does around the walk with it: a new call lines up behind calls already
 * waiting for its model; each pause between passes is a wait for its turn; a waiter that placed
 * wakes the next in line; every call leaves the queue when its walk ends.
 */
class SimGateway {
  readonly queue: WaitQueue;
  /** The gateway's time source on the virtual clock: a sleep is an event in the simulation's queue. */
  readonly clock: Clock;
  readonly #now: () => number;
  readonly #priority: Priority;
  /** True from an event that may have set walks going until they have all stepped. */
  #stirred = false;
  #failure: { error: unknown } | undefined;
  waited = 0;

  readonly #placer: Placer;
  readonly #runners: readonly SimRunner[];

  constructor({ settings, schedule, now, placer, runners }: WalkerContext) {
    this.#now = now;
    this.#placer = placer;
    this.#runners = runners;
    this.#priority = settings.defaultPriority ?? gatewayDefaults.defaultPriority;
    this.clock = {
      now,
      // The queue's deadline timers and its fallback. A timer the queue aborted stays in the event
      // queue (a heap cannot drop it cheaply) and does nothing when its time comes.
      sleep: (ms, signal) =>
        new Promise<void>((resolve) => {
          schedule(now() + ms, () => {
            if (signal?.aborted) return;
            this.#stirred = true;
            resolve();
          });
        }),
    };
    this.queue = new WaitQueue({
      maxQueued: settings.maxQueued ?? gatewayDefaults.maxQueued,
      maxQueuedPerFlow: settings.maxQueuedPerFlow ?? gatewayDefaults.maxQueuedPerFlow,
      retryAllDelay: settings.retryAllDelay,
      clock: this.clock,
    });
  }

  /** The call's place in its model's line, in its flow; the gateway's default class. */
  waiter(call: RunnerCall, flow: string): Waiter {
    return this.queue.waiter({ model: call.fn, priority: this.#priority, flow }, call.signal, call.placerDeadline);
  }

  /** True when calls for the call's model are waiting or walking on their turn: it lines up behind them. */
  behind(call: RunnerCall): boolean {
    return this.queue.aheadFor(call.fn) > 0;
  }

  /**
   * One wait for the walk's `waitForCapacity`, as the agent's: resolves when woken or at the
   * deadline, rejects when the queue is full or the call aborted.
   */
  async turn(waiter: Waiter, call: RunnerCall): Promise<void> {
    // The wait may end at once (a full queue, a passed deadline): its continuation is a walk's step.
    this.#stirred = true;
    // As the agent: where the call would rather go, asked at its first wait, over the whole fleet.
    if (!waiter.joined && this.#placer.preferred) waiter.prefers = this.#placer.preferred(call, this.#runners);
    const end = await waiter.wait();
    if (typeof end === 'object') throw new QueueFullError(end.scope, end.limit, gatewayDefaults.retryAfter);
    if (end === 'aborted') throw call.signal.reason ?? new Error('the call was aborted');
  }

  /** Room for `free` calls appeared (on `runner`, when known): the queue wakes that many (the fleet serves one model). */
  wake(free: number, runner?: string): void {
    if (free > 0 && this.queue.wake(free, undefined, runner) > 0) this.#stirred = true;
  }

  /** Marks that a walk steps on in a promise's continuation. */
  stir(): void {
    this.#stirred = true;
  }

  /** The walk placed the call on `runner`: a waiter wakes the next in line, then leaves. */
  placed(waiter: Waiter, runner: SimRunner, end: WalkEnd): void {
    if (waiter.joined) this.wake(1);
    this.#leave(waiter);
    end.placed(runner, this.#now());
  }

  /** The walk ended with `error`: the call leaves the queue and is answered 503, or the run fails. */
  unplaced(waiter: Waiter, error: unknown, end: WalkEnd): void {
    this.#leave(waiter);
    if (error instanceof PlacerTimeoutError) end.timedOut(this.#now());
    else if (error instanceof QueueFullError) end.queueFull(this.#now());
    else this.#failure ??= { error };
  }

  settled(): Promise<void> | undefined {
    if (this.#failure) throw this.#failure.error;
    if (!this.#stirred) return undefined;
    // Every continuation of a wake is a promise reaction, and those chain (a placed waiter wakes
    // the next): a macrotask runs only once all of them have.
    return new Promise<void>((resolve) =>
      setImmediate(() => {
        this.#stirred = false;
        resolve();
      }),
    );
  }

  #leave(waiter: Waiter): void {
    if (waiter.joined) this.waited++;
    waiter.leave();
  }
}

/**
 * The walker the simulation runs: `walkSteps` answered synchronously, each pause between passes
 * a wait for the call's turn in the gateway's queue (see the file comment).
 */
export function stepWalker(context: WalkerContext): SimWalker {
  const { settings, now } = context;
  const placer = skippingEmptyPasses(context.placer);
  const gateway = new SimGateway(context);
  const walkOptions = { retryAllDelay: settings.retryAllDelay, now };

  /** Runs the walk from `first` (its next step) until it is placed, ends, or waits its turn. */
  const advance = (
    walk: Walk,
    waiter: Waiter,
    call: RunnerCall,
    end: WalkEnd,
    first: () => IteratorResult<WalkStep<SimRunner>, Placement<SimRunner>>,
  ): void => {
    let step: IteratorResult<WalkStep<SimRunner>, Placement<SimRunner>>;
    try {
      step = first();
      while (!step.done) {
        const request = step.value;
        if (request.kind === 'list') {
          step = walk.next(listed(context));
        } else if (request.kind === 'offer') {
          // Placers return only runners they were given: these are SimRunners.
          step = walk.next((request.runner as SimRunner).offer());
        } else {
          gateway.turn(waiter, call).then(
            () => advance(walk, waiter, call, end, () => walk.next()),
            (error: unknown) => advance(walk, waiter, call, end, () => walk.throw(error)),
          );
          return;
        }
      }
    } catch (error) {
      gateway.unplaced(waiter, error, end);
      return;
    }
    gateway.placed(waiter, step.value.runner as SimRunner, end);
  };

  return walkerOver(gateway, (call, _at, end, flow) => {
    const waiter = gateway.waiter(call, flow);
    const walk = walkSteps<SimRunner>(call, placer, walkOptions);
    if (!gateway.behind(call)) {
      advance(walk, waiter, call, end, () => walk.next());
      return;
    }
    // An abort or the deadline is the walk's to report, as in the agent; a full queue ends the call.
    gateway.turn(waiter, call).then(
      () => advance(walk, waiter, call, end, () => walk.next()),
      (error: unknown) => {
        if (error instanceof QueueFullError) gateway.unplaced(waiter, error, end);
        else advance(walk, waiter, call, end, () => walk.next());
      },
    );
  });
}

/**
 * The walker the simulation's spec checks {@link stepWalker} against: the agent's steps around
 * the gateway's `placeCall` itself, awaited, with the same queue on the same virtual clock.
 * Slower: every step of every walk is a promise.
 */
export function placeCallWalker(context: WalkerContext): SimWalker {
  const { settings } = context;
  const placer = skippingEmptyPasses(context.placer);
  const pool = { runners: () => listed(context) };
  const gateway = new SimGateway(context);

  const place = async (call: RunnerCall, waiter: Waiter): Promise<Placement<SimRunner>> => {
    const waitForCapacity = (): Promise<void> => gateway.turn(waiter, call);
    if (gateway.behind(call)) {
      await waitForCapacity().catch((error: unknown) => {
        if (error instanceof QueueFullError) throw error;
      });
    }
    return placeCall(call, pool, placer, {
      retryAllDelay: settings.retryAllDelay,
      clock: gateway.clock,
      waitForCapacity,
    });
  };

  return walkerOver(gateway, (call, _at, end, flow) => {
    const waiter = gateway.waiter(call, flow);
    gateway.stir();
    place(call, waiter).then(
      (placement) => gateway.placed(waiter, placement.runner as SimRunner, end),
      (error: unknown) => gateway.unplaced(waiter, error, end),
    );
  });
}

/** A walker whose calls `start` walks, on `gateway`'s queue, load and counts. */
function walkerOver(gateway: SimGateway, start: SimWalker['start']): SimWalker {
  return {
    start,
    freed(_at, free = 1, runner) {
      gateway.wake(free, runner);
    },
    get waited() {
      return gateway.waited;
    },
    queue: gateway.queue,
    settled: () => gateway.settled(),
  };
}
