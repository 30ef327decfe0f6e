/**
 * The gateway's wait queue: calls that found every eligible runner busy wait here, and are
 * woken one at a time when capacity appears, instead of re-walking the pool every
 * retryAllDelay in no order.
 *
 * Waiters are kept per model (the pool's candidate key). Within a model, a higher priority
 * class is always woken first; within a class, flows (clients) take turns round-robin, so one
 * client's burst cannot starve another's single call; within a flow, first come first served.
 * A woken waiter that found nothing free after all (another gateway took the slot) goes back
 * to where it was: at the head of its flow, its flow next in turn.
 *
 * Pure but for the clock: time is read and slept on through the injected {@link Clock}, so the
 * unit tables run under a fake one.
 */
import type { AbortWatch, Clock } from '../../placer/kernel/index.ts';
import { PRIORITIES } from '../http/index.ts';
import type { Priority } from '../http/index.ts';
import type { QueueSnapshot } from '../observe/index.ts';
import { Deadlines } from './deadlines.ts';

/** Settings of a queue. */
export interface WaitQueueOptions {
  /** Most calls waiting (or woken and walking) at once, over all models. */
  maxQueued: number;
  /** Most calls of one flow waiting at once, over all models. */
  maxQueuedPerFlow: number;
  /**
   * Most calls of one model waiting at once (woken ones walking the pool counted), so that one
   * model's calls (a deployment that cannot start, say) cannot fill the queue for every other.
   * @default maxQueued: no bound but the total
   */
  maxQueuedPerModel?: number;
  /**
   * How often the head of each model's queue is offered anyway, in ms: for capacity this
   * gateway cannot see (calls of other gateways ending). 0 turns it off.
   */
  retryAllDelay: number;
  /** Time source for deadlines, the fallback and wait times. */
  clock: Clock;
}

/** Who a waiter is: which model's queue, which class, which flow. */
export interface WaiterKey {
  /** The pool's candidate key: the model on /v1 routes, '' on /invoke. */
  readonly model: string;
  readonly priority: Priority;
  /** The client's key for fairness: see docs/placers.md. */
  readonly flow: string;
}

/**
 * How one wait ended: `woken` (capacity may have appeared: walk the pool once), `deadline`
 * (the deadline came), `aborted` (the signal fired), or `full` (the queue or the flow is at its
 * bound; only the first wait of a waiter can end so).
 */
export type WaitEnd =
  | 'woken'
  | 'deadline'
  | 'aborted'
  | { kind: 'full'; scope: 'total' | 'model' | 'flow'; limit: number };

/** One call's place in the queue; it keeps its arrival order across waits. */
export class Waiter {
  readonly key: WaiterKey;
  /** Arrival order: lower first. */
  readonly seq: number;
  /** When the call first joined, on the queue's clock; NaN until then. */
  joinedAt = Number.NaN;
  readonly #queue: WaitQueue;
  readonly #signal: AbortWatch;
  readonly #deadline: number;
  /** `idle` before its first wait, `queued` while in line, `walking` while admitted but out of line (woken, or its wait ended), `done` after leave(). */
  state: 'idle' | 'queued' | 'walking' | 'done' = 'idle';
  #end: ((end: WaitEnd) => void) | undefined;
  /** True once it has been in line: a later wait puts it back at the head of its turn. */
  #waited = false;
  /** True from a wake until the waiter waits again or leaves: it is walking the pool on its turn. */
  woken = false;
  /**
   * The runner the call's placer prefers for it, set before its first wait (it is read when the
   * waiter joins its line): a slot freed there is offered to this call before the head of the
   * line (see {@link WaitQueue.wake}).
   */
  prefers: string | undefined;
  /** Times the call was passed over, at the head of its turn, for a call that preferred the freed runner. */
  passedOver = 0;
  /** True once the call waits for a replica of its model (a cold start), until it leaves. */
  #forReplica = false;

  constructor(queue: WaitQueue, key: WaiterKey, seq: number, signal: AbortWatch, deadline: number) {
    this.#queue = queue;
    this.key = key;
    this.seq = seq;
    this.#signal = signal;
    this.#deadline = deadline;
  }

