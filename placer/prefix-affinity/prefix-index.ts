/**
 * Which runner most recently served each prompt prefix, as block hash -> runner id, bounded by an
 * LRU so a gateway that sees millions of distinct prompts keeps only the recent ones (an engine's
 * own cache evicts old prefixes too, so old entries would mostly point at nothing).
 */
import { LRUCache } from 'lru-cache';

/** The longest prefix of a prompt that one of the candidate runners served. */
export interface PrefixMatch {
  readonly runnerId: string;
  /** How many leading blocks matched. */
  readonly blocks: number;
}

/**
 * A prompt's chained block hashes, read by position: `at(i)` is block i's hash, or undefined past
 * the last full block. An array is one; so is a {@link BlockChain} that hashes only as far as read.
 */
export interface BlockHashes {
  at(i: number): bigint | undefined;
  /** Blocks that cost nothing more to read (a chain's blocks hashed already): the first probe. */
  readonly hashed?: number;
}

/** What a forgotten runner's entries point at: no runner, so no lookup matches them. */
const FORGOTTEN = Symbol('forgotten');

/**
 * Blocks the lookup steps over between two probes of the index: a miss costs at most this many
 * blocks hashed past the longest match (and about log2 of it in lookups), while a long match
 * costs one lookup per this many blocks.
 */
export const PROBE_STRIDE = 16;

/**
 * A bounded map from chained block hash to the id of the runner that last served that prefix.
 *
 * Every entry that points at a runner has all its prefixes held: when block i's hash points at a
 * runner, blocks 0 to i - 1 are in the index too. Each record sets a prompt's blocks longest
 * first, so a prefix is always set more recently than the longer entries containing it and the
 * LRU evicts it after them; a runner that leaves has its entries pointed at no runner rather than
 * deleted, so it leaves no hole before another runner's longer entry. That lets {@link longest}
 * find the held prefix from the front with a few lookups, hashing no further than one probe past
 * it.
 */
export class PrefixIndex {
  readonly #entries: LRUCache<bigint, string | typeof FORGOTTEN>;
  /** Entries pointing at {@link FORGOTTEN}, which `size` leaves out. */
  #forgotten = 0;

