/**
 * One runner as the pool knows it: its transport (HttpRunner), and everything the gateway has
 * learned about it, which only this class writes: what it serves, whether it answers, its
 * breaker, and, for a runner that registered itself, its registration. Every change that can
 * alter which calls the runner is a candidate for (its models, its placeability) tells the pool,
 * so the pool's per-model candidate lists stay true without anyone remembering to clear them; the
 * same split as undici's BalancedPool, which owns the weights of Pools that stay transports.
 *
 * An offer to a runner that this gateway alone already fills (as many calls in flight there as
 * the slots it last reported) is answered busy at once, without a round trip: a runner never runs
 * more calls than its slots, so the answer could only be busy.
 */
import { formatMs } from '../../placer/kernel/index.ts';
import type { Clock } from '../../placer/kernel/index.ts';
import type { Runner, RunnerCall, RunnerLoad, TryExecResult } from '../../placer/types.ts';
import type {
  CacheAnnouncement,
  FeedLoad,
  ReportedLoad,
  RunnerHeartbeat,
  RunnerRegistration,
  StatusReading,
} from '../../runner/protocol/index.ts';
import { CircuitBreaker } from './breaker.ts';
import type { BreakerOptions } from './breaker.ts';
import type { GatewayCall } from '../http/index.ts';
import { RunnerStalledError } from '../errors.ts';
import type { CloseOptions, HttpRunner, RunnerResponse, RunnerSignals } from './http-runner.ts';
import type { StampedReport } from './runner-load.ts';

/** What the gateway last learned about a runner from its /status and from its calls. */
export interface RunnerHealth {
  /**
   * Models listed at the last status fetch that found the runner's engine ready; undefined
   * until then, or while its engine is starting (the gateway cannot tell yet what it serves).
   */
  readonly models: readonly string[] | undefined;
  /** False after a failed connect or status fetch, true again after a successful one. */
  readonly reachable: boolean;
  /**
   * True once the runner left a call unacknowledged for responseTimeout, or a status probe
   * unanswered: it is passed over until a probe finds it answering again.
   */
  readonly hung: boolean;
  /**
   * Until this time (the gateway's clock) offers fail at once without touching the network: the
   * runner refused a connection or a status fetch moments ago.
   */
  readonly downUntil: number;
  /** Message of the last connect or status failure, for logs and /readyz. */
  readonly lastError?: string;
  /** Load from the last /status probe of a static runner, and when (the gateway's clock). */
  readonly report?: StampedLoad;
}

/** A report as the gateway keeps it: the whole load the runner sent, and when it came on the gateway's clock. */
export interface StampedLoad extends StampedReport {
  readonly load: ReportedLoad;
}

/** How long a runner that refused a connection is passed over before it is tried again, in ms. */
const DOWN_BACKOFF_MS = 1000;

/** What the gateway knows of a runner that registered itself, from its heartbeats. */
export interface Registration {
  /** `live` while heartbeats arrive; `unreachable` after several are missed (not placed on). */
  readonly state: 'live' | 'unreachable';
  /** When the last registration or heartbeat arrived, on the gateway's clock. */
  readonly lastSeen: number;
  /** The runner's engine can take calls. */
  readonly ready: boolean;
  /** The runner is draining (it said so), or an operator asked this gateway to drain it. */
  readonly draining: boolean;
  readonly drainRequested: boolean;
  readonly version: string;
  /** The load the runner last reported, and when. */
  readonly report: StampedLoad | undefined;
}

/** Settings of an entry. */
export interface RunnerEntryOptions {
  /** The gateway's clock: down time, silence and the breaker are measured on it. */
  clock: Clock;
  /** Circuit breaker settings, without the clock (the entry's is used). */
  breaker: Omit<BreakerOptions, 'clock'>;
  /** How long a runner holding detached calls may go unheard from, in ms; see {@link RunnerEntry.cutSilentCalls}. */
  streamIdleTimeout: number;
  /** Told whenever the runner's models or placeability may have changed. */
  onChange: () => void;
  /**
   * Told when the runner may have room for `free` more calls: one of this gateway's calls there
   * ended, a report showed free slots, it registered ready, or its breaker let calls through
   * again. The gateway's wait queue is it, and wakes that many waiters; whatever it throws is ignored.
   */
  room?: RoomListener;
}