  /** True once the call joined the queue (its first wait was admitted), whatever came after. */
  get joined(): boolean {
    return !Number.isNaN(this.joinedAt);
  }

  /**
   * Waits until woken, the deadline, or the signal; the first wait may instead end `full` at
   * once. The waiter counts against the bounds from its first wait until {@link leave}.
   */
  wait(): Promise<WaitEnd> {
    const queue = this.#queue;
    if (this.state === 'done') return Promise.resolve('aborted');
    if (this.#signal.aborted) return Promise.resolve('aborted');
    if (this.state === 'idle') {
      const full = queue.admit(this.key.flow, this.key.model);
      if (full) {
        this.state = 'done';
        return Promise.resolve(full);
      }
      this.joinedAt = queue.clock.now();
      // A member from here on, in line or not: leave() must free its room.
      this.state = 'walking';
    }
    if (queue.clock.now() >= this.#deadline) return Promise.resolve('deadline');
    return new Promise<WaitEnd>((resolve) => {
      const onAbort = (): void => finish('aborted');
      const finish = (end: WaitEnd): void => {
        if (this.#end !== finish) return;
        this.#end = undefined;
        queue.deadlines.remove(deadline);
        this.#signal.removeEventListener('abort', onAbort);
        if (end !== 'woken') queue.unlink(this);
        this.state = 'walking';
        resolve(end);
      };
      const again = this.#waited;
      this.#waited = true;
      this.#end = finish;
      this.state = 'queued';
      queue.link(this, again);
      this.#signal.addEventListener('abort', onAbort, { once: true });
      const deadline = queue.deadlines.add(this.#deadline, () => finish('deadline'));
    });
  }

  /**
   * Counts the call among those waiting for a replica of its model (once; later calls change
   * nothing) until it leaves, and returns how many of its model's calls wait so now: 1 for the
   * first of a burst.
   */
  awaitReplica(): number {
    if (!this.#forReplica && this.state !== 'done') {
      this.#forReplica = true;
      this.#queue.replicaWaits(this.key.model, 1);
    }
    return this.#queue.waitingForReplica(this.key.model);
  }

  /** Ends the current wait as woken; the queue has already taken the waiter out. */
  wake(): void {
    this.#end?.('woken');
  }

  /** Leaves the queue for good (placed, or given up); frees its room under the bounds. */
  leave(): void {
    if (this.#forReplica) {
      this.#forReplica = false;
      this.#queue.replicaWaits(this.key.model, -1);
    }
    if (this.state === 'done' || this.state === 'idle') {
      this.state = 'done';
      return;
    }
    this.#end?.('aborted');
    this.state = 'done';
    this.#queue.release(this);
  }
}

/**
 * How many times the call at the head of a turn may be passed over for calls that prefer the
 * freed runner; then it is woken whichever runner freed. Bounds what affinity costs fairness.
 */
export const MAX_PASSED_OVER = 2;

/** The waiters of one priority class of one model: a ring of flows, each FIFO. */
class PriorityClass {
  readonly flows = new Map<string, Waiter[]>();
  /** Flows with waiters, in turn order; `next` is the index of the one whose turn it is. */
  readonly ring: string[] = [];
  next = 0;
  size = 0;
  /**
   * The waiters at the head of their flow that prefer a runner, by that runner, each set in the
   * order they became heads: what a slot freed on that runner looks in, whatever the fleet's size.
   */
  readonly #headsByRunner = new Map<string, Set<Waiter>>();

  /** Adds a waiter in arrival order; a flow with no waiters joins the ring, at the turn when `first`. */
  add(w: Waiter, first: boolean): void {
    let list = this.flows.get(w.key.flow);
    if (!list) {
      list = [];
      this.flows.set(w.key.flow, list);
      if (first) this.ring.splice(this.next, 0, w.key.flow);
      else this.ring.push(w.key.flow);
    } else if (first) {
      this.next = this.ring.indexOf(w.key.flow);
    }
    let i = list.length;
    while (i > 0 && list[i - 1]!.seq > w.seq) i--;
    if (i === 0 && list.length > 0) this.#headOut(list[0]!);
    list.splice(i, 0, w);
    if (i === 0) this.#headIn(w);
    this.size++;
  }

  /** The waiter whose turn it is, without taking it. */
  peek(): Waiter | undefined {
    if (this.ring.length === 0) return undefined;
    return this.flows.get(this.ring[this.next % this.ring.length]!)![0];
  }

  /**
   * The first waiter, among the heads of every flow, that prefers `runner`; undefined when none
   * does.
   */
  preferring(runner: string): Waiter | undefined {
    const heads = this.#headsByRunner.get(runner);
    if (heads === undefined) return undefined;
    for (const w of heads) return w;
    return undefined;
  }

  /**
   * Takes `w`, the head of its flow, out of turn: the turn stays where it is, and the waiter
   * whose turn it was counts one more pass-over.
   */
  take(w: Waiter): void {
    const turn = this.peek();
    if (turn === w) {
      this.shift();
      return;
    }
    if (turn) turn.passedOver++;
    this.remove(w);
  }

  /** Takes the waiter whose turn it is and passes the turn to the next flow. */
  shift(): Waiter | undefined {
    if (this.ring.length === 0) return undefined;
    if (this.next >= this.ring.length) this.next = 0;
    const flow = this.ring[this.next]!;
    const list = this.flows.get(flow)!;
    const w = list.shift()!;
    this.#headOut(w);
    this.size--;
    if (list.length === 0) this.#drop(this.next);
    else {
      this.#headIn(list[0]!);
      this.next = (this.next + 1) % this.ring.length;
    }
    return w;
  }

  /** Takes a waiter out wherever it is (hang-up, deadline, woken out of turn). */
  remove(w: Waiter): boolean {
    const list = this.flows.get(w.key.flow);
    const i = list?.indexOf(w) ?? -1;
    if (i < 0) return false;
    list!.splice(i, 1);
    this.size--;
    if (i === 0) {
      this.#headOut(w);
      if (list!.length > 0) this.#headIn(list![0]!);
    }
    if (list!.length === 0) this.#drop(this.ring.indexOf(w.key.flow));
    return true;
  }

  #headIn(w: Waiter): void {
    if (w.prefers === undefined) return;
    let heads = this.#headsByRunner.get(w.prefers);
    if (heads === undefined) {
      heads = new Set();
      this.#headsByRunner.set(w.prefers, heads);
    }
    heads.add(w);
  }

  #headOut(w: Waiter): void {
    if (w.prefers === undefined) return;
    const heads = this.#headsByRunner.get(w.prefers);
    if (heads?.delete(w) && heads.size === 0) this.#headsByRunner.delete(w.prefers);
  }

  #drop(at: number): void {
    this.flows.delete(this.ring[at]!);
    this.ring.splice(at, 1);
    if (at < this.next) this.next--;
    if (this.next >= this.ring.length) this.next = 0;
  }
}

/** The queue of every model, with the bounds over all of them. */
export class WaitQueue {
  readonly clock: Clock;
  /** @internal The waits' deadlines, on one timer. */
  readonly deadlines: Deadlines;
  readonly #options: WaitQueueOptions;
  readonly #models = new Map<string, PriorityClass[]>();
  /** Members per flow: waiting, or woken and walking. */
  readonly #perFlow = new Map<string, number>();
  /** Members per model: waiting, or woken and walking. */
  readonly #perModel = new Map<string, number>();
  /** Woken waiters walking the pool, per model. */
  readonly #walking = new Map<string, number>();
  #members = 0;
  /** Calls waiting for a replica, by model: see {@link Waiter.awaitReplica}. */
  readonly #forReplica = new Map<string, number>();
  #waiting = 0;
  #seq = 0;
  #fallback: AbortController | undefined;

