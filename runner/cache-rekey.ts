/**
 * Naming an engine's cached blocks by the announced scheme (runner/protocol/block-hash.ts) when
 * the engine's own block hashes are not that scheme's: SGLang's (a SHA-256 chain over each page's
 * token ids, cut to a signed 64-bit integer, one BlockStored per page, pages often of 1 token), or
 * a vLLM whose seed or hash algorithm gateways cannot know. Every BlockStored carries its blocks'
 * token ids and the engine's hash of the block before them (none at a prompt's start), so the
 * runner can chain the scheme's hashes itself, whatever the engine's page size:
 *
 * - per engine block it remembers the block's tokens since the last full scheme block (fewer than
 *   `blockSize`), that scheme block's hash (the seed hash before the first), and the keys of the
 *   scheme blocks it completed; a block's page extends its parent's tail, and each time the tail
 *   reaches `blockSize` tokens a scheme block is named and stored;
 * - removing an engine block retracts the scheme blocks it completed (SGLang evicts leaves first,
 *   so a scheme block goes with the last page it spans); a scheme block two engine blocks
 *   completed goes when both are gone;
 * - a block whose parent is unknown (never heard, or heard before a start-over) is not named, nor
 *   any block under it: the runner reports only blocks whose whole prefix it knows. So is a block
 *   whose hash takes more than its tokens (a LoRA adapter, vLLM's extra keys), and one whose
 *   tokens do not split evenly among its hashes;
 * - `AllBlocksCleared` forgets everything.
 *
 * Memory: one entry per engine block held, at most `maxPages` (beyond it new blocks are not
 * named until the engine removes some). Measured with block size 16 and event-sized token
 * arrays kept: about 270 bytes a page at page size 1 (some 260 MiB at the bound, a million cached
 * tokens), about 510 bytes a page of 16 tokens (32 bytes a cached token).
 */
import type { KvEvent, StoredBlocksEvent } from './kv-events.ts';
import { blockKey, chainBlockHashes, seedHash } from './protocol/index.ts';
import type { BlockHash } from './protocol/index.ts';

/** How the mirror's events are named: the engine's keys as they are, or anew (see cache-mirror.ts). */
export interface BlockKeyer {
  /** The events with their blocks named for the feed, in order. */
  keyed(events: readonly KvEvent[]): KvEvent[];
  /** Forgets every block: the mirror started over and what was heard no longer holds. */
  forget(): void;
}

/** How a {@link CacheRekeyer} names blocks. */
export interface CacheRekeyerOptions {
  /** The announced scheme's seed (the runner's `hashSeed`). */
  seed: string;
  /** The announced scheme's tokens per block. */
  blockSize: number;
  /** Engine blocks remembered at most. @default 1_048_576 */
  maxPages?: number;
  /** Told when a block is first refused for the bound, and again after the engine removed some. @default nothing */
  onFull?: () => void;
}

/**
 * What is kept per engine block. The tokens since the last full scheme block are not copied into
 * each page: a page keeps its own share of them and a link to the page before while that one has
 * a share too, so they are gathered (fewer than a block's worth) only when a block completes.
 */
interface Page {
  /** The page before, while it holds tokens of the scheme block this page is in. */
  readonly up: Page | undefined;
  /** This page's tokens not in a full scheme block. */
  readonly tokens: readonly number[];
  /** Tokens since the last full scheme block, up to and with this page's. */
  readonly filled: number;
  /** Hash of the last full scheme block up to and with this block; the seed hash before the first. */
  readonly last: BlockHash;
  /** Keys of the scheme blocks this block completed. */
  readonly completed: readonly string[];
  /** Times stored and not yet removed. */
  count: number;
}

const NONE: readonly string[] = Object.freeze([]);

/** Engine blocks remembered by default: a page-size-1 cache of a million tokens. */
const DEFAULT_MAX_PAGES = 1_048_576;

/** The re-keyer; see the module comment. */
export class CacheRekeyer implements BlockKeyer {
  readonly #blockSize: number;
  readonly #maxPages: number;
  /** The parent of every prompt's first block. */
  readonly #root: Page;
  readonly #pages = new Map<string, Page>();
  /** Scheme keys stored, with how many held engine blocks completed each. */
  readonly #held = new Map<string, number>();
  readonly #onFull: (() => void) | undefined;
  /** True from a refusal for the bound until a block is removed. */
  #full = false;

