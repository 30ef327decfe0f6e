/**
 * The batch room's figures: batches by status and lines waiting, read when metrics are
 * collected (through @opentelemetry/api only, a no-op until an SDK is wired), lines ended by
 * outcome as a counter, and lines a second over the last minute for GET /v1/stats.
 */
import type { MeterProvider } from '@opentelemetry/api';
import type { BatchStatus } from '../store/index.ts';

/** How a line's call ended, for the counter: in the output file, in the error file, or refused busy and retried. */
export type LineOutcome = 'completed' | 'failed' | 'retried';

/** The batch room's snapshot for GET /v1/stats. */
export interface BatchStats {
  /** This gateway's batches by status: those it runs now, and those it ended since it started. */
  batches: Partial<Record<BatchStatus, number>>;
  /** Lines of the chunks this gateway holds, not yet released. */
  linesWaiting: number;
  /** Lines released and not yet answered. */
  linesInFlight: number;
  /** Lines ended (completed or failed) a second, over the last minute. */
  linesPerSecond: number;
}

/** Length of the lines-per-second window, in ms. */
const RATE_WINDOW_MS = 60_000;
/** The window's buckets, so old ends leave it a bucket at a time. */
const RATE_BUCKETS = 12;

/** Lines ended over the last minute, in buckets on the gateway's clock. */
export class LineRate {
  readonly #now: () => number;
  readonly #counts = new Array<number>(RATE_BUCKETS).fill(0);
  #bucket: number;

  constructor(now: () => number) {
    this.#now = now;
    this.#bucket = this.#current();
  }

  /** Counts one line ended now. */
  add(): void {
    this.#roll();
    this.#counts[this.#bucket % RATE_BUCKETS]!++;
  }

  /** Lines a second over the window. */
  perSecond(): number {
    this.#roll();
    return this.#counts.reduce((a, b) => a + b, 0) / (RATE_WINDOW_MS / 1000);
  }

  #current(): number {
    return Math.floor(this.#now() / (RATE_WINDOW_MS / RATE_BUCKETS));
  }

  #roll(): void {
    const current = this.#current();
    for (let b = Math.max(this.#bucket + 1, current - RATE_BUCKETS + 1); b <= current; b++) {
      this.#counts[b % RATE_BUCKETS] = 0;
    }
    this.#bucket = Math.max(this.#bucket, current);
  }
}

/** The batch room's instruments, reading `stats` when metrics are collected. */
export interface BatchMetrics {
  /** Counts a line's end. */
  line(outcome: LineOutcome): void;
}

/** Creates the instruments on a meter of `provider`. */
export function createBatchMetrics(provider: MeterProvider, stats: () => BatchStats): BatchMetrics {
  const meter = provider.getMeter('sluice-gateway');
  const batches = meter.createObservableGauge('sluice_batch_batches', {
    description: "This gateway's batches by status: running now, or ended since it started",
  });
  const waiting = meter.createObservableGauge('sluice_batch_lines_waiting', {
    description: 'Lines of the batch chunks this gateway holds, not yet released to the call path',
  });
  meter.addBatchObservableCallback(
    (observe) => {
      const now = stats();
      for (const [status, n] of Object.entries(now.batches)) observe.observe(batches, n, { status });
      observe.observe(waiting, now.linesWaiting);
    },
    [batches, waiting],
  );
  const lines = meter.createCounter('sluice_batch_lines', {
    description: 'Batch lines ended, by outcome (completed, failed) or refused busy and retried (retried)',
  });
  const attributes = {
    completed: { outcome: 'completed' },
    failed: { outcome: 'failed' },
    retried: { outcome: 'retried' },
  } as const;
  return { line: (outcome) => lines.add(1, attributes[outcome]) };
}
