/**
 * GET /v1/stats: a JSON snapshot of the gateway for scripts and the dashboard. Counts since start
 * come from the gateway's own counters (metrics.ts); rates and time to first token per model from
 * a small windowed recorder, {@link StatsWindow}: a ring of 10 s buckets over the last 5 minutes,
 * each keeping a bounded sample, so its memory is bounded whatever the traffic.
 */
import { checksFor } from '../../placer/kernel/index.ts';
import type { Clock } from '../../placer/kernel/index.ts';
import type { CallOutcome, Priority } from '../http/index.ts';
import { GatewayConfigError } from '../errors.ts';
import type { GatewayMetrics } from './metrics.ts';

/** What GET /v1/queue shows: counts per model, priority and flow, and the oldest wait. */
export interface QueueSnapshot {
  /** Calls waiting now (not counting woken ones walking the pool). */
  readonly waiting: number;
  readonly models: readonly {
    readonly model: string;
    readonly priority: Priority;
    readonly waiting: number;
    /** Waiting calls per flow. */
    readonly flows: Readonly<Record<string, number>>;
    /** How long the oldest of them has waited, in ms. */
    readonly oldestWaitMs: number;
  }[];
}

/** Two percentiles of a sample, in ms. */
export interface Percentiles {
  p50: number;
  p90: number;
}

/** One bucket of a model's series: its start (ms since the epoch), its TTFT percentiles, its calls. */
export interface SeriesPoint {
  t: number;
  p50: number | null;
  p90: number | null;
  calls: number;
}

/** What GET /v1/stats answers. docs/api.md describes each field. */
export interface GatewayStats {
  /** When the snapshot was taken, ms since the epoch. */
  at: number;
  /** The span of `models`' series and percentiles, in s. */
  windowSeconds: number;
  calls: { total: number; perSecond: number; byOutcome: Record<CallOutcome, number> };
  errors: { byCode: Record<string, number> };
  models: Record<string, { ttftMs: Percentiles | null; series: SeriesPoint[] }>;
  queue: QueueSnapshot;
  /** This gateway's detached calls by status (gateway/detached/detached.ts, `counts`). */
  detached: DetachedCounts;
}

/** Detached calls by status: `queued` and `running` now, the rest since the gateway started. */
export interface DetachedCounts {
  queued: number;
  running: number;
  accepted: number;
  succeeded: number;
  failed: number;
  cancelled: number;
  expired: number;
}

/** How a {@link StatsWindow} is set up. */
export interface StatsWindowOptions {
  clock: Clock;
  /** Width of a bucket, ms. @default 10000 */
  bucketMs?: number;
  /** Buckets kept: the window is bucketMs times this. @default 30 */
  buckets?: number;
  /** TTFT values kept per model and bucket (a uniform sample of the bucket's calls). @default 128 */
  sampleSize?: number;
  /** Models tracked at once; past it, the one idle longest is dropped. @default 256 */
  maxModels?: number;
  /** Draws which values the sample keeps. @default Math.random */
  random?: () => number;
}

/** The seconds the calls-per-second rate is taken over. */
const RATE_SECONDS = 10;

/** One model's ring of buckets. */
class ModelRing {
  readonly starts: number[];
  readonly calls: number[];
  /** Sampled TTFT values per bucket, and how many the bucket saw. */
  readonly samples: number[][];
  readonly seen: number[];
  lastAt = 0;

  constructor(buckets: number) {
    this.starts = new Array<number>(buckets).fill(Number.NaN);
    this.calls = new Array<number>(buckets).fill(0);
    this.samples = Array.from({ length: buckets }, () => []);
    this.seen = new Array<number>(buckets).fill(0);
  }
}

/** Calls per second and TTFT per model over a sliding window of buckets. */
export class StatsWindow {
  readonly #clock: Clock;
  readonly #bucketMs: number;
  readonly #buckets: number;
  readonly #sampleSize: number;
  readonly #maxModels: number;
  readonly #random: () => number;
  readonly #models = new Map<string, ModelRing>();
  /** Calls started per whole second, by second modulo RATE_SECONDS. */
  readonly #secondStarts = new Array<number>(RATE_SECONDS).fill(Number.NaN);
  readonly #secondCalls = new Array<number>(RATE_SECONDS).fill(0);

  constructor(options: StatsWindowOptions) {
    const check = checksFor(GatewayConfigError);
    const { clock, bucketMs = 10_000, buckets = 30, sampleSize = 128, maxModels = 256, random = Math.random } = options;
    this.#bucketMs = check.integer('bucketMs', bucketMs, { min: 1 });
    this.#buckets = check.integer('buckets', buckets, { min: 1, max: 10_000 });
    this.#sampleSize = check.integer('sampleSize', sampleSize, { min: 1, max: 100_000 });
    this.#maxModels = check.integer('maxModels', maxModels, { min: 1, max: 100_000 });
    this.#clock = clock;
    this.#random = check.fn('random', random);
  }

