/**
 * Many deadlines on one timer: the wait queue's waiters each have one, and nearly every wait
 * ends (woken) long before it. One sleep per wait, cancelled at its wake through an
 * AbortController, cost a busy queue about 4 % of the gateway's CPU (the controller, its abort
 * event and the listeners; docs/benchmarks.md). Here the deadlines sit in a binary heap by time,
 * and one sleep on the clock is armed for the earliest: adding a later deadline or removing one
 * touches no timer at all. A sleep armed for a deadline removed since ends early, finds nothing
 * due and arms for the next; a new earliest deadline re-arms, and an empty heap disarms, so no
 * timer outlives the deadlines it serves.
 *
 * Time is the injected {@link Clock}'s, so fake and virtual clocks drive it as they drive sleeps.
 */
import type { Clock } from '../../placer/kernel/index.ts';

/** One deadline: `fire` runs once when `at` comes, unless it was removed before. */
export interface Deadline {
  readonly at: number;
  /** Its place in the heap; -1 once fired or removed. */
  index: number;
  readonly fire: () => void;
}

/** Why an armed sleep is cancelled: one value, since an abort without a reason builds a DOMException each time. */
const DISARMED: unknown = Object.freeze({ reason: 'the deadlines changed' });

export class Deadlines {
  readonly #clock: Clock;
  readonly #heap: Deadline[] = [];
  /** The armed sleep: until when, and how to cancel it. */
  #armed: { readonly at: number; readonly stop: AbortController } | undefined;

  constructor(clock: Clock) {
    this.#clock = clock;
  }

  /** Deadlines pending. */
  get size(): number {
    return this.#heap.length;
  }

  /** Runs `fire` at `at` (on the clock), unless {@link remove}d first. */
  add(at: number, fire: () => void): Deadline {
    const d: Deadline = { at, fire, index: this.#heap.length };
    this.#heap.push(d);
    this.#up(d.index);
    if (this.#armed === undefined || at < this.#armed.at) this.#arm();
    return d;
  }

  /** Forgets a deadline that has not fired; a fired or removed one is left as it is. */
  remove(d: Deadline): void {
    const i = d.index;
    if (i < 0 || this.#heap[i] !== d) return;
    d.index = -1;
    const last = this.#heap.pop()!;
    if (last !== d) {
      this.#heap[i] = last;
      last.index = i;
      this.#down(i);
      this.#up(last.index);
    }
    if (this.#heap.length === 0) this.#disarm();
  }

  /** Arms one sleep for the earliest deadline, cancelling one armed for later. */
  #arm(): void {
    this.#disarm();
    const first = this.#heap[0];
    if (first === undefined) return;
    const armed = { at: first.at, stop: new AbortController() };
    this.#armed = armed;
    this.#clock.sleep(first.at - this.#clock.now(), armed.stop.signal).then(
      () => {
        if (this.#armed !== armed) return;
        this.#armed = undefined;
        this.#fireDue();
      },
      () => {},
    );
  }

  #disarm(): void {
    this.#armed?.stop.abort(DISARMED);
    this.#armed = undefined;
  }

  /** Fires every deadline that has come, earliest first, then arms for the next. */
  #fireDue(): void {
    const now = this.#clock.now();
    for (let first = this.#heap[0]; first !== undefined && first.at <= now; first = this.#heap[0]) {
      this.remove(first);
      first.fire();
    }
    if (this.#heap.length > 0 && this.#armed === undefined) this.#arm();
  }

  #up(i: number): void {
    const heap = this.#heap;
    const d = heap[i]!;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      const p = heap[parent]!;
      if (p.at <= d.at) break;
      heap[i] = p;
      p.index = i;
      i = parent;
    }
    heap[i] = d;
    d.index = i;
  }

  #down(i: number): void {
    const heap = this.#heap;
    const n = heap.length;
    const d = heap[i]!;
    for (;;) {
      let child = 2 * i + 1;
      if (child >= n) break;
      if (child + 1 < n && heap[child + 1]!.at < heap[child]!.at) child++;
      const c = heap[child]!;
      if (c.at >= d.at) break;
      heap[i] = c;
      c.index = i;
      i = child;
    }
    heap[i] = d;
    d.index = i;
  }
}
