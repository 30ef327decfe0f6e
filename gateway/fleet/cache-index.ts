/**
 * The truth index: which blocks (block-hash.ts keys) each runner's engine holds, as its cache feed
 * reported them (runner/protocol/cache-feed.ts), plus the blocks of calls this gateway placed
 * there lately ("pending": counted as held from placement until the feed reports them stored or
 * `pendingMs` passes, which covers the prefill and the feed's delay).
 *
 * Kept twice: per runner (its blocks, oldest first, to evict and to drop a runner that leaves the
 * pool) and per block (the runners holding it), so a call's lookup reads one entry per block of
 * its prompt and never walks runners that hold none of it. Memory is bounded:
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
  readonly id: string;
  /** The lookup that last found this feed holding the block it was at (see {@link CacheIndex.leading}). */
  mark: number;
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
  /** Each stored block's holders. */
  readonly #stored = new Map<string, Holders>();
  /** Each pending block's holders, expired ones included until their feed is next touched. */
  readonly #pending = new Map<string, Holders>();
  /** Keys kept over every runner, stored and pending. */
  #total = 0;
  /** Counts marks handed out by lookups, so a mark of an earlier one never matches. */
  #marks = 0;

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
    if (!feed || this.#options.pendingMs === 0) return;
    const now = this.#options.clock.now();
    this.#expire(feed, now);
    const until = now + this.#options.pendingMs;
    for (const key of keys) {
      if (feed.keys.has(key)) continue;
      // Deleted first so the map stays in expiry order.
      if (feed.pending.delete(key)) this.#total--;
      else add(this.#pending, key, feed);
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
   * Adds to `out`, for each runner holding the first of `keys`, the leading tokens it holds
   * (blocks held in a row from the first, pending ones included, times `blockSize`), and returns
   * the floor: the leading tokens every runner in the index holds (a preamble the whole fleet has
   * cached). Runners that hold no more than the floor are not added: at a thousand runners,
   * listing each would cost more than the rest of the decision.
   *
   * One read of the holders per block. While every runner holds the prompt, a block's holders are
   * only counted: the floor costs a read per block, whatever the fleet's size. Past it, the run is
   * the holders of the first block not everyone holds; where a block's stored holders are the very
   * runners still in the run (compared by reference, in order: runners that stored a prompt's
   * blocks together are listed alike for each), the run goes on without looking up a key per
   * runner; only where they differ, or a block is pending somewhere, is each runner looked up.
   */
  leading(keys: readonly string[], blockSize: number, out: Map<string, number>): number {
    const now = this.#options.clock.now();
    let everyone = 0;
    while (everyone < keys.length && this.#heldByAll(keys[everyone]!, now)) everyone++;
    const floor = everyone * blockSize;
    if (everyone === keys.length) return floor;
    let alive = this.#holdersOf(keys[everyone]!, now);
    let held = everyone + 1;
    for (; held < keys.length && alive.length > 0; held++) {
      const key = keys[held]!;
      if (this.#sameHolders(key, alive)) continue;
      // The block's holders are marked, then the run keeps the marked: no lookup per runner.
      const mark = this.#markHolders(key, now);
      const next: Feed[] = [];
      for (const feed of alive) {
        if (feed.mark === mark) next.push(feed);
        else out.set(feed.id, held * blockSize);
      }
      alive = next;
    }
    for (const feed of alive) out.set(feed.id, held * blockSize);
    return floor;
  }

  /** True when every runner of the index holds `key` now, stored or pending: counted, not listed. */
  #heldByAll(key: string, now: number): boolean {
    const everyone = this.#feeds.size;
    if (everyone === 0) return false;
    const stored = this.#stored.get(key);
    const count = stored === undefined ? 0 : Array.isArray(stored) ? stored.length : 1;
    if (count === everyone) return true;
    return this.#pending.has(key) && this.#holdersOf(key, now).length === everyone;
  }

  /** The feeds holding `key` now, stored or pending. */
  #holdersOf(key: string, now: number): Feed[] {
    const found: Feed[] = [];
    const stored = this.#stored.get(key);
    if (stored !== undefined) {
      if (Array.isArray(stored)) found.push(...stored);
      else found.push(stored);
    }
    const pending = this.#pending.get(key);
    if (pending === undefined) return found;
    for (const feed of Array.isArray(pending) ? pending : [pending])
      if (!found.includes(feed) && holds(feed, key, now)) found.push(feed);
    return found;
  }

  /** Marks the feeds holding `key` now, stored or pending, with a new mark, and returns it. */
  #markHolders(key: string, now: number): number {
    const mark = ++this.#marks;
    const stored = this.#stored.get(key);
    if (stored !== undefined) {
      if (Array.isArray(stored)) for (const feed of stored) feed.mark = mark;
      else stored.mark = mark;
    }
    const pending = this.#pending.get(key);
    if (pending !== undefined) {
      for (const feed of Array.isArray(pending) ? pending : [pending]) {
        const until = feed.pending.get(key);
        if (until !== undefined && until > now) feed.mark = mark;
      }
    }
    return mark;
  }

  /** True when `key`'s stored holders are `alive`, in order, and nobody has it pending. */
  #sameHolders(key: string, alive: readonly Feed[]): boolean {
    if (this.#pending.has(key)) return false;
    const stored = this.#stored.get(key);
    if (stored === undefined) return false;
    if (!Array.isArray(stored)) return alive.length === 1 && alive[0] === stored;
    if (stored.length !== alive.length) return false;
    for (let i = 0; i < alive.length; i++) if (stored[i] !== alive[i]) return false;
    return true;
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

  /** Runners with a feed, known or not. */
  get feeds(): number {
    return this.#feeds.size;
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
      id: runnerId,
      mark: 0,
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
    this.#unpend(feed, key);
    // Deleted first so that a block stored again counts as the newest.
    if (feed.keys.delete(key)) this.#total--;
    else add(this.#stored, key, feed);
    feed.keys.add(key);
    this.#total++;
    this.#capRunner(feed);
  }

  #remove(feed: Feed, key: string): void {
    this.#unstore(feed, key);
    this.#unpend(feed, key);
  }

  #unstore(feed: Feed, key: string): void {
    if (!feed.keys.delete(key)) return;
    remove(this.#stored, key, feed);
    this.#total--;
  }

  #unpend(feed: Feed, key: string): void {
    if (!feed.pending.delete(key)) return;
    remove(this.#pending, key, feed);
    this.#total--;
  }

  #clear(feed: Feed): void {
    for (const key of feed.keys) remove(this.#stored, key, feed);
    for (const key of feed.pending.keys()) remove(this.#pending, key, feed);
    this.#total -= feed.keys.size + feed.pending.size;
    feed.keys.clear();
    feed.pending.clear();
  }

  /** Drops pending keys whose time is up: the map is in expiry order, so from its start. */
  #expire(feed: Feed, now: number): void {
    for (const [key, until] of feed.pending) {
      if (until > now) break;
      this.#unpend(feed, key);
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
      this.#unpend(feed, key);
      count--;
    }
    for (const key of feed.keys) {
      if (count <= 0) return;
      this.#unstore(feed, key);
      count--;
    }
  }
}

/** The runners holding one block: one alone (the common case, kept without an array), or several. */
type Holders = Feed | Feed[];

function add(map: Map<string, Holders>, key: string, feed: Feed): void {
  const holders = map.get(key);
  if (holders === undefined) map.set(key, feed);
  else if (Array.isArray(holders)) holders.push(feed);
  else map.set(key, [holders, feed]);
}

function remove(map: Map<string, Holders>, key: string, feed: Feed): void {
  const holders = map.get(key);
  if (holders === feed) map.delete(key);
  else if (Array.isArray(holders)) {
    const i = holders.indexOf(feed);
    if (i < 0) return;
    holders.splice(i, 1);
    if (holders.length === 1) map.set(key, holders[0]!);
  }
}

/** True when `feed` holds `key`, stored or pending still. */
function holds(feed: Feed, key: string, now: number): boolean {
  if (feed.keys.has(key)) return true;
  const until = feed.pending.get(key);
  return until !== undefined && until > now;
}
