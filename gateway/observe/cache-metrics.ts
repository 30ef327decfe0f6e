/**
 * Routing that checks itself: for each call placed on cache truth, the cached tokens placement
 * predicted on the runner that took it beside the cached tokens its engine reported, per model and
 * runner; and each runner's cache feed (known or not, updates and bytes received). Kept in plain
 * numbers and handed to the SDK at collection, as the gateway's other counts are (metrics.ts).
 */
import type { Attributes, MeterProvider, ObservableResult } from '@opentelemetry/api';

/** Label sets kept at most per tally; past it, new ones are not counted (many runner ids over a long run). */
const MAX_LABEL_SETS = 4096;

/** The figures of one (model, runner): calls checked and their tokens. */
export interface CacheCheckFigures {
  /** Calls with both a prediction and an engine's report. */
  calls: number;
  /** Cached tokens placement predicted on the runner that took the call. */
  predictedTokens: number;
  /** Cached tokens the engine reported. */
  reportedTokens: number;
  /** Tokens predicted cached that the engine did not report cached (the index said too much). */
  overTokens: number;
  /** Tokens the engine reported cached beyond the prediction (the index said too little). */
  underTokens: number;
}

/** How an update from a runner's feed was taken. */
export type FeedUpdateResult = 'applied' | 'out_of_order' | 'invalid';

/** A runner's feed as the gauge reads it. */
export interface FeedReading {
  readonly runner: string;
  readonly known: boolean;
}

/** What the cache truth panel of GET /v1/stats shows. */
export interface CacheTruthStats {
  /** Per model and runner, the checks of predicted against reported cached tokens. */
  checks: Array<{ model: string; runner: string } & CacheCheckFigures>;
  /** Per runner, the updates its feed sent (by result) and their bytes. */
  feeds: Array<{ runner: string; updates: Record<FeedUpdateResult, number>; bytes: number }>;
}

/** Counts keyed by a label set, observed at collection. */
class Tally<T> {
  readonly #entries = new Map<string, { attributes: Attributes; value: T }>();
  readonly #make: () => T;

  constructor(make: () => T) {
    this.#make = make;
  }

  /** The value of the label set, made the first time; undefined once the tally is full. */
  of(attributes: Record<string, string>): T | undefined {
    const key = Object.values(attributes).join('\u0000');
    let entry = this.#entries.get(key);
    if (entry === undefined) {
      if (this.#entries.size >= MAX_LABEL_SETS) return undefined;
      entry = { attributes: Object.freeze({ ...attributes }), value: this.#make() };
      this.#entries.set(key, entry);
    }
    return entry.value;
  }

  entries(): IterableIterator<{ attributes: Attributes; value: T }> {
    return this.#entries.values();
  }
}

/** The cache truth's counters and gauges on one gateway. */
export class CacheTruthMetrics {
  readonly #checks = new Tally<CacheCheckFigures>(() => ({
    calls: 0,
    predictedTokens: 0,
    reportedTokens: 0,
    overTokens: 0,
    underTokens: 0,
  }));
  readonly #feeds = new Tally<{ updates: Record<FeedUpdateResult, number>; bytes: number }>(() => ({
    updates: { applied: 0, out_of_order: 0, invalid: 0 },
    bytes: 0,
  }));

  /**
   * @param feeds read at collection: each runner's feed, for the known gauge
   * @param blocks read at collection: the blocks the index keeps
   */
  constructor(provider: MeterProvider, feeds: () => Iterable<FeedReading>, blocks: () => number) {
    const meter = provider.getMeter('sluice-gateway');
    const checkCounter = (name: string, field: keyof CacheCheckFigures, description: string) =>
      meter.createObservableCounter(name, { description }).addCallback((result) => {
        for (const { attributes, value } of this.#checks.entries()) result.observe(value[field], attributes);
      });
    checkCounter(
      'sluice_cache_checked_calls',
      'calls',
      'Calls whose predicted and reported cached tokens were compared',
    );
    checkCounter(
      'sluice_cache_predicted_tokens',
      'predictedTokens',
      'Cached prompt tokens placement predicted on the runner that took the call',
    );
    checkCounter(
      'sluice_cache_reported_tokens',
      'reportedTokens',
      'Cached prompt tokens the engine reported (usage.prompt_tokens_details.cached_tokens) for those calls',
    );
    checkCounter(
      'sluice_cache_overpredicted_tokens',
      'overTokens',
      'Tokens placement predicted cached that the engine did not report cached',
    );
    checkCounter(
      'sluice_cache_underpredicted_tokens',
      'underTokens',
      'Tokens the engine reported cached beyond what placement predicted',
    );
    meter
      .createObservableCounter('sluice_cache_feed_updates', {
        description: 'Cache feed updates received from runners, by runner and result (applied, out_of_order, invalid)',
      })
      .addCallback((result) => this.#observeUpdates(result));
    meter
      .createObservableCounter('sluice_cache_feed_bytes', {
        description: 'Bytes of cache feed update bodies received, by runner',
        unit: 'By',
      })
      .addCallback((result) => {
        for (const { attributes, value } of this.#feeds.entries()) result.observe(value.bytes, attributes);
      });
    meter
      .createObservableGauge('sluice_cache_feed_known', {
        description: "1 while a runner's cache feed is live and fresh (placement uses its cache), 0 while unknown",
      })
      .addCallback((result) => {
        for (const { runner, known } of feeds()) result.observe(known ? 1 : 0, { runner });
      });
    meter
      .createObservableGauge('sluice_cache_index_blocks', {
        description: "Blocks the gateway's truth index keeps over every runner, stored and pending",
      })
      .addCallback((result) => result.observe(blocks()));
  }

  /** Records one call's prediction beside its engine's report. */
  checked(model: string, runner: string, predicted: number, reported: number): void {
    const figures = this.#checks.of({ model, runner });
    if (!figures) return;
    figures.calls++;
    figures.predictedTokens += predicted;
    figures.reportedTokens += reported;
    if (predicted > reported) figures.overTokens += predicted - reported;
    else figures.underTokens += reported - predicted;
  }

  /** Records one update from `runner`'s feed. */
  update(runner: string, result: FeedUpdateResult, bytes: number): void {
    const figures = this.#feeds.of({ runner });
    if (!figures) return;
    figures.updates[result]++;
    figures.bytes += bytes;
  }

  /** The figures for GET /v1/stats. */
  stats(): CacheTruthStats {
    return {
      checks: [...this.#checks.entries()].map(({ attributes, value }) => ({
        model: String(attributes.model),
        runner: String(attributes.runner),
        ...value,
      })),
      feeds: [...this.#feeds.entries()].map(({ attributes, value }) => ({
        runner: String(attributes.runner),
        updates: { ...value.updates },
        bytes: value.bytes,
      })),
    };
  }

  #observeUpdates(result: ObservableResult): void {
    for (const { attributes, value } of this.#feeds.entries()) {
      for (const [outcome, n] of Object.entries(value.updates)) result.observe(n, { ...attributes, result: outcome });
    }
  }
}
