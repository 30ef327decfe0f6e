/**
 * The simulated prefix cache, as vLLM's automatic prefix caching works: a prompt is cut into
 * blocks of the engine's block size (vLLM's `--block-size`, default {@link BLOCK_SIZE}), each
 * block named by the wire's block hash (runner/protocol/block-hash.ts: vLLM's sha256_cbor chain
 * over the token ids, seeded by PYTHONHASHSEED), and an engine remembers a fixed number of
 * blocks, least recently used evicted first. A request's cached prefix is its run of leading
 * blocks the engine still holds; only the rest is prefilled. Because the names are the wire's, a
 * gateway that hashes a call's prompt the same way finds exactly the blocks this cache holds, and
 * the KV events the engine publishes (kv-events.ts) name them as vLLM's do.
 */
import { createHash } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import { chainBlockHashes, seedHash, simTokenIds, type BlockHash } from '../../protocol/index.ts';

/** Tokens per KV-cache block by default: vLLM's default `--block-size`. */
export const BLOCK_SIZE = 16;

/**
 * Hashes of the full blocks of `tokens` (token texts, not ids), in order, chained by SHA-256
 * over the parent's hash and the block's tokens. A stand-in naming for a simulation of a fleet
 * that never meets a gateway's hashing; the engine itself names blocks by {@link SimBlockNamer}.
 */
export function blockHashes(tokens: readonly string[], blockSize = BLOCK_SIZE): string[] {
  const hashes: string[] = [];
  let parent = '';
  for (let end = blockSize; end <= tokens.length; end += blockSize) {
    parent = createHash('sha256')
      .update(parent)
      .update('\n')
      .update(tokens.slice(end - blockSize, end).join(' '))
      .digest('base64url');
    hashes.push(parent);
  }
  return hashes;
}

/** A prompt as the engine's cache sees it. */
export interface PromptBlocks {
  /** The prompt's token ids (simTokenIds of the rendered prompt). */
  readonly tokenIds: readonly number[];
  /** The full blocks' 32-byte hashes, in order. */
  readonly hashes: readonly BlockHash[];
  /** The same hashes as 64 hex digits: the cache's keys. */
  readonly keys: readonly string[];
}

/** Names a prompt's blocks as a vLLM engine with `--prefix-caching-hash-algo sha256_cbor` would. */
export class SimBlockNamer {
  readonly #seed: BlockHash;
  readonly #blockSize: number;

  /** @param seed the engine's PYTHONHASHSEED; @param blockSize tokens per block. */
  constructor(seed: string, blockSize: number) {
    this.#seed = seedHash(seed);
    this.#blockSize = blockSize;
  }

  /** The blocks of a rendered prompt. */
  blocksOf(prompt: string): PromptBlocks {
    const tokenIds = simTokenIds(prompt);
    const hashes = chainBlockHashes(tokenIds, this.#blockSize, this.#seed);
    return { tokenIds, hashes, keys: hashes.map((hash) => hash.toString('hex')) };
  }
}

/** Lifetime counters in tokens, counted the way vLLM counts `prefix_cache_queries` and `prefix_cache_hits`. */
export interface PrefixCacheTotals {
  /** Prompt tokens looked up: every prompt token of every request. */
  readonly queries: number;
  /** Prompt tokens found cached. */
  readonly hits: number;
}

/** What a prefix cache tells about its blocks; every method optional. */
export interface PrefixCacheListener {
  /** A block was evicted to make room (not on {@link PrefixCache.clear}). */
  evicted?(key: string): void;
}

/** How a {@link PrefixCache} is built. */
export interface PrefixCacheOptions {
  /** Tokens per block. @default BLOCK_SIZE */
  blockSize?: number;
  /** @default none */
  listener?: PrefixCacheListener;
}

/** An LRU of block keys with vLLM's hit accounting. */
export class PrefixCache {
  readonly #blocks: LRUCache<string, true>;
  readonly #blockSize: number;
  #queries = 0;
  #hits = 0;

  /** @param capacityBlocks blocks remembered at most; validated by the engine's options. */
  constructor(capacityBlocks: number, options: PrefixCacheOptions = {}) {
    const { blockSize = BLOCK_SIZE, listener } = options;
    this.#blockSize = blockSize;
    this.#blocks = new LRUCache<string, true>({
      max: capacityBlocks,
      ...(listener?.evicted
        ? { dispose: (_value, key, reason) => (reason === 'evict' ? listener.evicted?.(key) : undefined) }
        : {}),
    });
  }

  /** Blocks held now. */
  get size(): number {
    return this.#blocks.size;
  }

  /** Every key held now, most recent first. */
  keys(): string[] {
    return [...this.#blocks.keys()];
  }

  /** Whether the block `key` is held now; does not refresh its recency. */
  has(key: string): boolean {
    return this.#blocks.has(key);
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
  lookup(keys: readonly string[], promptTokens: number): number {
    const usable = Math.min(keys.length, Math.floor(Math.max(promptTokens - 1, 0) / this.#blockSize));
    let blocks = 0;
    while (blocks < usable && this.#blocks.has(keys[blocks]!)) blocks += 1;
    const cached = blocks * this.#blockSize;
    this.#queries += promptTokens;
    this.#hits += cached;
    return cached;
  }

  /**
   * Records a prompt's full blocks as cached and returns the indexes of those it did not hold
   * before, ascending. They go in last block first, so that the prompt's first block is the most
   * recent: a chain only hits from its start, so under pressure its tail should go before its
   * head, which is also the order vLLM frees a request's blocks in.
   */
  insert(keys: readonly string[]): number[] {
    const added: number[] = [];
    for (let index = keys.length - 1; index >= 0; index -= 1) {
      const key = keys[index]!;
      if (!this.#blocks.has(key)) added.push(index);
      this.#blocks.set(key, true);
    }
    return added.reverse();
  }

  /** Forgets every block (vLLM's `reset_prefix_cache`); evictions are not reported for them. */
  clear(): void {
    this.#blocks.clear();
  }
}
