/**
 * The simulated engine's prefix cache, kept as runs of blocks instead of one entry per block.
 *
 * The live engine (runner/engines/sim/prefix-cache.ts) keeps an LRU of block hashes: a lookup
 * counts the leading blocks it holds without touching their recency, and an insert sets every
 * full block of a prompt, last block first. An LRU that is only ever set, never refreshed by a
 * read, holds exactly the `capacity` blocks set most recently.
 *
 * In this workload every prompt is two chains of blocks: the system prompt's (shared by every
 * session using it) and then the session's own. An insert sets the session's blocks, then the
 * system prompt's, each chain's lower blocks more recent than its higher ones. So each chain's
 * cached blocks are a run from its first block, in pieces ordered by recency: the piece holding
 * the lowest blocks is the newest. (There are several pieces only when a shorter prompt of a
 * session is inserted after a longer one, as when a turn waited in a queue past the next turn:
 * its blocks become recent, the blocks beyond them keep their older place.) Eviction trims the
 * least recent piece from its high end. That holds the same blocks, in the same order, as the
 * per-block LRU at one entry per piece, which matters at a thousand engines of 27,000 blocks
 * each: one entry per block would take gigabytes.
 */
import { BLOCK_SIZE } from '../../../runner/index.ts';
import type { PrefixCacheTotals } from '../../../runner/index.ts';
import type { PromptBlocks } from './trace.ts';

/** Blocks of a prompt's two chains a cache holds, each counted from the chain's first block. */
export interface ChainHolding {
  /** Of the system prompt's chain. */
  readonly system: number;
  /** Of the session's own chain. */
  readonly session: number;
}

/**
 * The prompt's leading cached tokens when its chains are held as `held` says: whole blocks from
 * the start while each is held, at most `floor((tokens - 1) / 16)` of them (the last token is
 * always computed), as the live cache counts them.
 */
export function leadingTokens(prompt: PromptBlocks, held: ChainHolding): number {
  const usable = Math.min(prompt.blocks, Math.floor(Math.max(prompt.tokens - 1, 0) / BLOCK_SIZE));
  const shared = Math.min(held.system, prompt.sharedBlocks);
  const leading = shared < prompt.sharedBlocks ? shared : shared + held.session;
  return Math.min(leading, usable) * BLOCK_SIZE;
}

/** Consecutive cached blocks of one chain, set together. */
interface Piece {
  /** The chain: a session's number, or `-(system + 1)` for a system prompt. */
  readonly chain: number;
  count: number;
}

/** An LRU of block pieces with the live cache's lookup, insert and hit accounting. */
export class BlockRunCache {
  readonly #capacity: number;
  /** Every piece, least recently set first (a Map keeps insertion order). */
  readonly #recency = new Map<Piece, true>();
  /** Each chain's pieces, lowest blocks (and most recent) first. */
  readonly #chains = new Map<number, Piece[]>();
  #size = 0;
  #queries = 0;
  #hits = 0;

  /** @param capacityBlocks blocks remembered at most, at least 1. */
  constructor(capacityBlocks: number) {
    if (!(Number.isSafeInteger(capacityBlocks) && capacityBlocks >= 1))
      throw new RangeError(`capacityBlocks must be a positive integer, got ${capacityBlocks}`);
    this.#capacity = capacityBlocks;
  }

  /** Blocks held now. */
  get size(): number {
    return this.#size;
  }

  /** A snapshot of the lifetime counters, in tokens. */
  totals(): PrefixCacheTotals {
    return { queries: this.#queries, hits: this.#hits };
  }

  /**
   * The prompt's leading cached tokens, counted as the live cache counts them: whole blocks from
   * the start while each is held, at most `floor((tokens - 1) / 16)` of them (the last token is
   * always computed). Counts the prompt's tokens as queries and the cached ones as hits.
   */
  lookup(prompt: PromptBlocks): number {
    const cached = leadingTokens(prompt, this.holding(prompt));
    this.#queries += prompt.tokens;
    this.#hits += cached;
    return cached;
  }

  /** Blocks of the prompt's chains held now; counts nothing and changes no recency. */
  holding(prompt: PromptBlocks): ChainHolding {
    return { system: this.#held(systemChain(prompt.system)), session: this.#held(prompt.session) };
  }

  /** A cache holding the same blocks in the same recency order, with no lookups counted. */
  copy(): BlockRunCache {
    const copy = new BlockRunCache(this.#capacity);
    // Oldest first: each piece goes before the pieces of its chain copied so far, which are older.
    for (const piece of this.#recency.keys()) {
      const twin: Piece = { chain: piece.chain, count: piece.count };
      copy.#recency.set(twin, true);
      copy.#chains.set(piece.chain, [twin, ...(copy.#chains.get(piece.chain) ?? [])]);
      copy.#size += piece.count;
    }
    return copy;
  }

  /** Records the prompt's full blocks as the most recently set, its first block most recent of all. */
  insert(prompt: PromptBlocks): void {
    this.#set(prompt.session, prompt.blocks - prompt.sharedBlocks);
    this.#set(systemChain(prompt.system), Math.min(prompt.sharedBlocks, prompt.blocks));
    this.#evict();
  }

  /** Blocks of `chain` held, from its first. */
  #held(chain: number): number {
    let held = 0;
    for (const piece of this.#chains.get(chain) ?? []) held += piece.count;
    return held;
  }

  /** Sets the first `count` blocks of `chain` as the most recent; blocks beyond them keep their place. */
  #set(chain: number, count: number): void {
    if (count <= 0) return;
    const pieces = this.#chains.get(chain) ?? [];
    const kept: Piece[] = [];
    let start = 0;
    for (const piece of pieces) {
      const end = start + piece.count;
      if (end <= count) {
        this.#recency.delete(piece);
        this.#size -= piece.count;
      } else {
        // Its blocks below `count` are set again (counted in the new piece); the rest stay.
        const overlap = Math.max(0, count - start);
        piece.count -= overlap;
        this.#size -= overlap;
        kept.push(piece);
      }
      start = end;
    }
    const newest: Piece = { chain, count };
    this.#recency.set(newest, true);
    this.#chains.set(chain, [newest, ...kept]);
    this.#size += count;
  }

  /** Trims the least recent pieces, each from its high end, until the cache fits. */
  #evict(): void {
    while (this.#size > this.#capacity) {
      const oldest = this.#recency.keys().next().value as Piece;
      const excess = this.#size - this.#capacity;
      if (oldest.count > excess) {
        oldest.count -= excess;
        this.#size -= excess;
        return;
      }
      this.#recency.delete(oldest);
      this.#size -= oldest.count;
      // A chain's least recent piece holds its highest blocks: the last of its list.
      const pieces = this.#chains.get(oldest.chain)!;
      pieces.pop();
      if (pieces.length === 0) this.#chains.delete(oldest.chain);
    }
  }
}

function systemChain(system: number): number {
  return -(system + 1);
}
