/**
 * The simulator's clock: a queue of events ordered by virtual time. Nothing waits for real time;
 * the simulation takes the earliest event, moves the clock to it and handles it, so an hour of a
 * thousand-engine fleet costs only the work of its events.
 *
 * Ties are broken by the order events were scheduled in, so a run is a pure function of its
 * inputs: two events due at the same millisecond are always handled in the same order.
 */

/** A binary min-heap of events keyed by (time, insertion number). */
export class EventQueue<T> {
  // Three parallel arrays rather than an array of objects: no allocation per event beyond the
  // payload, and comparisons read numbers only.
  readonly #times: number[] = [];
  readonly #seqs: number[] = [];
  readonly #items: T[] = [];
  #nextSeq = 0;
  #now = 0;

  /** The time of the event handled last (0 before the first). */
  get now(): number {
    return this.#now;
  }

  /** Events waiting. */
  get size(): number {
    return this.#items.length;
  }

  /** Time of the earliest event; Infinity when there is none. */
  peekTime(): number {
    return this.#items.length > 0 ? this.#times[0]! : Infinity;
  }

  /**
   * Schedules `item` at `time`.
   * @throws {RangeError} when `time` is not a number or is before the event handled last: the
   *   past cannot be changed, and a NaN would corrupt the heap's order.
   */
  push(time: number, item: T): void {
    if (!(time >= this.#now)) throw new RangeError(`event time ${time} is before the clock (${this.#now})`);
    this.#times.push(time);
    this.#seqs.push(this.#nextSeq++);
    this.#items.push(item);
    this.#siftUp(this.#items.length - 1);
  }

  /** Removes the earliest event, moves the clock to its time and returns it; undefined when empty. */
  pop(): T | undefined {
    const n = this.#items.length;
    if (n === 0) return undefined;
    const item = this.#items[0]!;
    this.#now = this.#times[0]!;
    const lastTime = this.#times.pop()!;
    const lastSeq = this.#seqs.pop()!;
    const lastItem = this.#items.pop()!;
    if (n > 1) {
      this.#times[0] = lastTime;
      this.#seqs[0] = lastSeq;
      this.#items[0] = lastItem;
      this.#siftDown(0);
    }
    return item;
  }

  #before(a: number, b: number): boolean {
    const ta = this.#times[a]!;
    const tb = this.#times[b]!;
    return ta < tb || (ta === tb && this.#seqs[a]! < this.#seqs[b]!);
  }

  #swap(a: number, b: number): void {
    const t = this.#times[a]!;
    this.#times[a] = this.#times[b]!;
    this.#times[b] = t;
    const s = this.#seqs[a]!;
    this.#seqs[a] = this.#seqs[b]!;
    this.#seqs[b] = s;
    const item = this.#items[a]!;
    this.#items[a] = this.#items[b]!;
    this.#items[b] = item;
  }

  #siftUp(i: number): void {
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!this.#before(i, parent)) return;
      this.#swap(i, parent);
      i = parent;
    }
  }

  #siftDown(i: number): void {
    const n = this.#items.length;
    for (;;) {
      const left = 2 * i + 1;
      if (left >= n) return;
      const right = left + 1;
      const child = right < n && this.#before(right, left) ? right : left;
      if (!this.#before(child, i)) return;
      this.#swap(i, child);
      i = child;
    }
  }
}
