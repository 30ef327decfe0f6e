/**
 * Cache truth on one gateway: the runners' cache feeds taken into the truth index
 * (cache-index.ts), a call's prompt named in the engines' blocks (gateway/tokens) and looked up
 * there for placement ({@link PromptCache}), the blocks of a placed call counted as pending, and
 * the check of what placement predicted against what the engine reported (observe/cache-metrics.ts).
 */
import type { MeterProvider } from '@opentelemetry/api';
import type { PromptCache, Runner } from '../../placer/types.ts';
import { parseCacheUpdate } from '../../runner/protocol/index.ts';
import type { CacheAnnouncement, CacheUpdate } from '../../runner/protocol/index.ts';
import { CacheFeedOutOfOrderError, InvalidCacheUpdateError } from '../errors.ts';
import { CacheTruthMetrics } from '../observe/index.ts';
import type { CacheTruthStats } from '../observe/index.ts';
import { PromptMapper } from '../tokens/index.ts';
import type { PromptSource } from '../tokens/index.ts';
import { CacheIndex } from './cache-index.ts';
import type { CacheIndexOptions, FeedState } from './cache-index.ts';

/** Settings of the cache truth: the index's, and where its metrics go. */
export interface CacheTruthOptions extends CacheIndexOptions {
  readonly meterProvider: MeterProvider;
  /** Names prompts in the engines' blocks. @default a PromptMapper with its defaults */
  readonly mapper?: PromptMapper;
}

/** A runner that may say how its engine names its blocks: the pool's entries do (runner-entry.ts). */
interface Announcing {
  readonly cacheAnnouncement?: CacheAnnouncement | undefined;
}

/** One call's view of cache truth: the placer's {@link PromptCache}, and the blocks it names on each runner. */
export interface CallCache {
  readonly cache: PromptCache;
  /** The call's block keys as `runnerId`'s engine names them; undefined for a runner without a feed. */
  keysOf(runnerId: string): readonly string[] | undefined;
}

/** True when two announcements name blocks alike: the same tokenizer and scheme. */
function sameScheme(a: CacheAnnouncement, b: CacheAnnouncement): boolean {
  return (
    a.tokenizer === b.tokenizer &&
    a.scheme.algorithm === b.scheme.algorithm &&
    a.scheme.seed === b.scheme.seed &&
    a.scheme.blockSize === b.scheme.blockSize
  );
}

/** GET /v1/stats's cache truth panel: each runner's feed, and the checks. */
export interface CacheTruthPanel extends CacheTruthStats {
  /** Per runner with a feed: its state, with the age of its last update. */
  runners: Array<{ runner: string; lastUpdateAgeMs: number } & Omit<FeedState, 'heardAt'>>;
  /** Blocks the index keeps over every runner. */
  blocks: number;
}

/** The engines' cache truth on this gateway. */
export class CacheTruth {
  readonly index: CacheIndex;
  readonly #metrics: CacheTruthMetrics;
  readonly #mapper: PromptMapper;
  readonly #clock: CacheIndexOptions['clock'];

