/**
 * Admission: a fixed number of slots. A call either gets one now or is turned away now;
 * a runner never queues, so the gateway can offer the call elsewhere at once.
 */
import { MAX_TIMER_MS } from '../placer/kernel/index.ts';

/** Gives back a slot; calling it more than once is harmless. */
export type Release = () => void;

/** A counting gate with no queue. */
export class Slots {
  readonly #total: number;
  #inUse = 0;
  #acquired = 0;
  /** Settles the waiters of {@link Slots.emptied} when the last slot comes back; one promise shared by all. */
  #onEmpty: { promise: Promise<void>; resolve: () => void } | undefined;

  constructor(total: number) {
    this.#total = total;
  }

  /** Slots configured. */
  get total(): number {
    return this.#total;
  }

  /** Slots held by running calls. */
  get inUse(): number {
    return this.#inUse;
  }

  /** Slots taken since the runner started (the calls admitted, for GET /metrics). */
  get acquired(): number {
    return this.#acquired;
  }

  /** Takes a slot, or returns undefined when none is free. */
  tryAcquire(): Release | undefined {
    if (this.#inUse >= this.#total) return undefined;
    this.#inUse++;
    this.#acquired++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.#inUse--;
      if (this.#inUse === 0 && this.#onEmpty) {
        this.#onEmpty.resolve();
        this.#onEmpty = undefined;
      }
    };
  }

  /**
   * Resolves once no slot is in use: at once when none is, else when the last one is released.
   * A drain waits on this instead of polling; it never rejects, so bound it with a timer.
   */
  emptied(): Promise<void> {
    if (this.#inUse === 0) return Promise.resolve();
    if (!this.#onEmpty) {
      let resolve!: () => void;
      const promise = new Promise<void>((r) => (resolve = r));
      this.#onEmpty = { promise, resolve };
    }
    return this.#onEmpty.promise;
  }
}

/**
 * Resolves once no call holds a slot, or after `timeout` ms, whichever comes first: the slots
 * say when they empty, so a drain ends the moment its last call does.
 */
export async function callsFinished(slots: Slots, timeout: number): Promise<void> {
  if (slots.inUse === 0 || !(timeout > 0)) return;
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<void>((resolve) => (timer = setTimeout(resolve, Math.min(timeout, MAX_TIMER_MS))));
  try {
    await Promise.race([slots.emptied(), expired]);
  } finally {
    clearTimeout(timer);
  }
}
