/**
 * Admission for the simulated engine, as vLLM's scheduler does it in outline: at most
 * `maxNumSeqs` sequences run at once, the rest wait first-in first-out in a bounded queue,
 * and a request that finds the queue full is refused instead of growing it.
 */
import { SimAbortedError, SimQueueFullError } from './errors.ts';

/** How a request that held a slot ended; it decides which total it is counted in. */
export type SlotOutcome = 'completed' | 'aborted';

/** Gives a slot back. Idempotent: only the first call counts, so `finally` blocks may repeat it. */
export type Release = (outcome?: SlotOutcome) => void;

/** Lifetime totals; `received` = `completed` + `aborted` + `rejected` + whatever is in flight. */
export interface SchedulerTotals {
  /** Requests offered to {@link SimScheduler.acquire}, including refused ones. */
  readonly received: number;
  /** Requests that ran to their last byte. */
  readonly completed: number;
  /** Requests whose client left, while waiting or while running. */
  readonly aborted: number;
  /** Requests refused because the queue was full (answered 429). */
  readonly rejected: number;
}

/** Limits of a {@link SimScheduler}. */
export interface SimSchedulerLimits {
  readonly maxNumSeqs: number;
  readonly maxQueue: number;
}

interface Waiter {
  grant(): void;
}

/** Slot admission with a bounded FIFO; counts what the `/metrics` gauges and counters publish. */
export class SimScheduler {
  readonly #maxNumSeqs: number;
  readonly #maxQueue: number;
  #running = 0;
  // A Set keeps insertion order and deletes in O(1), which an aborting waiter needs.
  readonly #waiting = new Set<Waiter>();
  #received = 0;
  #completed = 0;
  #aborted = 0;
  #rejected = 0;

  constructor(limits: SimSchedulerLimits) {
    this.#maxNumSeqs = limits.maxNumSeqs;
    this.#maxQueue = limits.maxQueue;
  }

  /** Requests holding a slot now. */
  get running(): number {
    return this.#running;
  }

  /** Requests waiting for a slot now. */
  get waiting(): number {
    return this.#waiting.size;
  }

  /** A snapshot of the lifetime totals. */
  totals(): SchedulerTotals {
    return { received: this.#received, completed: this.#completed, aborted: this.#aborted, rejected: this.#rejected };
  }

  /**
   * Waits for a slot. The queue-full decision is made at once, so a caller can answer 429
   * without having sent anything else.
   * @throws {SimQueueFullError} when `maxQueue` requests are already waiting.
   * @throws {SimAbortedError} when `signal` fires before a slot is granted; the request leaves the queue.
   */
  acquire(signal?: AbortSignal): Promise<Release> {
    this.#received += 1;
    if (signal?.aborted) {
      this.#aborted += 1;
      return Promise.reject(new SimAbortedError());
    }
    // Overtaking a non-empty queue would break FIFO, so a free slot alone is not enough.
    if (this.#running < this.#maxNumSeqs && this.#waiting.size === 0) {
      this.#running += 1;
      return Promise.resolve(this.#release());
    }
    if (this.#waiting.size >= this.#maxQueue) {
      this.#rejected += 1;
      return Promise.reject(new SimQueueFullError(this.#maxQueue));
    }
    return new Promise<Release>((resolve, reject) => {
      const onAbort = (): void => {
        this.#waiting.delete(waiter);
        this.#aborted += 1;
        reject(new SimAbortedError());
      };
      const waiter: Waiter = {
        grant: () => {
          signal?.removeEventListener('abort', onAbort);
          this.#running += 1;
          resolve(this.#release());
        },
      };
      this.#waiting.add(waiter);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  #release(): Release {
    let released = false;
    return (outcome = 'completed') => {
      if (released) return;
      released = true;
      this.#running -= 1;
      if (outcome === 'completed') this.#completed += 1;
      else this.#aborted += 1;
      this.#pump();
    };
  }

  #pump(): void {
    while (this.#running < this.#maxNumSeqs) {
      const next = this.#waiting.values().next();
      if (next.done) return;
      this.#waiting.delete(next.value);
      next.value.grant();
    }
  }
}
