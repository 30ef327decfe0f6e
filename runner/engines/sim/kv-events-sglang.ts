/**
 * The simulated engine's KV events as SGLang publishes them, so a runner's SGLang path (its
 * re-keying, runner/cache-rekey.ts) runs against real events here. Followed: SGLang v0.5,
 * `python/sglang/srt/mem_cache/radix_cache.py` (`_record_store_event`, `_record_remove_event`,
 * `compute_node_hash_values`) and `mem_cache/hicache_storage.py` (`get_hash_str`,
 * `hash_str_to_int64`):
 *
 * - one BlockStored per page of `pageSize` tokens, `["BlockStored", [hash], parent, token_ids,
 *   page_size, null, "GPU"]`, the parent the page before (null for a prompt's first page);
 * - a page's digest is SHA-256 over the previous page's 32-byte digest (nothing for the first)
 *   and the page's token ids as 4 bytes little-endian each; its hash in events is the digest's
 *   first 8 bytes read big-endian as a signed 64-bit integer. No seed: the same prompt has the
 *   same hashes in every process, and they are not vLLM's;
 * - removing a block removes its pages, one BlockRemoved each, first page first, as SGLang
 *   removes a radix node's pages.
 *
 * The simulated cache itself stays in blocks of `--block-size` named by the wire's scheme; each
 * block is told as its `blockSize / pageSize` pages, so the page size divides the block size.
 * The digests of the blocks held are kept (32 bytes a page) to chain the next pages and to name
 * the pages of a removed block.
 */
import { createHash } from 'node:crypto';
import type { BlockHash } from '../../protocol/index.ts';

/** The medium SGLang names for blocks in GPU memory. */
const MEDIUM_GPU = 'GPU';
const DIGEST_BYTES = 32;

/** SGLang's digest of one page after `prior` (undefined for a prompt's first page). */
export function sglangPageDigest(tokens: readonly number[], prior: Uint8Array | undefined): Buffer {
  const hash = createHash('sha256');
  if (prior !== undefined) hash.update(prior);
  const bytes = Buffer.allocUnsafe(tokens.length * 4);
  tokens.forEach((token, i) => bytes.writeUInt32LE(token, i * 4));
  return hash.update(bytes).digest();
}

/** A page digest as SGLang's events carry it: its first 8 bytes, big-endian, signed. */
export function sglangEventHash(digest: Uint8Array): bigint {
  return Buffer.from(digest.buffer, digest.byteOffset, 8).readBigInt64BE();
}

/** Turns the simulated cache's stores and evictions into SGLang's events; see the module comment. */
export class SglangPages {
  readonly #pageSize: number;
  /** Per held block (its wire hash, hex), its pages' digests end to end. */
  readonly #held = new Map<string, Buffer>();

  constructor(pageSize: number) {
    this.#pageSize = pageSize;
  }

  /**
   * The events telling a run of newly stored blocks (their hashes, the hash of the block before
   * them or null, their tokens block after block, tokens per block); none when the block before
   * them is not held.
   */
  stored(hashes: readonly BlockHash[], before: BlockHash | null, tokenIds: readonly number[], blockSize: number) {
    let prior: Buffer | undefined;
    if (before !== null) {
      const parent = this.#held.get(before.toString('hex'));
      if (parent === undefined) return [];
      prior = parent.subarray(parent.length - DIGEST_BYTES);
    }
    const events: unknown[][] = [];
    const size = this.#pageSize;
    hashes.forEach((hash, b) => {
      const tokens = tokenIds.slice(b * blockSize, (b + 1) * blockSize);
      const digests: Buffer[] = [];
      for (let start = 0; start + size <= tokens.length; start += size) {
        const page = tokens.slice(start, start + size);
        const digest = sglangPageDigest(page, prior);
        const parent = prior === undefined ? null : sglangEventHash(prior);
        events.push(['BlockStored', [sglangEventHash(digest)], parent, page, size, null, MEDIUM_GPU]);
        digests.push(digest);
        prior = digest;
      }
      this.#held.set(hash.toString('hex'), Buffer.concat(digests));
    });
    return events;
  }

  /** The events telling a block's eviction: one per page, first page first; none for a block never told. */
  removed(hash: BlockHash): unknown[][] {
    const key = hash.toString('hex');
    const digests = this.#held.get(key);
    if (digests === undefined) return [];
    this.#held.delete(key);
    const events: unknown[][] = [];
    for (let at = 0; at < digests.length; at += DIGEST_BYTES)
      events.push(['BlockRemoved', [sglangEventHash(digests.subarray(at, at + DIGEST_BYTES))], MEDIUM_GPU]);
    return events;
  }

  /** Forgets every block, as the cache's reset does. */
  clear(): void {
    this.#held.clear();
  }
}