  /** The window's span, in s. */
  get windowSeconds(): number {
    return (this.#bucketMs * this.#buckets) / 1000;
  }

  /** Counts a call that reached placement, for the calls-per-second rate. */
  called(): void {
    const second = Math.floor(this.#clock.now() / 1000);
    const i = second % RATE_SECONDS;
    if (this.#secondStarts[i] !== second) {
      this.#secondStarts[i] = second;
      this.#secondCalls[i] = 0;
    }
    this.#secondCalls[i]!++;
  }

  /** Counts a call of `model` that a runner answered, with its time to first token when it had one. */
  record(model: string, ttftMs: number | undefined): void {
    const now = this.#clock.now();
    const ring = this.#ring(model);
    ring.lastAt = now;
    const start = Math.floor(now / this.#bucketMs) * this.#bucketMs;
    const i = Math.floor(now / this.#bucketMs) % this.#buckets;
    if (ring.starts[i] !== start) {
      ring.starts[i] = start;
      ring.calls[i] = 0;
      ring.samples[i] = [];
      ring.seen[i] = 0;
    }
    ring.calls[i]!++;
    if (ttftMs === undefined) return;
    const seen = ++ring.seen[i]!;
    const sample = ring.samples[i]!;
    if (sample.length < this.#sampleSize) sample.push(ttftMs);
    else {
      // Reservoir sampling: every value of the bucket is kept with the same chance.
      const j = Math.floor(this.#random() * seen);
      if (j < this.#sampleSize) sample[j] = ttftMs;
    }
  }

  /** Calls per second over the current second and the nine before it. */
  perSecond(): number {
    const second = Math.floor(this.#clock.now() / 1000);
    let calls = 0;
    for (let i = 0; i < RATE_SECONDS; i++) {
      const s = this.#secondStarts[i]!;
      if (s > second - RATE_SECONDS && s <= second) calls += this.#secondCalls[i]!;
    }
    return calls / RATE_SECONDS;
  }

  /** Each model with a call in the window: its TTFT percentiles over the window and its series, oldest bucket first. */
  models(): GatewayStats['models'] {
    const now = this.#clock.now();
    const current = Math.floor(now / this.#bucketMs);
    const out: GatewayStats['models'] = {};
    for (const [model, ring] of this.#models) {
      if (ring.lastAt <= now - this.#bucketMs * this.#buckets) {
        // Idle for the whole window: nothing of it to show.
        this.#models.delete(model);
        continue;
      }
      const series: SeriesPoint[] = [];
      const all: number[] = [];
      for (let b = current - this.#buckets + 1; b <= current; b++) {
        const t = b * this.#bucketMs;
        const i = b % this.#buckets;
        if (ring.starts[i] !== t) {
          series.push({ t, p50: null, p90: null, calls: 0 });
          continue;
        }
        const sample = ring.samples[i]!;
        const p = percentiles(sample);
        series.push({ t, p50: p?.p50 ?? null, p90: p?.p90 ?? null, calls: ring.calls[i]! });
        for (const v of sample) all.push(v);
      }
      out[model] = { ttftMs: percentiles(all), series };
    }
    return out;
  }

  #ring(model: string): ModelRing {
    let ring = this.#models.get(model);
    if (ring !== undefined) return ring;
    if (this.#models.size >= this.#maxModels) {
      let idlest: string | undefined;
      let idleSince = Infinity;
      for (const [name, r] of this.#models) {
        if (r.lastAt < idleSince) {
          idleSince = r.lastAt;
          idlest = name;
        }
      }
      this.#models.delete(idlest!);
    }
    ring = new ModelRing(this.#buckets);
    this.#models.set(model, ring);
    return ring;
  }
}

/** The 50th and 90th percentiles (nearest rank) of `values`, or null when there are none. */
export function percentiles(values: readonly number[]): Percentiles | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = (p: number) => sorted[Math.max(0, Math.ceil(p * sorted.length) - 1)]!;
  return { p50: rank(0.5), p90: rank(0.9) };
}

/** Reads the snapshot GET /v1/stats answers. */
export function readStats(from: {
  metrics: GatewayMetrics;
  window: StatsWindow;
  queue: QueueSnapshot;
  detached: DetachedCounts;
  clock: Clock;
}): GatewayStats {
  const { metrics, window } = from;
  let total = 0;
  for (const [, n] of metrics.calls.entries()) total += n;
  const byOutcome = {} as Record<CallOutcome, number>;
  for (const outcome of Object.keys(metrics.outcomes) as CallOutcome[])
    byOutcome[outcome] = metrics.outcomes[outcome].get();
  const byCode: Record<string, number> = {};
  for (const count of [metrics.rejected, metrics.failed]) {
    for (const [code, n] of count.entries()) byCode[code] = (byCode[code] ?? 0) + n;
  }
  return {
    at: Math.round(from.clock.now()),
    windowSeconds: window.windowSeconds,
    calls: { total, perSecond: window.perSecond(), byOutcome },
    errors: { byCode },
    models: window.models(),
    queue: from.queue,
    detached: from.detached,
  };
}
