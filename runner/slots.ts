/**
 * Admission: a fixed number of slots. A call either gets one now or is turned away now;
 * a runner never queues, so the gateway can offer the call elsewhere at once.
 */

/** Gives back a slot; calling it more than once is harmless. */
export type Release = () => void;

/** A counting gate with no queue. */
export class Slots {
  readonly #total: number;
  #inUse = 0;

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

  /** Takes a slot, or returns undefined when none is free. */
  tryAcquire(): Release | undefined {
    if (this.#inUse >= this.#total) return undefined;
    this.#inUse++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.#inUse--;
    };
  }
}
