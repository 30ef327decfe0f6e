/**
 * The sluice path in the simulator: runners that are `Runner`s to the real placers, and the
 * gateway's own walk (placer/walk.ts) placing calls on them, on the virtual clock.
 *
 * A {@link SimRunner} answers as an HttpRunner in front of a runner with `--slots` slots does when
 * one gateway is its only client: busy while that many of the gateway's calls are in flight there
 * (the gateway's own shortcut, and the runner's answer), placed otherwise; its `load()` is the
 * gateway's own reading (`runnerLoad`, as HttpRunner.load()), this gateway's in-flight count plus
 * the runner's last status report, refreshed every `statusInterval` as the gateway's pool probes
 * static runners, less the calls of ours that report counted and that have ended since.
 *
 * The walk is `walkSteps`, the steps `placeCall` awaits, answered synchronously by
 * {@link stepWalker}: the runners listed, each offer answered at once, and a pause between passes
 * scheduled on the event queue. Offers and answers take no virtual time (the shortcut answers
 * without a round trip, and a placed call's trip to the engine is the simulation's hop overhead).
 *
 * One shortcut, for speed: a pass fails only when every runner is full (placers never skip a
 * runner), and every runner stays full until a call ends, so the passes a waiting call would make
 * before then must fail too. The simulator does not run them: while the fleet has no free slot
 * ({@link FleetSlots}) the pool lists no runners, and the placer is not asked to order none; the
 * walk's pause after such a pass is spent in a {@link WaitingRoom}, and when a slot frees, the
 * waiting call whose next pass (on its own 10 ms beat) comes first is woken for that pass. Calls
 * are placed at the same virtual times as with every pass run (spec/k6/vsim.spec.ts checks it
 * against `placeCall` itself, {@link placeCallWalker}); what is lost is what the failed passes
 * would have done to a placer's own state (the round-robin counter, random draws), which under
 * overload would be millions of passes. And a waiting call whose placer deadline passes gives up
 * when it is next woken rather than at the deadline (at the default 360 s, never in a bench run).
 */
import { EndedCalls, runnerLoad } from '../../../gateway/runner-load.ts';
import { PlacerTimeoutError } from '../../../placer/errors.ts';
import type { Clock } from '../../../placer/kernel/index.ts';
import type { Placer, Runner, RunnerCall, RunnerLoad, TryExecResult } from '../../../placer/types.ts';
import { placeCall, walkSteps } from '../../../placer/walk.ts';
import type { Placement, WalkAnswer, WalkStep } from '../../../placer/walk.ts';
import type { Schedule, VirtualEngine } from './engine.ts';
import { WaitingRoom } from './waiting-room.ts';

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

/** A runner in front of one virtual engine. */
export class SimRunner implements Runner<SimRunner> {
  readonly id: string;
  readonly slots: number;
  readonly engine: VirtualEngine;
  readonly #fleet: FleetSlots;
  #inFlight = 0;
  #report: StatusReport | undefined;
  readonly #ended = new EndedCalls();
  /** The last load() answer, kept until the count or the report changes: placers read every runner per call. */
  #load: RunnerLoad | undefined;

  /** @param fleet the fleet's free-slot count, shared by its runners; this one's slots are added to it. */
  constructor(id: string, slots: number, engine: VirtualEngine, fleet: FleetSlots = new FleetSlots()) {
    this.id = id;
    this.slots = slots;
    this.engine = engine;
    this.#fleet = fleet;
    fleet.free += slots;
  }

  /** Calls this gateway placed here that have not finished. */
  get inFlight(): number {
    return this.#inFlight;
  }

