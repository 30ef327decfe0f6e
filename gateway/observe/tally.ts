/**
 * Histograms the gateway aggregates itself, for the instruments a call records on its way out.
 *
 * The SDK's histogram hashes a record's attribute set (its keys sorted, then JSON) on every
 * record, about 1.5 µs for the four-attribute sets of the GenAI histograms: a tenth of what the
 * gateway adds to a call. A {@link Tally} keeps its series by the attribute object's identity
 * (sets are built once by their owners) and hashes a set only the first time it sees that
 * object. The SDK still renders them: a {@link Tallies} book is a metric producer of the reader
 * that serves /metrics (gateway/observe/telemetry.ts), so the text is the SDK's own.
 *
 * What the SDK does, a tally does: explicit buckets with inclusive upper bounds, min and max,
 * a record that is not a number or is negative dropped, and at most {@link SERIES_LIMIT} series,
 * past which records go to one series marked `otel.metric.overflow`.
 */
import type { Attributes, Histogram, MeterProvider, MetricOptions } from '@opentelemetry/api';

/** The SDK's default cardinality limit of an instrument. */
export const SERIES_LIMIT = 2000;

/** The attribute set of the series that takes what is past {@link SERIES_LIMIT}, as the SDK's. */
const OVERFLOW: Attributes = Object.freeze({ 'otel.metric.overflow': true });
const NO_ATTRIBUTES: Attributes = Object.freeze({});

/** One attribute set's aggregate, cumulative since `startedAt`. */
export interface TallySeries {
  readonly attributes: Attributes;
  /** When the series was first recorded, in ms since the epoch. */
  readonly startedAt: number;
  count: number;
  sum: number;
  min: number;
  max: number;
  /** Per bucket: `counts[i]` holds values in (boundaries[i - 1], boundaries[i]]; the last holds the rest. */
  readonly counts: number[];
}

/** A histogram aggregated in process; a drop-in for the API's {@link Histogram}. */
export class Tally implements Histogram {
  readonly name: string;
  readonly description: string;
  readonly unit: string;
  readonly boundaries: readonly number[];
  readonly #byObject = new WeakMap<Attributes, TallySeries>();
  readonly #byKey = new Map<string, TallySeries>();
  readonly #now: () => number;

  /** @param now the wall clock of each series' start, in ms since the epoch */
  constructor(name: string, options: MetricOptions = {}, now: () => number = Date.now) {
    this.name = name;
    this.description = options.description ?? '';
    this.unit = options.unit ?? '';
    this.boundaries = Object.freeze([...(options.advice?.explicitBucketBoundaries ?? [])]);
    this.#now = now;
  }

  /** Adds `value` to the series of `attributes`. */
  record(value: number, attributes: Attributes = NO_ATTRIBUTES): void {
    if (typeof value !== 'number' || Number.isNaN(value) || value < 0) return;
    const series = this.#byObject.get(attributes) ?? this.#seriesOf(attributes);
    series.count += 1;
    series.sum += value;
    if (value < series.min) series.min = value;
    if (value > series.max) series.max = value;
    series.counts[bucketOf(this.boundaries, value)]! += 1;
  }

  /** Every series recorded so far. */
  series(): IterableIterator<TallySeries> {
    return this.#byKey.values();
  }

  #seriesOf(attributes: Attributes): TallySeries {
    let key = keyOf(attributes);
    let series = this.#byKey.get(key);
    if (series === undefined) {
      const overflow = this.#byKey.size >= SERIES_LIMIT - 1;
      if (overflow) key = keyOf(OVERFLOW);
      series = this.#byKey.get(key) ?? this.#start(key, overflow ? OVERFLOW : { ...attributes });
    }
    this.#byObject.set(attributes, series);
    return series;
  }

  #start(key: string, attributes: Attributes): TallySeries {
    const series: TallySeries = {
      attributes: Object.freeze(attributes),
      startedAt: this.#now(),
      count: 0,
      sum: 0,
      min: Number.POSITIVE_INFINITY,
      max: Number.NEGATIVE_INFINITY,
      counts: new Array<number>(this.boundaries.length + 1).fill(0),
    };
    this.#byKey.set(key, series);
    return series;
  }
}

/** The first bucket whose upper bound is at least `value`; past the last bound, the overflow bucket. */
function bucketOf(boundaries: readonly number[], value: number): number {
  let lo = 0;
  let hi = boundaries.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (boundaries[mid]! < value) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** A set's identity whatever the order of its keys. */
function keyOf(attributes: Attributes): string {
  return JSON.stringify(
    Object.keys(attributes)
      .sort()
      .map((key) => [key, attributes[key]]),
  );
}

/**
 * The tallies of one metrics pipeline, one per name: asking twice for a name gives the same
 * tally, as the SDK gives one instrument for one name.
 */
export class Tallies {
  readonly #tallies = new Map<string, Tally>();
  readonly #now: () => number;

  /** @param now the wall clock of each series' start, in ms since the epoch */
  constructor(now: () => number = Date.now) {
    this.#now = now;
  }

  /** The tally named `name`, made with `options` the first time. */
  histogram(name: string, options?: MetricOptions): Tally {
    let tally = this.#tallies.get(name);
    if (tally === undefined) {
      tally = new Tally(name, options, this.#now);
      this.#tallies.set(name, tally);
    }
    return tally;
  }

  /** Every tally, in the order they were made. */
  all(): IterableIterator<Tally> {
    return this.#tallies.values();
  }
}

/** The book of each meter provider whose reader renders tallies. */
const books = new WeakMap<MeterProvider, Tallies>();

/** Says that the reader of `provider` renders `tallies`: instruments made for it become tallies. */
export function bindTallies(provider: MeterProvider, tallies: Tallies): void {
  books.set(provider, tallies);
}

/** The book `provider` renders, or undefined when its histograms are the SDK's own. */
export function talliesOf(provider: MeterProvider): Tallies | undefined {
  return books.get(provider);
}
