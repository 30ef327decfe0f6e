/**
 * The sluice path in the simulator: runners that are `Runner`s to the real placers, and the walk
 * that offers a call to them, on the virtual clock.
 *
 * A {@link SimRunner} answers as an HttpRunner in front of a runner with `--slots` slots does when
 * one gateway is its only client: busy while that many of the gateway's calls are in flight there
 * (the gateway's own shortcut, and the runner's answer), placed otherwise; its `load()` has the
 * same shape, this gateway's in-flight count plus the runner's last status report, refreshed every
 * `statusInterval` as the gateway's pool probes static runners, less the calls of ours that report
 * counted and that have ended since (`EndedCalls`, as HttpRunner).
 *
 * The walk is placer/walk.ts's loop run synchronously: one pass takes `placer.order(call,
 * runners)` and offers the call to each runner in turn until one commits, then tells the placer's
 * `placed()`; a pass in which none commits is followed by another `retryAllDelay` later, never past
 * the placer deadline. Offers and answers take no virtual time (the shortcut answers without a
 * round trip, and a placed call's trip to the engine is the simulation's hop overhead).
 *
 * One shortcut, for speed: a pass fails only when every runner is full (placers never skip a
 * runner), and every runner stays full until a call ends, so the passes a waiting call would make
 * before then must fail too. The simulator does not run them: a pass while the fleet has no free
 * slot ({@link FleetSlots}) fails without asking the placer, the call waits in a
 * {@link WaitingRoom}, and when a slot frees, the waiting call whose next pass (on its own 10 ms
 * beat) comes first is woken for that pass. Calls are placed at the same virtual times as with
 * every pass run; what is lost is only what the failed passes did to a placer's own state (the
 * round-robin counter, random draws), which under overload would be millions of passes.
 */
import { EndedCalls, runnerLoad } from '../../../gateway/runner-load.ts';
import type { Placer, Runner, RunnerCall, RunnerLoad, TryExecResult } from '../../../placer/types.ts';
import type { VirtualEngine } from './engine.ts';

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

/** The gateway's walk settings (gateway defaults: 10 ms and 360 s). */
export interface WalkSettings {
  readonly retryAllDelay: number;
  readonly placerTimeout: number;
}

/** What one pass of the walk came to. */
export type PassOutcome =
  | { readonly kind: 'placed'; readonly runner: SimRunner }
  | { readonly kind: 'retry'; readonly at: number }
  | { readonly kind: 'timeout' };

/**
 * One pass of the walk at `now`: the runner that committed, or when to try again, or a timeout
 * once the call's placer deadline has come. `placed()` is told of a commit; whatever it throws is
 * ignored, as the live walk ignores it. With `fleet` given and no slot free in it, the pass fails
 * without asking the placer (see the file comment).
 */
export function walkPass(call: RunnerCall, runners: readonly SimRunner[], placer: Placer, settings: WalkSettings, now: number, fleet?: FleetSlots): PassOutcome {
  if (now >= call.placerDeadline) return { kind: 'timeout' };
  if (fleet?.free === 0) return { kind: 'retry', at: now + Math.min(settings.retryAllDelay, call.placerDeadline - now) };
  for (const runner of placer.order(call, runners)) {
    if (runner.offer().kind !== 'placed') continue;
    try {
      placer.placed?.(call, runner);
    } catch {
      // The call is placed; a learning placer's failure must not unplace it.
    }
    return { kind: 'placed', runner };
  }
  return { kind: 'retry', at: now + Math.min(settings.retryAllDelay, call.placerDeadline - now) };
}

/** A call waiting for its next pass; `phase` is where on the `retryAllDelay` beat its passes fall. */
interface Waiter {
  readonly phase: number;
  readonly seq: number;
  readonly pass: (at: number) => void;
}

/** Calls that found every runner full, by the phase of their retry beat. */
export class WaitingRoom {
  readonly #beat: number;
  /** Sorted by phase, then by when they started waiting. */
  readonly #waiters: Waiter[] = [];
  #seq = 0;

  /** @param retryAllDelay the walk's pause between passes, ms (0: the next pass comes at once). */
  constructor(retryAllDelay: number) {
    this.#beat = retryAllDelay;
  }

  /** Calls waiting. */
  get size(): number {
    return this.#waiters.length;
  }

  /** A pass at `failedAt` found every runner full; `pass` runs the call's next pass when woken. */
  park(failedAt: number, pass: (at: number) => void): void {
    const waiter: Waiter = { phase: this.#phaseOf(failedAt), seq: this.#seq++, pass };
    this.#waiters.splice(this.#firstAtOrAfter(waiter.phase, waiter.seq), 0, waiter);
  }

  /**
   * A slot freed at `now`: removes the waiting call whose next pass comes first and returns it with
   * that pass's time; undefined when none waits.
   */
  wake(now: number): { at: number; pass: (at: number) => void } | undefined {
    if (this.#waiters.length === 0) return undefined;
    const phase = this.#phaseOf(now);
    let i = this.#firstAtOrAfter(phase, -1);
    if (i === this.#waiters.length) i = 0;
    const [waiter] = this.#waiters.splice(i, 1) as [Waiter];
    const wait = this.#beat > 0 ? (waiter.phase - phase + this.#beat) % this.#beat : 0;
    return { at: now + wait, pass: waiter.pass };
  }

  #phaseOf(at: number): number {
    return this.#beat > 0 ? at % this.#beat : 0;
  }

  /** Index of the first waiter at or after (phase, seq). */
  #firstAtOrAfter(phase: number, seq: number): number {
    let lo = 0;
    let hi = this.#waiters.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      const w = this.#waiters[mid]!;
      if (w.phase < phase || (w.phase === phase && w.seq < seq)) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }
}
