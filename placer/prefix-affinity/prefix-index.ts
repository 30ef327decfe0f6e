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

/** A bounded map from chained block hash to the id of the runner that last served that prefix. */
export class PrefixIndex {
  readonly #entries: LRUCache<bigint, string>;

  /** @param maxBlocks how many block hashes to keep; the least recently served go first. */
  constructor(maxBlocks: number) {
    this.#entries = new LRUCache<bigint, string>({ max: maxBlocks });
  }

  /** Block hashes held now. */
  get size(): number {
    return this.#entries.size;
  }

  /**
   * Records that `runnerId` served a prompt with these block hashes: it now holds every one of
   * them in its cache, so every prefix points at it, the shortest set first so the longest is the
   * most recently used and the last to be evicted.
   */
  record(hashes: readonly bigint[], runnerId: string): void {
    for (const hash of hashes) this.#entries.set(hash, runnerId);
  }

  /**
   * The longest prefix served by a runner in `candidates`, searching from the longest. A longer
   * prefix served by a runner not listed for this call (busy elsewhere, unreachable, serving
   * another model) is passed over for a shorter one that a listed runner holds. Reads with peek,
   * so looking a prompt up does not keep its prefixes alive; only serving it does.
   * @param candidates the listed ids: a set, or a map keyed by id (the placer passes its cached
   *   id -> position map rather than build a set of every runner per call).
   */
  longest(hashes: readonly bigint[], candidates: ReadonlySet<string> | ReadonlyMap<string, unknown>): PrefixMatch | undefined {
    for (let i = hashes.length - 1; i >= 0; i--) {
      const runnerId = this.#entries.peek(hashes[i]!);
      if (runnerId !== undefined && candidates.has(runnerId)) return { runnerId, blocks: i + 1 };
    }
    return undefined;
  }

  /** Drops every entry pointing at one of `runnerIds`; O(size), for the rare runner that leaves. */
  forget(runnerIds: readonly string[]): void {
    const gone = new Set(runnerIds);
    if (gone.size === 0) return;
    const stale: bigint[] = [];
    for (const [hash, runnerId] of this.#entries.entries()) if (gone.has(runnerId)) stale.push(hash);
    // Deleted after the scan rather than during it, so the iteration never sees a list it changed.
    for (const hash of stale) this.#entries.delete(hash);
  }
}
