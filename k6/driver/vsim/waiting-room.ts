/**
 * Where the simulator keeps calls that found every runner full, until a slot frees (the shortcut
 * described in sluice.ts): each call's passes fall on its own `retryAllDelay` beat, so the call to
 * wake for a freed slot is the one whose beat comes next.
 */

/** A call waiting for its next pass; `phase` is where on the `retryAllDelay` beat its passes fall. */
interface Waiter {
  readonly phase: number;
  readonly seq: number;
  readonly pass: (at: number) => void;
}

/**
 * Buckets the beat is cut into: a wake looks in one, a park inserts into one, so a room of tens of
 * thousands of waiting calls (overload) never moves more than a bucket's share of them.
 */
const BUCKETS = 1_024;

/** Calls that found every runner full, by the phase of their retry beat. */
export class WaitingRoom {
  readonly #beat: number;
  /** Bucket k holds the phases in [k, k + 1) x beat / BUCKETS, sorted by phase, then by when they started waiting. */
  readonly #buckets: Waiter[][];
  /** Bit k set while bucket k holds a waiter, so a wake skips empty buckets 32 at a time. */
  readonly #occupied: Uint32Array;
  #size = 0;
  #seq = 0;

  /** @param retryAllDelay the walk's pause between passes, ms (0: the next pass comes at once). */
  constructor(retryAllDelay: number) {
    this.#beat = retryAllDelay;
    const buckets = retryAllDelay > 0 ? BUCKETS : 1;
    this.#buckets = Array.from({ length: buckets }, () => []);
    this.#occupied = new Uint32Array(Math.ceil(buckets / 32));
  }

  /** Calls waiting. */
  get size(): number {
    return this.#size;
  }

  /** A pass at `failedAt` found every runner full; `pass` runs the call's next pass when woken. */
  park(failedAt: number, pass: (at: number) => void): void {
    const waiter: Waiter = { phase: this.#phaseOf(failedAt), seq: this.#seq++, pass };
    const k = this.#bucketOf(waiter.phase);
    const bucket = this.#buckets[k]!;
    bucket.splice(firstAtOrAfter(bucket, waiter.phase, waiter.seq), 0, waiter);
    this.#occupied[k >> 5]! |= 1 << (k & 31);
    this.#size++;
  }

  /**
   * A slot freed at `now`: removes the waiting call whose next pass comes first and returns it with
   * that pass's time; undefined when none waits.
   */
  wake(now: number): { at: number; pass: (at: number) => void } | undefined {
    if (this.#size === 0) return undefined;
    const phase = this.#phaseOf(now);
    let k = this.#bucketOf(phase);
    let i = firstAtOrAfter(this.#buckets[k]!, phase, -1);
    if (i === this.#buckets[k]!.length) {
      // None at or after `phase` in its bucket: the first of the next occupied one, round the beat.
      k = this.#occupiedFrom(k + 1);
      i = 0;
    }
    const bucket = this.#buckets[k]!;
    const [waiter] = bucket.splice(i, 1) as [Waiter];
    if (bucket.length === 0) this.#occupied[k >> 5]! &= ~(1 << (k & 31));
    this.#size--;
    const wait = this.#beat > 0 ? (waiter.phase - phase + this.#beat) % this.#beat : 0;
    return { at: now + wait, pass: waiter.pass };
  }

  #phaseOf(at: number): number {
    return this.#beat > 0 ? at % this.#beat : 0;
  }

  #bucketOf(phase: number): number {
    return Math.min(this.#buckets.length - 1, Math.floor((phase / (this.#beat || 1)) * this.#buckets.length));
  }

  /** The first occupied bucket from `from` on, wrapping round; some bucket must be occupied. */
  #occupiedFrom(from: number): number {
    const n = this.#buckets.length;
    let k = from < n ? from : 0;
    // Every word is looked at once, the starting one twice (its bits before `from` on the way back).
    for (let words = 0; words <= this.#occupied.length; words++) {
      const bits = this.#occupied[k >> 5]! >>> (k & 31);
      if (bits !== 0) return k + 31 - Math.clz32(bits & -bits);
      k = ((k >> 5) + 1) * 32;
      if (k >= n) k = 0;
    }
    throw new Error('waiting room: no occupied bucket although calls wait');
  }
}

/** Index of the first waiter in `waiters` (sorted by phase, then seq) at or after (phase, seq). */
function firstAtOrAfter(waiters: readonly Waiter[], phase: number, seq: number): number {
  let lo = 0;
  let hi = waiters.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    const w = waiters[mid]!;
    if (w.phase < phase || (w.phase === phase && w.seq < seq)) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