  /** The offer, answered at once: busy while every slot holds a call, else placed (and counted). */
  offer(): TryExecResult<SimRunner> {
    if (this.#inFlight >= this.slots) return BUSY;
    this.#inFlight++;
    this.#fleet.free--;
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
    this.#fleet.free++;
    this.#ended.record(sent, now);
    this.#load = undefined;
  }

  /** Takes the runner's status as the pool's probe does: slots in use, the engine's queue and KV use. */
  probe(now: number): void {
    this.#report = { slotsInUse: this.#inFlight, slots: this.slots, queue: this.engine.waiting, kvCacheUsage: this.engine.kvCacheUsage(now), at: now };
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

/** The gateway's walk settings (its defaults in simulation.ts's `GATEWAY_DEFAULTS`). */
export interface WalkSettings {
  readonly retryAllDelay: number;
  readonly placerTimeout: number;
}

/** What a walker is told of one call's end of placement, at the virtual time it happens. */
export interface WalkEnd {
  /** `runner` committed to the call at `at`. */
  placed(runner: SimRunner, at: number): void;
  /** The placer deadline passed at `at` with no runner committed. */
  timedOut(at: number): void;
}

/** Places calls on the virtual clock with the gateway's walk. */
export interface SimWalker {
  /** Starts the walk for `call` at `now`; `end` hears once how it went. */
  start(call: RunnerCall, now: number, end: WalkEnd): void;
  /** A slot freed at `now`, for a waiting call to take. */
  freed(now: number): void;
  /** Calls whose first pass failed, so that they waited for a slot. */
  readonly waited: number;
  /**
   * Resolves once no walk is between two steps; undefined when none is. Only a walker whose walks
   * run on promises has any: the simulation awaits it after each event, so that a walk's steps all
   * happen at the event's virtual time.
   */
  settled?(): Promise<void> | undefined;
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
 * `placer` not asked to order an empty list: a pass over a full fleet fails without it, as the
 * passes the simulator skips do (see the file comment).
 */
function skippingEmptyPasses(placer: Placer): Placer {
  return {
    name: placer.name,
    order: (call, runners) => (runners.length === 0 ? runners : placer.order(call, runners)),
    placed: (call, runner) => placer.placed?.(call, runner),
  };
}

/**
 * The walker the simulation runs: `walkSteps` answered synchronously, with the pause after a pass
 * that found the fleet full spent in a {@link WaitingRoom} (see the file comment).
 */
export function stepWalker(context: WalkerContext): SimWalker {
  const { fleet, settings, schedule, now } = context;
  const placer = skippingEmptyPasses(context.placer);
  const room = new WaitingRoom(settings.retryAllDelay);
  const walkOptions = { retryAllDelay: settings.retryAllDelay, now };
  let waited = 0;

  /** A slot freed at `at`: the waiting call whose next pass comes first gets to make it. */
  const wakeOne = (at: number): void => {
    const woken = room.wake(at);
    if (woken) schedule(woken.at, woken.pass);
  };

  /** Runs the walk from where it stands until it is placed, timed out or pausing; true unless pausing. */
  const advance = (walk: Walk, end: WalkEnd, at: number): boolean => {
    let step: IteratorResult<WalkStep<SimRunner>, Placement<SimRunner>>;
    try {
      step = walk.next();
      while (!step.done) {
        const request = step.value;
        if (request.kind === 'list') {
          step = walk.next(listed(context));
        } else if (request.kind === 'offer') {
          // Placers return only runners they were given: these are SimRunners.
          step = walk.next((request.runner as SimRunner).offer());
        } else {
          const resume = (later: number): void => void advance(walk, end, later);
          // A pause short of retryAllDelay ends at the deadline, where the walk gives up: no slot
          // can change that. Otherwise the fleet is full (the pass failed) until a slot frees.
          if (request.ms < settings.retryAllDelay) schedule(at + request.ms, resume);
          else room.park(at, resume);
          return false;
        }
      }
    } catch (error) {
      if (!(error instanceof PlacerTimeoutError)) throw error;
      end.timedOut(at);
      // Woken for a slot it can no longer take: the next one in line takes it.
      if (fleet.free > 0) wakeOne(at);
      return true;
    }
    end.placed(step.value.runner as SimRunner, at);
    return true;
  };

  return {
    start(call, at, end) {
      const walk = walkSteps<SimRunner>(call, placer, walkOptions);
      if (!advance(walk, end, at)) waited++;
    },
    freed: wakeOne,
    get waited() {
      return waited;
    },
  };
}

/**
 * The walker the simulation's spec checks {@link stepWalker} against: the gateway's `placeCall`
 * itself, awaited, on a {@link Clock} whose sleep is an event in the simulation's queue, running
 * every pass (the pool lists no runners while the fleet is full, as for {@link stepWalker}, so
 * only the waiting room differs). Slower: every step is a promise, and the simulation awaits every
 * walk's steps after each event.
 */
export function placeCallWalker(context: WalkerContext): SimWalker {
  const { settings, schedule, now } = context;
  const placer = skippingEmptyPasses(context.placer);
  const pool = { runners: () => listed(context) };
  // Walks between two steps: the simulation takes no next event until there are none.
  let active = 0;
  let quiet: { promise: Promise<void>; resolve: () => void } | undefined;
  let failure: { error: unknown } | undefined;
  let waited = 0;
  const stepped = (): void => {
    if (--active > 0 || quiet === undefined) return;
    quiet.resolve();
    quiet = undefined;
  };
  /** The walk's pause, as an event: the walk steps on when the queue reaches it. */
  const sleep = (ms: number): Promise<void> => {
    stepped();
    return new Promise((resolve) => {
      schedule(now() + ms, () => {
        active++;
        resolve();
      });
    });
  };

  return {
    start(call, _at, end) {
      let paused = false;
      const clock: Clock = {
        now,
        sleep(ms) {
          paused = true;
          return sleep(ms);
        },
      };
      active++;
      placeCall(call, pool, placer, { retryAllDelay: settings.retryAllDelay, clock }).then(
        (placement) => {
          if (paused) waited++;
          end.placed(placement.runner as SimRunner, now());
          stepped();
        },
        (error: unknown) => {
          if (paused) waited++;
          if (error instanceof PlacerTimeoutError) end.timedOut(now());
          else failure ??= { error };
          stepped();
        },
      );
    },
    freed() {
      // Waiting calls find the slot at their own next pass.
    },
    get waited() {
      return waited;
    },
    settled() {
      if (failure) throw failure.error;
      if (active === 0) return undefined;
      if (quiet === undefined) {
        let resolve!: () => void;
        const promise = new Promise<void>((r) => (resolve = r));
        quiet = { promise, resolve };
      }
      return quiet.promise;
    },
  };
}