  constructor(options: CacheTruthOptions) {
    this.index = new CacheIndex(options);
    this.#clock = options.clock;
    this.#mapper = options.mapper ?? new PromptMapper();
    const index = this.index;
    this.#metrics = new CacheTruthMetrics(
      options.meterProvider,
      function* feeds() {
        for (const runner of index.runners()) yield { runner, known: index.known(runner) };
      },
      () => index.size,
    );
  }

  /**
   * Takes one update body from `runnerId`'s feed, `bytes` long; returns the update, whose load
   * (when it carries one) is the runner's fresh report.
   * @throws {@link InvalidCacheUpdateError} for a body the wire refuses;
   *   {@link CacheFeedOutOfOrderError} for one that does not follow the last (the runner sends a reset).
   */
  update(runnerId: string, body: unknown, bytes: number): CacheUpdate {
    const parsed = parseCacheUpdate(body);
    if (parsed.kind === 'invalid') {
      this.#metrics.update(runnerId, 'invalid', bytes);
      throw new InvalidCacheUpdateError(parsed.message);
    }
    const outcome = this.index.apply(runnerId, parsed.value);
    if (outcome.kind === 'out-of-order') {
      this.#metrics.update(runnerId, 'out_of_order', bytes);
      throw new CacheFeedOutOfOrderError(`cache feed of runner ${JSON.stringify(runnerId)}: ${outcome.reason}`);
    }
    this.#metrics.update(runnerId, 'applied', bytes);
    return parsed.value;
  }

  /**
   * The call's view, or undefined when none of `runners` announces a feed or the prompt cannot be
   * mapped (an unknown tokenizer, a short prompt). Runners that announce different schemes each
   * get the call's blocks named their way; most fleets of a model have one. Holders are every
   * runner whose engine holds the blocks, listed for the call or not: a placer weighs the ones it
   * is given.
   */
  view(source: PromptSource, runners: readonly Runner<unknown>[]): CallCache | undefined {
    const groups: Array<{ announcement: CacheAnnouncement; runners: Runner<unknown>[]; keys?: readonly string[] }> = [];
    for (const runner of runners) {
      const announcement = (runner as Announcing).cacheAnnouncement;
      if (!announcement?.events) continue;
      const group = groups.find((g) => sameScheme(g.announcement, announcement));
      if (group) group.runners.push(runner);
      else groups.push({ announcement, runners: [runner] });
    }
    let promptTokens: number | undefined;
    let floor = 0;
    const holders = new Map<string, number>();
    for (const group of groups) {
      const blocks = this.#mapper.blocksOf(source, group.announcement);
      if (!blocks) continue;
      promptTokens ??= blocks.promptTokens;
      group.keys = blocks.keys;
      // Runners of another scheme hold none of these blocks, so a floor comes only with one scheme.
      const groupFloor = this.index.leading(blocks.keys, group.announcement.scheme.blockSize, holders);
      if (groups.length === 1) floor = groupFloor;
    }
    if (promptTokens === undefined) return undefined;
    const index = this.index;
    // The call's keys on a runner: its group's, when the prompt could be named its way.
    const keysOf = (id: string): readonly string[] | undefined =>
      groups.find((g) => g.runners.some((r) => r.id === id))?.keys;
    // In a fleet of one scheme every listed runner was mapped; otherwise the mapped ones are
    // gathered once, at the first question, rather than searched for at each.
    const whole = groups.length === 1 && groups[0]!.runners.length === runners.length;
    let mapped: Set<string> | undefined;
    const isMapped = (id: string): boolean => {
      mapped ??= new Set(groups.flatMap((g) => (g.keys ? g.runners.map((r) => r.id) : [])));
      return mapped.has(id);
    };
    const known = (id: string): boolean => index.known(id) && (whole || isMapped(id));
    // The floor is what every runner of the index holds; it stands for the listed runners only
    // when each of them is known. Otherwise (a feed lost, a runner without one) the known ones
    // are listed at the floor, so a placer never mistakes them for runners holding nothing.
    if (floor > 0 && !runners.every((r) => known(r.id))) {
      for (const r of runners) if (!holders.has(r.id) && known(r.id)) holders.set(r.id, floor);
      floor = 0;
    }
    return { cache: { promptTokens, holders, floor, known }, keysOf };
  }

  /** Counts the call's blocks as held by the runner that took it, until its feed says so. */
  placed(view: CallCache, runnerId: string): void {
    const keys = view.keysOf(runnerId);
    if (keys) this.index.placed(runnerId, keys);
  }

  /** Records a call's predicted cached tokens beside those its engine reported. */
  checked(model: string, runnerId: string, predicted: number, reported: number): void {
    this.#metrics.checked(model, runnerId, predicted, reported);
  }

  /** Forgets runners that left the pool. */
  drop(runnerIds: readonly string[]): void {
    for (const id of runnerIds) this.index.drop(id);
  }

  /** The panel GET /v1/stats shows. */
  stats(): CacheTruthPanel {
    const now = this.#clock.now();
    const runners: CacheTruthPanel['runners'] = [];
    for (const runner of this.index.runners()) {
      const { heardAt, ...state } = this.index.state(runner)!;
      runners.push({ runner, ...state, lastUpdateAgeMs: Math.round(now - heardAt) });
    }
    return { runners, blocks: this.index.size, ...this.#metrics.stats() };
  }
}
