/**
 * How long this process's event loop has just gone without running timers. A runner that was
 * stopped (SIGSTOP), swapped out or starved finds, when it runs again, calls that waited in its
 * sockets all that time: their gateways may have given up on them. It reads them over its next
 * few turns (new connections are accepted in one turn and read in a later one), so a stall is
 * still reported for a short while after the loop runs again.
 */
import { performance } from 'node:perf_hooks';

/** A timer that notes when it last ran, and the last stall it saw. */
export class StallWatch {
  readonly #interval: number;
  readonly #memory: number;
  readonly #now: () => number;
  #last: number;
  /**
   * The stalls seen within the memory that no later, longer one outranks, oldest first: their
   * lengths fall from first to last, so the first is the longest to report. A shorter stall
   * after a long one never hides it (a busy machine makes such a second stall likely).
   */
  readonly #stalls: { gap: number; seenAt: number }[] = [];
  #timer: NodeJS.Timeout | undefined;

  /**
   * `interval`: how often the loop is checked, in ms; a stall is measured beyond it.
   * `memory`: how long after the loop runs again a stall is still reported, in ms.
   * `now`: the clock, in ms (a spec's fake one).
   */
  constructor(interval = 100, memory = 1000, now: () => number = () => performance.now()) {
    this.#interval = interval;
    this.#memory = memory;
    this.#now = now;
    this.#last = now();
  }

  start(): void {
    this.#last = this.#now();
    this.#timer ??= setInterval(() => {
      const now = this.#now();
      const gap = now - this.#last - this.#interval;
      if (gap > this.#interval) {
        while (this.#stalls.length > 0 && this.#stalls.at(-1)!.gap <= gap) this.#stalls.pop();
        this.#stalls.push({ gap, seenAt: now });
      }
      this.#last = now;
    }, this.#interval);
    this.#timer.unref();
  }

  /**
   * The stall that is going on (the loop has not run its timers for this long, beyond the
   * interval) or the longest that ended within `memory` ms, whichever is longer, in ms; 0 when
   * there is none.
   */
  stalled(): number {
    const now = this.#now();
    while (this.#stalls.length > 0 && now - this.#stalls[0]!.seenAt >= this.#memory) this.#stalls.shift();
    const current = now - this.#last - this.#interval;
    return Math.max(0, current, this.#stalls[0]?.gap ?? 0);
  }

  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
  }
}