  /** @param maxBlocks how many block hashes to keep; the least recently served go first. */
  constructor(maxBlocks: number) {
    this.#entries = new LRUCache<bigint, string | typeof FORGOTTEN>({
      max: maxBlocks,
      // Called when an entry is evicted, deleted or overwritten by a runner serving it again.
      dispose: (value) => {
        if (value === FORGOTTEN) this.#forgotten--;
      },
    });
  }

  /** Block hashes held now that point at a runner. */
  get size(): number {
    return this.#entries.size - this.#forgotten;
  }

  /**
   * Records that `runnerId` served a prompt with these block hashes: it now holds every one of
   * them in its cache, so every prefix points at it. Set longest first, so each prefix is more
   * recently served than the longer ones after it, and the LRU evicts a prompt's tail first, as
   * engines evict a cached sequence's last blocks before the prefix others share.
   */
  record(hashes: readonly bigint[], runnerId: string): void {
    for (let i = hashes.length - 1; i >= 0; i--) this.#entries.set(hashes[i]!, runnerId);
  }

  /** The runner that last served the prefix ending in `hash`, if the index holds it and the runner was not forgotten. */
  servedBy(hash: bigint): string | undefined {
    const runnerId = this.#entries.peek(hash);
    return typeof runnerId === 'string' ? runnerId : undefined;
  }

  /**
   * The longest prefix served by a runner in `candidates`. A longer prefix served by a runner
   * not listed for this call (busy elsewhere, unreachable, serving another model) is passed over
   * for a shorter one that a listed runner holds. Reads with peek, so looking a prompt up does
   * not keep its prefixes alive; only serving it does.
   *
   * The same answer as trying every block from the last down: held prefixes are closed (see the
   * class), so the index first finds how many leading blocks it holds, probing every
   * {@link PROBE_STRIDE} blocks and then halving the gap between the last hit and the first miss,
   * and only then walks down from there to the longest whose runner is a candidate. Blocks past
   * the first miss are never read, so a lazy `hashes` never hashes them.
   * @param candidates the listed ids: a set, or a map keyed by id (the placer passes its cached
   *   id -> position map rather than build a set of every runner per call).
   */
  longest(
    hashes: BlockHashes,
    candidates: ReadonlySet<string> | ReadonlyMap<string, unknown>,
  ): PrefixMatch | undefined {
    const held = this.heldBlocks(hashes);
    for (let i = held - 1; i >= 0; i--) {
      const runnerId = this.servedBy(hashes.at(i)!);
      if (runnerId !== undefined && candidates.has(runnerId)) return { runnerId, blocks: i + 1 };
    }
    return undefined;
  }

  /**
   * A count of leading blocks of `hashes` past which no entry points at a runner: the block at
   * that position is not held, so (see the class) nothing longer points at a runner either.
   * Where nothing was ever forgotten or evicted out of turn, every block before it is held.
   */
  heldBlocks(hashes: BlockHashes): number {
    // hit: blocks known held; miss: a count known not to be (block miss - 1 absent or past the end).
    // The first probe is as far as is read once block 0 is (blocks a kept prompt lent, say):
    // where the index holds that much, the strides go on from there, and where not, halving
    // finds less.
    if (hashes.at(0) === undefined) return 0;
    let hit = 0;
    let miss = -1;
    const first = hashes.hashed ?? 0;
    if (first > PROBE_STRIDE) {
      if (this.#holds(hashes, first)) hit = first;
      else miss = first;
    }
    while (miss < 0) {
      const probe = hit + PROBE_STRIDE;
      if (this.#holds(hashes, probe)) hit = probe;
      else miss = probe;
    }
    while (miss - hit > 1) {
      const mid = (hit + miss) >>> 1;
      if (this.#holds(hashes, mid)) hit = mid;
      else miss = mid;
    }
    return hit;
  }

  /** Whether the first `blocks` blocks are held, which (closed) is whether the last of them is. */
  #holds(hashes: BlockHashes, blocks: number): boolean {
    const hash = hashes.at(blocks - 1);
    return hash !== undefined && this.#entries.has(hash, { updateAgeOnHas: false });
  }

  /**
   * Points the entries of `hashes` from block `from` on that point at `runnerId` at no runner:
   * its engine said it held less of the prompt than the index did. Kept rather than deleted, as
   * {@link forget} keeps them, so no entry is left with a hole before it.
   */
  forgetBeyond(hashes: readonly bigint[], from: number, runnerId: string): void {
    for (let i = Math.max(0, from); i < hashes.length; i++) {
      if (this.#entries.peek(hashes[i]!) !== runnerId) continue;
      this.#entries.set(hashes[i]!, FORGOTTEN);
      this.#forgotten++;
    }
  }

  /**
   * Points every entry of one of `runnerIds` at no runner; O(size), for the rare runner that
   * leaves. Kept rather than deleted, so that no entry pointing at a runner is left with a hole
   * before it (see the class); they count against `maxBlocks` until evicted like any other.
   */
  forget(runnerIds: readonly string[]): void {
    const gone = new Set(runnerIds);
    if (gone.size === 0) return;
    const stale: bigint[] = [];
    for (const [hash, runnerId] of this.#entries.entries())
      if (typeof runnerId === 'string' && gone.has(runnerId)) stale.push(hash);
    // Changed after the scan rather than during it, so the iteration never sees a list it
    // changed. Setting makes an entry the most recent: that only makes a prefix outlive longer
    // entries the more, which keeps every entry that points at a runner reachable.
    for (const hash of stale) this.#entries.set(hash, FORGOTTEN);
    this.#forgotten += stale.length;
  }
}