  constructor(options: CacheRekeyerOptions) {
    const { seed, blockSize, maxPages = DEFAULT_MAX_PAGES, onFull } = options;
    if (!Number.isSafeInteger(blockSize) || blockSize < 1)
      throw new RangeError(`blockSize must be a positive integer, got ${blockSize}`);
    if (!Number.isSafeInteger(maxPages) || maxPages < 1)
      throw new RangeError(`maxPages must be a positive integer, got ${maxPages}`);
    this.#blockSize = blockSize;
    this.#maxPages = maxPages;
    this.#onFull = onFull;
    this.#root = { up: undefined, tokens: [], filled: 0, last: seedHash(seed), completed: NONE, count: 1 };
  }

  /** Engine blocks remembered now. */
  get size(): number {
    return this.#pages.size;
  }

  keyed(events: readonly KvEvent[]): KvEvent[] {
    const out: KvEvent[] = [];
    for (const event of events) {
      if (event.kind === 'cleared') {
        this.forget();
        out.push(event);
        continue;
      }
      const keys = event.kind === 'stored' ? this.#store(event) : this.#remove(event.keys);
      if (keys.length > 0) out.push({ kind: event.kind, keys });
    }
    return out;
  }

  forget(): void {
    this.#pages.clear();
    this.#held.clear();
  }

  /** Records the event's blocks; the scheme keys newly held. */
  #store(event: StoredBlocksEvent): string[] {
    const pages = pagesOf(event);
    let parent = event.parent === null ? this.#root : this.#pages.get(event.parent ?? '');
    const stored: string[] = [];
    for (let i = 0; i < pages.length && parent !== undefined; i += 1) {
      const key = event.keys[i]!;
      const known = this.#pages.get(key);
      if (known !== undefined) {
        known.count += 1;
        parent = known;
        continue;
      }
      if (this.#pages.size >= this.#maxPages) {
        if (!this.#full) this.#onFull?.();
        this.#full = true;
        break;
      }
      parent = this.#extend(parent, pages[i]!);
      this.#pages.set(key, parent);
      for (const completed of parent.completed) {
        const count = this.#held.get(completed) ?? 0;
        this.#held.set(completed, count + 1);
        if (count === 0) stored.push(completed);
      }
    }
    return stored;
  }

  /** The page after `parent` holding `tokens`, with the scheme blocks they complete. */
  #extend(parent: Page, tokens: readonly number[]): Page {
    const size = this.#blockSize;
    const up = parent.filled > 0 ? parent : undefined;
    const filled = parent.filled + tokens.length;
    if (filled < size) return { up, tokens, filled, last: parent.last, completed: NONE, count: 1 };
    const shares = [tokens];
    for (let page = up; page !== undefined; page = page.up) shares.push(page.tokens);
    const tail = shares.reverse().flat();
    const hashes = chainBlockHashes(tail, size, parent.last);
    const rest = tail.slice(hashes.length * size);
    return {
      up: undefined,
      tokens: rest,
      filled: rest.length,
      last: hashes.at(-1)!,
      completed: hashes.map((hash) => blockKey(hash)),
      count: 1,
    };
  }

  /** Forgets the engine blocks; the scheme keys no longer held. */
  #remove(keys: readonly string[]): string[] {
    const removed: string[] = [];
    for (const key of keys) {
      const page = this.#pages.get(key);
      if (page === undefined) continue;
      page.count -= 1;
      if (page.count > 0) continue;
      this.#pages.delete(key);
      this.#full = false;
      for (const completed of page.completed) {
        const count = this.#held.get(completed) ?? 0;
        if (count > 1) this.#held.set(completed, count - 1);
        else if (this.#held.delete(completed)) removed.push(completed);
      }
    }
    return removed;
  }
}

/**
 * The event's tokens cut into its blocks: all of them for one block (an SGLang page of any size),
 * else `tokens / blocks` each (vLLM's multi-block event); none when they cannot be trusted.
 */
function pagesOf(event: StoredBlocksEvent): (readonly number[])[] {
  const { keys, tokens, blockSize, plain } = event;
  if (plain === false || tokens === undefined || keys.length === 0 || tokens.length === 0) return [];
  if (keys.length === 1) return [tokens];
  const size = tokens.length / keys.length;
  if (!Number.isInteger(size) || (blockSize !== undefined && blockSize !== size)) return [];
  return keys.map((_, i) => tokens.slice(i * size, (i + 1) * size));
}
