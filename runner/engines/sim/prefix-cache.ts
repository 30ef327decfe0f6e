/**
 * The simulated prefix cache, as vLLM's automatic prefix caching works in outline: a prompt is cut
 * into blocks of {@link BLOCK_SIZE} tokens, each block named by a hash chained through every block
 * before it, and an engine remembers a fixed number of blocks, least recently used evicted first.
 * A request's cached prefix is its run of leading blocks the engine still holds; only the rest is
 * prefilled. Placement that sends similar prompts to the same engine is rewarded exactly as on a
 * real GPU, which is what judging a cache-aware placer needs.
 */
import { createHash } from 'node:crypto';
import { LRUCache } from 'lru-cache';

/** Tokens per KV-cache block: vLLM's default `--block-size`, and what REFERENCE's model uses. */
export const BLOCK_SIZE = 16;

/**
 * Hashes of the full blocks of `tokens`, in order; a partial trailing block gets none, since a
 * block is only reusable once full. Block i's hash is SHA-256 over block i-1's hash and block i's
 * tokens, so equal tokens at another position (after another prefix) get another hash, as in vLLM.
 * SHA-256 from node:crypto rather than a 64-bit hash: collisions would silently fake hits, and a
 * few hundred digests per prompt cost well under a millisecond. Tokens never hold whitespace, so a
 * space joins them unambiguously.
 */
export function blockHashes(tokens: readonly string[]): string[] {
  const hashes: string[] = [];
  let parent = '';
  for (let end = BLOCK_SIZE; end <= tokens.length; end += BLOCK_SIZE) {
    parent = createHash('sha256')
      .update(parent)
      .update('\n')
      .update(tokens.slice(end - BLOCK_SIZE, end).join(' '))
      .digest('base64url');
    hashes.push(parent);
  }
  return hashes;
}

/** Lifetime counters in tokens, counted the way vLLM counts `prefix_cache_queries` and `prefix_cache_hits`. */
export interface PrefixCacheTotals {
  /** Prompt tokens looked up: every prompt token of every request. */
  readonly queries: number;
  /** Prompt tokens found cached. */
  readonly hits: number;
}

/** An LRU of block hashes with vLLM's hit accounting. */
export class PrefixCache {
  readonly #blocks: LRUCache<string, true>;
  #queries = 0;
  #hits = 0;

  /** @param capacityBlocks blocks remembered at most; validated by the engine's options. */
  constructor(capacityBlocks: number) {
    this.#blocks = new LRUCache<string, true>({ max: capacityBlocks });
  }

  /** Blocks held now. */
  get size(): number {
    return this.#blocks.size;
  }

  /** A snapshot of the lifetime counters. */
  totals(): PrefixCacheTotals {
    return { queries: this.#queries, hits: this.#hits };
  }

  /**
   * Counts the leading blocks of a prompt already cached and returns the tokens they cover,
   * counting `promptTokens` queries and that many hits. At least the prompt's last token is
   * always computed (vLLM needs its logits to sample), so a prompt cached whole, whose length is
   * a multiple of the block size, hits one block fewer. Lookups do not refresh recency: a block
   * becomes recent when {@link insert} records that it was computed or reused.
   */
  lookup(hashes: readonly string[], promptTokens: number): number {
    const usable = Math.min(hashes.length, Math.floor(Math.max(promptTokens - 1, 0) / BLOCK_SIZE));
    let blocks = 0;
    while (blocks < usable && this.#blocks.has(hashes[blocks]!)) blocks += 1;
    const cached = blocks * BLOCK_SIZE;
    this.#queries += promptTokens;
    this.#hits += cached;
    return cached;
  }

  /**
   * Records a prompt's full blocks as cached. They go in last block first, so that the prompt's
   * first block is the most recent: a chain only hits from its start, so under pressure its tail
   * should go before its head, which is also the order vLLM frees a request's blocks in.
   */
  insert(hashes: readonly string[]): void {
    for (let index = hashes.length - 1; index >= 0; index -= 1) this.#blocks.set(hashes[index]!, true);
  }
}
