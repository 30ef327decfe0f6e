/**
 * A per-runner circuit breaker, as the Rust inference routers converge on: it opens after
 * `threshold` failures before commit in a row, passes the runner over while open, half-opens
 * after `openFor` (or as soon as an active probe finds the runner answering), and closes after
 * `closeAfter` successes in a row while half-open. A failure while half-open opens it again.
 */
import type { Clock } from '../../placer/kernel/index.ts';

/** Where the breaker stands. */
export type BreakerState = 'closed' | 'open' | 'half-open';

/** Breaker settings. */
export interface BreakerOptions {
  /** Failures before commit, in a row, that open the breaker. @default see breakerDefaults */
  threshold: number;
  /** How long an open breaker passes the runner over, ms. @default see breakerDefaults */
  openFor: number;
  /** Successes in a row, while half-open, that close it. @default see breakerDefaults */
  closeAfter: number;
  /** The gateway's clock; `openFor` is measured on it. */
  clock: Clock;
}

/** Fn-free defaults; see BreakerOptions. */
export const breakerDefaults = Object.freeze({ threshold: 5, openFor: 30_000, closeAfter: 2 });

/** One runner's breaker. */
export class CircuitBreaker {
  readonly #options: BreakerOptions;
  #state: BreakerState = 'closed';
  #failures = 0;
  #successes = 0;
  #openedAt = 0;

  constructor(options: BreakerOptions) {
    this.#options = options;
  }

  /** The state now; an open breaker past its time reads half-open. */
  get state(): BreakerState {
    if (this.#state === 'open' && this.#options.clock.now() - this.#openedAt >= this.#options.openFor) this.#halfOpen();
    return this.#state;
  }

  /** True when a call may be offered to the runner. */
  allows(): boolean {
    return this.state !== 'open';
  }

  /** The runner answered (placed or busy): it is alive. */
  success(): void {
    if (this.state === 'half-open') {
      if (++this.#successes >= this.#options.closeAfter) this.#close();
    } else this.#failures = 0;
  }

  /** The runner could not be reached before commit. */
  failure(): void {
    const state = this.state;
    this.#failures++;
    if (state === 'half-open' || (state === 'closed' && this.#failures >= this.#options.threshold)) {
      this.#state = 'open';
      this.#openedAt = this.#options.clock.now();
      this.#successes = 0;
    }
  }

  /** An active probe found the runner answering: try it again without waiting out openFor. */
  probeSucceeded(): void {
    if (this.#state === 'open') this.#halfOpen();
  }

  #halfOpen(): void {
    this.#state = 'half-open';
    this.#successes = 0;
  }

  #close(): void {
    this.#state = 'closed';
    this.#failures = 0;
    this.#successes = 0;
  }
}
