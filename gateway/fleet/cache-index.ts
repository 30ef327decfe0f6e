/**
 * The truth index: which blocks (block-hash.ts keys) each runner's engine holds, as its cache feed
 * reported them (runner/protocol/cache-feed.ts), plus the blocks of calls this gateway placed
 * there lately ("pending": counted as held from placement until the feed reports them stored or
 * `pendingMs` passes, which covers the prefill and the feed's delay).
 *
 * Kept per runner: a call's lookup walks only the runners that may serve it, so no key maps to a
 * list of runners, and a runner that leaves the pool takes its keys with it. Memory is bounded:
 * a runner past `maxBlocksPerRunner`, or the index past `maxBlocks` (the largest runner first),
 * forgets its oldest blocks, as an engine's cache evicts its least recently stored ones first:
 * the index then says too little, never too much.
 */
import type { Clock } from '../../placer/kernel/index.ts';
import { unpackBlockKeys } from '../../runner/protocol/index.ts';
import type { CacheUpdate } from '../../runner/protocol/index.ts';

/** Settings of the index; see the gateway's cache options (gateway/options.ts). */
export interface CacheIndexOptions {
  readonly clock: Clock;
  /** Silence after which a runner's feed is stale and its cache unknown, in ms. */
  readonly staleAfterMs: number;
  /** How long a placed call's blocks count as held before the feed confirms them, in ms. */
  readonly pendingMs: number;
  /** Blocks (stored and pending) kept per runner. */
  readonly maxBlocksPerRunner: number;
  /** Blocks kept over every runner. */
  readonly maxBlocks: number;
}

/** What became of one update: applied, or refused because it does not follow the last one (409). */
export type FeedOutcome =
  | { readonly kind: 'applied'; readonly stored: number; readonly removed: number }
  | { readonly kind: 'out-of-order'; readonly reason: string };

/** A runner's feed as operators and metrics see it. */
export interface FeedState {
  readonly known: boolean;
  readonly engineFeed: 'live' | 'down';
  readonly epoch: string | undefined;
  readonly seq: number;
  /** When the last update was accepted, on the gateway's clock. */
  readonly heardAt: number;
  readonly blocks: number;
  readonly pending: number;
}

/** One runner's feed: where its sequence stands and the blocks it holds, oldest first. */
interface Feed {
  epoch: string | undefined;
  seq: number;
  heardAt: number;
  engineFeed: 'live' | 'down';
  readonly keys: Set<string>;
  /** Keys placed here and not yet reported stored, with when they stop counting; in that order. */
  readonly pending: Map<string, number>;
}

/** The engines' cache truth as this gateway knows it. */
export class CacheIndex {
  readonly #options: CacheIndexOptions;
  readonly #feeds = new Map<string, Feed>();
  /** Keys kept over every runner, stored and pending. */
  #total = 0;

  constructor(options: CacheIndexOptions) {
    this.#options = options;
  }

  /** Blocks kept now over every runner, stored and pending. */
  get size(): number {
    return this.#total;
  }

  /**
   * Applies one update from `runnerId`'s feed. A `reset` is always taken (the runner's blocks are
   * replaced and its sequence starts there); any other update must carry the epoch of the last and
   * the next `seq`, and a feed that was `down` comes back `live` only with a reset: otherwise
   * blocks were missed, and the update is refused for the runner to send a reset.
   */
  apply(runnerId: string, update: CacheUpdate): FeedOutcome {
    const feed = this.#feeds.get(runnerId) ?? this.#newFeed(runnerId);
    if (!update.reset) {
      if (feed.epoch !== update.epoch)
        return {
          kind: 'out-of-order',
          reason: `epoch ${JSON.stringify(update.epoch)} is not this feed's; send a reset`,
        };
      if (update.seq !== feed.seq + 1)
        return { kind: 'out-of-order', reason: `expected seq ${feed.seq + 1}, got ${update.seq}; send a reset` };
      if (feed.engineFeed === 'down' && update.engineFeed === 'live')
        return { kind: 'out-of-order', reason: 'a feed that was down comes back live only with a reset' };
    }
    feed.epoch = update.epoch;
    feed.seq = update.seq;
    feed.heardAt = this.#options.clock.now();
    this.#expire(feed, feed.heardAt);
    feed.engineFeed = update.engineFeed;
    if (update.reset || update.engineFeed === 'down') this.#clear(feed);
    const removed = update.removed ? unpackBlockKeys(update.removed)! : [];
    const stored = update.stored ? unpackBlockKeys(update.stored)! : [];
    // The runner sends the net change: a key in both lists was stored last.
    for (const key of removed) this.#remove(feed, key);
    for (const key of stored) this.#store(feed, key);
    this.#trim();
    return { kind: 'applied', stored: stored.length, removed: removed.length };
  }