  constructor(options: WaitQueueOptions) {
    this.#options = options;
    this.clock = options.clock;
    this.deadlines = new Deadlines(options.clock);
  }

  /** A waiter for a call; it joins the queue at its first wait, with its place fixed now. */
  waiter(key: WaiterKey, signal: AbortWatch, deadline: number): Waiter {
    return new Waiter(this, key, this.#seq++, signal, deadline);
  }

  /** Calls waiting now, over all models (woken ones walking the pool not counted). */
  get waiting(): number {
    return this.#waiting;
  }

  /** Calls counted against the bounds: waiting, or woken and walking the pool. */
  get size(): number {
    return this.#members;
  }

  /** Calls waiting for `model`, in every class. */
  waitingFor(model: string): number {
    let n = 0;
    for (const c of this.#models.get(model) ?? []) n += c.size;
    return n;
  }

  /** Calls of `model` waiting for a replica of it (a cold start), from their first such wait until they leave. */
  waitingForReplica(model: string): number {
    return this.#forReplica.get(model) ?? 0;
  }

  /** @internal A waiter starts (1) or stops (-1) waiting for a replica of `model`. */
  replicaWaits(model: string, n: 1 | -1): void {
    if (n === 1) this.#forReplica.set(model, this.waitingForReplica(model) + 1);
    else countDown(this.#forReplica, model);
  }

  /**
   * Calls ahead of a newcomer for `model`: waiting, or woken and walking the pool on their turn.
   * A new call that finds any lines up behind them rather than take the room they were woken for.
   */
  aheadFor(model: string): number {
    return this.waitingFor(model) + (this.#walking.get(model) ?? 0);
  }

  /**
   * Wakes up to `count` waiters among the queues of `models` (all models when omitted): each
   * time the best head of them, by priority class, then arrival. When the room is on a known
   * `runner`, a waiter of that best class that prefers it (its placer's `preferred`) is woken
   * instead, the first such among the heads of every flow, unless the head whose turn it is has
   * been passed over {@link MAX_PASSED_OVER} times already. Returns how many it woke.
   */
  wake(count: number, models?: Iterable<string>, runner?: string): number {
    let woken = 0;
    while (woken < count) {
      let best: { w: Waiter; c: PriorityClass } | undefined;
      for (const model of models ?? this.#models.keys()) {
        const classes = this.#models.get(model);
        if (!classes) continue;
        for (const c of classes) {
          const w = c.peek();
          if (!w) continue;
          if (
            !best ||
            PRIORITIES.indexOf(w.key.priority) < PRIORITIES.indexOf(best.w.key.priority) ||
            (w.key.priority === best.w.key.priority && w.seq < best.w.seq)
          ) {
            best = { w, c };
          }
          break;
        }
      }
      if (!best) break;
      const preferring =
        runner !== undefined && best.w.passedOver < MAX_PASSED_OVER ? best.c.preferring(runner) : undefined;
      const w = preferring ?? best.w;
      best.c.take(w);
      this.#waiting--;
      this.#prune(w.key.model);
      w.woken = true;
      this.#walking.set(w.key.model, (this.#walking.get(w.key.model) ?? 0) + 1);
      w.wake();
      woken++;
    }
    return woken;
  }

  /**
   * `runner` may have room for `free` more calls of `models` (any, when undefined): wakes that
   * many waiters of those models' lines and of the /invoke line (''), which any runner may take;
   * the room listener of the gateway's pool (gateway/fleet/runner-entry.ts).
   */
  freed(runner: string, models: readonly string[] | undefined, free: number): void {
    this.wake(free, models ? [...models, ''] : undefined, runner);
  }

  /** Wakes every call waiting for `model`: each walks once, to learn what changed (a start failed). */
  wakeAll(model: string): void {
    this.wake(this.waitingFor(model), [model]);
  }

  /** Offers the head of each model's queue: the fallback for capacity this gateway cannot see. */
  wakeHeads(): number {
    let woken = 0;
    for (const model of [...this.#models.keys()]) woken += this.wake(1, [model]);
    return woken;
  }

  /** The queue's contents for GET /v1/queue. */
  snapshot(): QueueSnapshot {
    const now = this.clock.now();
    const models: QueueSnapshot['models'][number][] = [];
    for (const [model, classes] of this.#models) {
      classes.forEach((c, rank) => {
        if (c.size === 0) return;
        const flows: Record<string, number> = {};
        let oldest = now;
        for (const [flow, list] of c.flows) {
          flows[flow] = list.length;
          for (const w of list) oldest = Math.min(oldest, w.joinedAt);
        }
        models.push({ model, priority: PRIORITIES[rank]!, waiting: c.size, flows, oldestWaitMs: now - oldest });
      });
    }
    return { waiting: this.#waiting, models };
  }

  /** Stops the fallback; waiters still waiting end at their deadline or abort. */
  close(): void {
    this.#fallback?.abort();
    this.#fallback = undefined;
  }

  /** @internal Counts a waiter in, or says which bound it would pass. */
  admit(flow: string, model: string): Extract<WaitEnd, { kind: 'full' }> | undefined {
    const { maxQueued, maxQueuedPerFlow, maxQueuedPerModel = maxQueued } = this.#options;
    if (this.#members >= maxQueued) return { kind: 'full', scope: 'total', limit: maxQueued };
    const ofModel = this.#perModel.get(model) ?? 0;
    if (ofModel >= maxQueuedPerModel) return { kind: 'full', scope: 'model', limit: maxQueuedPerModel };
    const ofFlow = this.#perFlow.get(flow) ?? 0;
    if (ofFlow >= maxQueuedPerFlow) return { kind: 'full', scope: 'flow', limit: maxQueuedPerFlow };
    this.#perFlow.set(flow, ofFlow + 1);
    this.#perModel.set(model, ofModel + 1);
    this.#members++;
    return undefined;
  }

  /** @internal Frees a member's room. */
  release(w: Waiter): void {
    this.#settled(w);
    this.#members--;
    countDown(this.#perFlow, w.key.flow);
    countDown(this.#perModel, w.key.model);
  }

  /** @internal Puts a waiter in line; one woken before goes back to the head of its turn. */
  link(w: Waiter, again: boolean): void {
    this.#settled(w);
    let classes = this.#models.get(w.key.model);
    if (!classes) {
      classes = PRIORITIES.map(() => new PriorityClass());
      this.#models.set(w.key.model, classes);
    }
    classes[PRIORITIES.indexOf(w.key.priority)]!.add(w, again);
    this.#waiting++;
    this.#startFallback();
  }

  /** @internal Takes a waiter out of line (it hung up or its deadline came). */
  unlink(w: Waiter): void {
    const c = this.#models.get(w.key.model)?.[PRIORITIES.indexOf(w.key.priority)];
    if (c?.remove(w)) {
      this.#waiting--;
      this.#prune(w.key.model);
    }
  }

  /** A woken waiter waits again or leaves: it no longer holds its model's turn. */
  #settled(w: Waiter): void {
    if (!w.woken) return;
    w.woken = false;
    const n = (this.#walking.get(w.key.model) ?? 1) - 1;
    if (n <= 0) this.#walking.delete(w.key.model);
    else this.#walking.set(w.key.model, n);
  }

  #prune(model: string): void {
    if (this.waitingFor(model) === 0) this.#models.delete(model);
  }

  /** Runs the fallback while anyone waits. */
  #startFallback(): void {
    const { retryAllDelay, clock } = this.#options;
    if (this.#fallback || retryAllDelay <= 0) return;
    const stop = new AbortController();
    this.#fallback = stop;
    const tick = (): void => {
      if (this.#fallback !== stop) return;
      if (this.#waiting === 0) {
        this.#fallback = undefined;
        return;
      }
      this.wakeHeads();
      void clock.sleep(retryAllDelay, stop.signal).then(tick, () => {});
    };
    void clock.sleep(retryAllDelay, stop.signal).then(tick, () => {});
  }
}

/** Takes one from `key`'s count, forgetting the key at zero. */
function countDown(counts: Map<string, number>, key: string): void {
  const n = (counts.get(key) ?? 1) - 1;
  if (n <= 0) counts.delete(key);
  else counts.set(key, n);
}