/** Whoever waits for room on runners: the gateway's wait queue. */
export interface RoomListener {
  /**
   * `runner` may have room for `free` more calls, of `models` (undefined when it has not said
   * which it serves, so it could take a call for any).
   */
  freed(runner: string, models: readonly string[] | undefined, free: number): void;
}

type MutableHealth = { -readonly [K in keyof RunnerHealth]: RunnerHealth[K] };
type MutableRegistration = { -readonly [K in keyof Registration]: Registration[K] };

/** A runner in the pool: the placers' Runner, over an HttpRunner, with the state the gateway keeps of it. */
export class RunnerEntry implements Runner<RunnerResponse> {
  #id: string;
  readonly transport: HttpRunner;
  /** Ejects the runner for a while after repeated failures before commit. */
  readonly breaker: CircuitBreaker;
  readonly #health: MutableHealth = { models: undefined, reachable: true, hung: false, downUntil: 0 };
  #registration: MutableRegistration | undefined;
  #cacheAnnouncement: CacheAnnouncement | undefined;
  /** When the runner last answered anything: a call, a busy answer, a status probe. */
  #heardAt: number;
  readonly #options: RunnerEntryOptions;
  /** What the transport tells this entry as offers unfold. */
  readonly #signals: RunnerSignals;

  constructor(id: string, transport: HttpRunner, options: RunnerEntryOptions) {
    this.#id = id;
    this.transport = transport;
    this.#options = options;
    this.#heardAt = options.clock.now();
    this.breaker = new CircuitBreaker({ ...options.breaker, clock: options.clock });
    this.#signals = {
      answered: () => this.markUp(),
      down: (error) => this.markDown(error),
      hung: (why) => this.markHung(why),
      failed: () => this.breaker.failure(),
      succeeded: () => this.#whileBreaker(() => this.breaker.success()),
      released: () => this.#freed(1),
    };
  }

  /** The runner's id in the pool: its own id once known, or, until a static runner says it, its URL's `host:port`. */
  get id(): string {
    return this.#id;
  }

  /**
   * Takes the id the runner calls itself, learnt from its status: a static runner is known by
   * its URL's `host:port` only until it says its own, so one runner has one name in every
   * process's labels, spans and logs. The pool, which keys runners by id, calls this.
   */
  rename(id: string): void {
    this.#id = id;
  }

  /**
   * How the runner's engine names its cache blocks and whether the runner feeds them to this
   * gateway, as its last registration or heartbeat announced; undefined when it announced nothing.
   */
  get cacheAnnouncement(): CacheAnnouncement | undefined {
    return this.#cacheAnnouncement;
  }

  /** Records what the runner's last registration or heartbeat announced of its engine's cache. */
  announce(announcement: CacheAnnouncement | undefined): void {
    this.#cacheAnnouncement = announcement;
  }

  /** Where the runner is called. */
  get url(): URL {
    return this.transport.url;
  }

  /** What the gateway last learned of the runner's health; written only through this entry's methods. */
  get health(): RunnerHealth {
    return this.#health;
  }

  /** Set for runners that registered themselves; static runners have none. */
  get registration(): Registration | undefined {
    return this.#registration;
  }

  /** Calls this gateway has committed to this runner and not yet finished. */
  get inFlight(): number {
    return this.transport.inFlight;
  }

  /** Offers the call: passed over at once while down, hung, ejected or full of our calls; else sent. */
  async tryExec(runnerCall: RunnerCall): Promise<TryExecResult<RunnerResponse>> {
    // Method parameters are bivariant: the gateway's pool only ever hands its own calls here.
    const call = runnerCall as GatewayCall;
    // A down, hung or ejected runner stays in the pool's list, so hashing placers keep their
    // order; it is just passed over without touching the network.
    if (this.#health.hung) {
      return {
        kind: 'failed',
        error: new Error(`runner ${this.id} is hung: ${this.#health.lastError ?? 'it stopped answering'}`),
      };
    }
    if (this.#options.clock.now() < this.#health.downUntil) {
      return {
        kind: 'failed',
        error: new Error(`runner ${this.id} is down: ${this.#health.lastError ?? 'unreachable'}`),
      };
    }
    if (!this.breaker.allows()) {
      return { kind: 'failed', error: new Error(`runner ${this.id} is ejected: its circuit breaker is open`) };
    }
    // While every runner is full, each woken call (and the queue's fallback) re-offers itself
    // to each of them; a runner full of this gateway's own calls need not pay a round trip for each.
    // Still a busy to the walk (and to its retry metric): nothing ran, try elsewhere or later.
    // Not a sign of life either, so the breaker and down state are left as they are.
    if (this.fullOfOwnCalls()) return { kind: 'busy' };
    return this.transport.send(call, this.id, this.#signals);
  }

  /**
   * The runner's load for load-aware placers: this gateway's own in-flight count (immediate),
   * with the runner's last report (heartbeat or status probe) and its time.
   */
  load(): RunnerLoad {
    return this.transport.load(this.#report());
  }

  /**
   * True when this gateway's own in-flight calls on the runner reach the slots it last reported
   * (heartbeat or status probe), so an offer could only be refused; false while its slots are not
   * known as a finite number above 0. Only this gateway's calls count, so a runner filled by
   * other gateways is still asked, and says busy itself.
   */
  fullOfOwnCalls(): boolean {
    const slots = this.#report()?.load.slots;
    return typeof slots === 'number' && Number.isFinite(slots) && slots > 0 && this.inFlight >= slots;
  }

  /** Tells the room listener of room for `free` calls; a broken listener must not fail the runner's bookkeeping. */
  #freed(free: number): void {
    if (free <= 0) return;
    try {
      this.#options.room?.freed(this.id, this.#health.models, free);
    } catch {
      // Ignored: the queue's fallback still offers its heads.
    }
  }

  /** Free slots in a report; at least one when it says nothing of slots (the runner may have room). */
  #freeIn(load: ReportedLoad | undefined): number {
    if (!load || !Number.isFinite(load.slots) || load.slots <= 0) return 1;
    return Math.max(0, load.slots - load.slotsInUse);
  }

  /** Runs a change of the breaker; tells the room listener when it went from barring offers to allowing them. */
  #whileBreaker(change: () => void): void {
    const barred = this.breaker.state !== 'closed';
    change();
    if (barred && this.breaker.state !== 'open') this.#freed(this.#freeIn(this.#report()?.load));
  }

  /** The registration's report when there is one, else the last status probe's. */
  #report(): StampedLoad | undefined {
    return this.#registration?.report ?? this.#health.report;
  }

  /** Whether the pool may offer calls to this runner now; static runners always (down ones fail fast). */
  placeable(): boolean {
    const r = this.#registration;
    return r === undefined || (r.state === 'live' && r.ready && !r.draining && !r.drainRequested);
  }

  /** Records a failed connect or status fetch: the runner is passed over for a moment. */
  markDown(error: Error): void {
    this.#health.reachable = false;
    this.#health.lastError = error.message;
    this.#health.downUntil = this.#options.clock.now() + DOWN_BACKOFF_MS;
  }

  /**
   * Records that the runner accepted a connection and then said nothing: passed over until a
   * status probe finds it answering (the pool probes hung runners, registered ones included).
   */
  markHung(why: string): void {
    this.#health.reachable = false;
    this.#health.hung = true;
    this.#health.lastError = why;
  }

  /** Records that the runner answered. */
  markUp(): void {
    this.#heardAt = this.#options.clock.now();
    this.#health.reachable = true;
    this.#health.hung = false;
    this.#health.downUntil = 0;
  }

  /**
   * When the runner was last heard from, on the gateway's clock: an answer to a call or a probe,
   * or (registered runners) a heartbeat.
   */
  lastHeard(): number {
    return Math.max(this.#heardAt, this.#registration?.lastSeen ?? -Infinity);
  }

  /**
   * Ends the detached calls this runner holds when it has not been heard from for
   * streamIdleTimeout: a runner that is hung or gone would otherwise hold them until their
   * budget ran out. The pool calls this every status interval. Returns how many it ended.
   */
  cutSilentCalls(): number {
    if (this.transport.quietCalls === 0) return 0;
    const { clock, streamIdleTimeout } = this.#options;
    const silence = clock.now() - this.lastHeard();
    if (silence <= streamIdleTimeout) return 0;
    return this.transport.cutQuietBodies(
      new RunnerStalledError(
        `runner ${this.id} was not heard from for ${formatMs(silence)} (streamIdleTimeout ${formatMs(streamIdleTimeout)}) while it held the call; the call was not retried because it may have run`,
      ),
    );
  }

  /**
   * Records a status probe's answer: the runner answered; a static runner's report and models
   * come from it (a registered runner's come from its heartbeats).
   */
  probed(reading: StatusReading): void {
    if (reading.load) this.#health.report = { load: reading.load, at: this.#options.clock.now() };
    if (!this.#registration) this.setModels(reading.models);
    this.markUp();
    const barred = this.breaker.state === 'open';
    this.breaker.probeSucceeded();
    // A report with free slots (or a breaker that lets offers through again) may be room a
    // waiting call can take; a probe of a runner still ejected is not.
    if (reading.load || barred) this.#freed(reading.load ? this.#freeIn(reading.load) : 1);
  }

  /** Sets the models the runner serves (undefined: not known yet); the pool is told when they change. */
  setModels(models: readonly string[] | undefined): void {
    const before = this.#health.models;
    const same =
      before === models ||
      (before !== undefined &&
        models !== undefined &&
        before.length === models.length &&
        before.every((m, i) => m === models[i]));
    if (same) return;
    this.#health.models = models;
    this.#options.onChange();
  }

  /** Records a registration: the runner is live, with what it said; a drain asked for earlier stays asked. */
  register(reg: RunnerRegistration): void {
    const now = this.#options.clock.now();
    this.#registration = {
      state: 'live',
      lastSeen: now,
      ready: reg.ready,
      draining: false,
      drainRequested: this.#registration?.drainRequested ?? false,
      version: reg.version,
      report: { load: reg.load, at: now },
    };
    this.setModels(reg.ready ? reg.models : undefined);
    this.#options.onChange();
    if (this.placeable()) this.#freed(this.#freeIn(reg.load));
  }

  /** Records a heartbeat of a registered runner. */
  heartbeat(hb: RunnerHeartbeat): void {
    const reg = this.#registration;
    if (!reg) throw new Error(`runner ${this.id} is static: it has no heartbeats`);
    const now = this.#options.clock.now();
    const placeable = this.placeable();
    reg.state = 'live';
    reg.lastSeen = now;
    reg.ready = hb.ready;
    reg.draining = hb.state === 'draining';
    reg.report = { load: hb.load, at: now };
    this.setModels(hb.ready ? hb.models : undefined);
    if (this.placeable() !== placeable) this.#options.onChange();
    if (this.placeable()) this.#freed(this.#freeIn(hb.load));
  }

  /**
   * Records the load a registered runner's cache feed carried: a fresh report, as a heartbeat's
   * load is (the per-model counts stay the last heartbeat's). Ignored for a static runner.
   */
  reported(load: FeedLoad): void {
    const reg = this.#registration;
    if (!reg) return;
    const report = { load: { models: reg.report?.load.models ?? {}, ...load }, at: this.#options.clock.now() };
    reg.report = report;
    if (this.placeable()) this.#freed(this.#freeIn(report.load));
  }

  /** Marks a registered runner unreachable after missed heartbeats: it is not placed on until one comes. */
  markUnreachable(): void {
    if (!this.#registration || this.#registration.state === 'unreachable') return;
    this.#registration.state = 'unreachable';
    this.#options.onChange();
  }

  /** Stops placing on a registered runner; it is told to drain at its next heartbeat. */
  requestDrain(): void {
    if (!this.#registration) return;
    this.#registration.drainRequested = true;
    this.#options.onChange();
  }

  /** Closes the runner's connections; see {@link CloseOptions}. */
  close(options: CloseOptions = {}): Promise<void> {
    return this.transport.close(options);
  }
}