  /**
   * Counts `keys` as held by `runnerId` for pendingMs: this gateway just placed a call with those
   * blocks there. Only for a runner with a feed: the others' caches are unknown anyway.
   */
  placed(runnerId: string, keys: readonly string[]): void {
    const feed = this.#feeds.get(runnerId);
    if (!feed) return;
    const now = this.#options.clock.now();
    this.#expire(feed, now);
    const until = now + this.#options.pendingMs;
    for (const key of keys) {
      if (feed.keys.has(key)) continue;
      // Deleted first so the map stays in expiry order.
      if (feed.pending.delete(key)) this.#total--;
      feed.pending.set(key, until);
      this.#total++;
    }
    this.#capRunner(feed);
    this.#trim();
  }

  /** True while `runnerId`'s feed is live and heard from within staleAfterMs. */
  known(runnerId: string): boolean {
    const feed = this.#feeds.get(runnerId);
    return feed !== undefined && this.#live(feed, this.#options.clock.now());
  }

  /**
   * Adds to `out`, for each of `runnerIds` holding the first of `keys`, the leading tokens it
   * holds (blocks held in a row from the first, pending ones included, times `blockSize`).
   */
  leading(keys: readonly string[], runnerIds: readonly string[], blockSize: number, out: Map<string, number>): void {
    const now = this.#options.clock.now();
    for (const id of runnerIds) {
      const feed = this.#feeds.get(id);
      if (!feed) continue;
      let held = 0;
      while (held < keys.length && holds(feed, keys[held]!, now)) held++;
      if (held > 0) out.set(id, held * blockSize);
    }
  }

  /** The feed of `runnerId` as it stands, or undefined when it never sent an update. */
  state(runnerId: string): FeedState | undefined {
    const feed = this.#feeds.get(runnerId);
    if (!feed) return undefined;
    const now = this.#options.clock.now();
    this.#expire(feed, now);
    return {
      known: this.#live(feed, now),
      engineFeed: feed.engineFeed,
      epoch: feed.epoch,
      seq: feed.seq,
      heardAt: feed.heardAt,
      blocks: feed.keys.size,
      pending: feed.pending.size,
    };
  }

  /** The runners with a feed. */
  runners(): IterableIterator<string> {
    return this.#feeds.keys();
  }

  /** Forgets a runner that left the pool. */
  drop(runnerId: string): void {
    const feed = this.#feeds.get(runnerId);
    if (!feed) return;
    this.#clear(feed);
    this.#feeds.delete(runnerId);
  }

  #newFeed(runnerId: string): Feed {
    const feed: Feed = {
      epoch: undefined,
      seq: 0,
      heardAt: Number.NEGATIVE_INFINITY,
      engineFeed: 'live',
      keys: new Set(),
      pending: new Map(),
    };
    this.#feeds.set(runnerId, feed);
    return feed;
  }

  #live(feed: Feed, now: number): boolean {
    return feed.epoch !== undefined && feed.engineFeed === 'live' && now - feed.heardAt <= this.#options.staleAfterMs;
  }

  #store(feed: Feed, key: string): void {
    if (feed.pending.delete(key)) this.#total--;
    // Deleted first so that a block stored again counts as the newest.
    if (feed.keys.delete(key)) this.#total--;
    feed.keys.add(key);
    this.#total++;
    this.#capRunner(feed);
  }

  #remove(feed: Feed, key: string): void {
    if (feed.keys.delete(key)) this.#total--;
    if (feed.pending.delete(key)) this.#total--;
  }

  #clear(feed: Feed): void {
    this.#total -= feed.keys.size + feed.pending.size;
    feed.keys.clear();
    feed.pending.clear();
  }

  /** Drops pending keys whose time is up: the map is in expiry order, so from its start. */
  #expire(feed: Feed, now: number): void {
    for (const [key, until] of feed.pending) {
      if (until > now) break;
      feed.pending.delete(key);
      this.#total--;
    }
  }

  /** Keeps a runner within maxBlocksPerRunner: its oldest pending keys go first, then its oldest stored. */
  #capRunner(feed: Feed): void {
    this.#evict(feed, feed.keys.size + feed.pending.size - this.#options.maxBlocksPerRunner);
  }

  /** Keeps the index within maxBlocks, taking from the runner that holds the most. */
  #trim(): void {
    while (this.#total > this.#options.maxBlocks) {
      let largest: Feed | undefined;
      for (const feed of this.#feeds.values())
        if (!largest || feed.keys.size + feed.pending.size > largest.keys.size + largest.pending.size) largest = feed;
      if (!largest) return;
      this.#evict(largest, this.#total - this.#options.maxBlocks);
    }
  }

  #evict(feed: Feed, count: number): void {
    for (const key of feed.pending.keys()) {
      if (count <= 0) return;
      feed.pending.delete(key);
      this.#total--;
      count--;
    }
    for (const key of feed.keys) {
      if (count <= 0) return;
      feed.keys.delete(key);
      this.#total--;
      count--;
    }
  }
}

/** True when `feed` holds `key`, stored or pending still. */
function holds(feed: Feed, key: string, now: number): boolean {
  if (feed.keys.has(key)) return true;
  const until = feed.pending.get(key);
  return until !== undefined && until > now;
}
