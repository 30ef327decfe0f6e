/**
 * Fault knobs: refusals drawn at a configured rate, a loading period after start, and a crash on
 * the Nth call. They exist so that retries, busy handling and supervision are exercised against a
 * real server; each one behaves as the matching real failure does on the wire, before any output.
 */
import type { OutgoingHttpHeaders } from 'node:http';
import type { ApiError } from './refusals.ts';
import type { ResolvedSimEngineOptions } from './options.ts';
import { internalError, refusal } from './refusals.ts';

/** The statuses fault injection can answer with. */
export type InjectedStatus = 429 | 503 | 500;

/** Lifetime fault counters. */
export interface FaultTotals {
  /** Calls refused by injection, by status. */
  readonly injected: Readonly<Record<InjectedStatus, number>>;
  /** Requests answered 503 `model_loading` during the startup delay. */
  readonly loading: number;
  /** Times the crash fired (0 or 1). */
  readonly crashes: number;
}

/** An error to answer with and the headers that go with it. */
export interface FaultAnswer {
  readonly error: ApiError;
  readonly headers: OutgoingHttpHeaders;
}

const ANSWERS: Readonly<Record<InjectedStatus, FaultAnswer>> = {
  429: { error: refusal(429, 'simulated rate limit; retry later'), headers: { 'retry-after': '1' } },
  503: { error: refusal(503, 'simulated overload; retry later'), headers: { 'retry-after': '1' } },
  // A failure inside the model: nothing says a retry would fare better, so no Retry-After.
  500: { error: internalError('simulated engine error'), headers: {} },
};

/** The fault state of one engine; plain counters and a start time, no timers. */
export class SimFaults {
  readonly #options: ResolvedSimEngineOptions;
  readonly #loadedAt: number;
  readonly #injected: Record<InjectedStatus, number> = { 429: 0, 503: 0, 500: 0 };
  #loading = 0;
  #calls = 0;
  #crashes = 0;

  /** Starts the startup delay now, on `options.clock`. */
  constructor(options: ResolvedSimEngineOptions) {
    this.#options = options;
    this.#loadedAt = options.clock.now() + options.startupDelayMs;
  }

  /** A snapshot of the counters. */
  totals(): FaultTotals {
    return { injected: { ...this.#injected }, loading: this.#loading, crashes: this.#crashes };
  }

  /**
   * The 503 to answer while the startup delay lasts, counted; undefined once loaded. Read on the
   * injected clock at each request, so a test moves time instead of waiting for it.
   */
  loadingAnswer(): FaultAnswer | undefined {
    const remaining = this.#loadedAt - this.#options.clock.now();
    if (remaining <= 0) return undefined;
    this.#loading += 1;
    return {
      error: refusal(503, `model ${this.#options.models[0]!} is loading; retry later`),
      headers: { 'retry-after': String(Math.max(1, Math.ceil(remaining / 1000))) },
    };
  }

  /** Counts a call that reached a loaded engine; true exactly once, for call number `crashOnCall`. */
  countCall(): boolean {
    this.#calls += 1;
    if (this.#calls !== this.#options.crashOnCall) return false;
    this.#crashes += 1;
    return true;
  }

  /**
   * Draws whether this call is refused and with what, counted. One draw of `random` partitions
   * [0, 1) by the rates; no draw at all when every rate is 0, so that engines without faults
   * consume the random source exactly as before fault knobs existed.
   */
  drawFailure(): FaultAnswer | undefined {
    const rates = this.#options.failureRate;
    if (rates[429] === 0 && rates[503] === 0 && rates[500] === 0) return undefined;
    const draw = this.#options.random();
    let edge = 0;
    for (const status of [429, 503, 500] as const) {
      edge += rates[status];
      if (draw < edge) {
        this.#injected[status] += 1;
        return ANSWERS[status];
      }
    }
    return undefined;
  }
}
