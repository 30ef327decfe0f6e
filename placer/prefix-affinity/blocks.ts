/**
 * A prompt cut into fixed-size blocks, each hashed together with everything before it, the way
 * engines key their prefix caches (vLLM hashes 16-token blocks as a chain). Two prompts share
 * block hash i exactly when they share their first i + 1 blocks, so the index can answer "longest
 * shared prefix" by looking block hashes up instead of comparing text.
 */

import { LRUCache } from 'lru-cache';

/**
 * The chained hashes of `prompt`'s full blocks of `blockSize` UTF-16 code units, scoped by `fn`:
 * every block at once (see {@link BlockChain}, which computes the same hashes only as far as asked).
 */
export function blockHashes(fn: string, prompt: string, blockSize: number): bigint[] {
  return new BlockChain(fn, prompt, blockSize).all();
}

/**
 * A prompt's chained block hashes, computed front to back only as far as they are read: a lookup
 * that stops where the index misses never hashes the new turn at the end of a long prompt, and
 * placed() carries on from where the lookup stopped.
 *
 * Blocks are characters, not tokens: the gateway has no tokenizer for every model, and with the
 * default of 64 characters (about 16 tokens of English) a block lines up roughly with an engine's
 * KV block. A trailing partial block is left out because engines cache only full blocks, so a
 * prompt shorter than one block never matches.
 *
 * The chain starts from `fn` so that the same system prompt sent to two models, which share no
 * KV cache, keeps one index entry per model instead of each overwriting the other's.
 *
 * The prompt is encoded to UTF-8, natively, and its bytes are hashed four at a time in two
 * 32-bit lanes of MurmurHash3's step ({@link mixA}, {@link mixB}); a block's key is both lanes
 * finalised into 64 bits. No string is sliced. The keys are kept as 32-bit halves in one typed
 * array, and a BigInt is made only for a key the index is asked about: a call's chain lives as
 * long as the call, across the walk's awaits, and one array outlives the young generation far
 * more cheaply than a BigInt per block. This is a speed matter only: the keys live in one
 * gateway's memory, so no other process has to agree on them.
 */
export class BlockChain {
  /**
   * Per block hashed, {@link FIELDS} 32-bit fields: its key's low and high halves, then the state
   * after it (both lanes, where the next block starts in bytes and in code units). Sized for
   * the most blocks the prompt can have when hashing starts.
   */
  #data: Int32Array | undefined;
  /** Blocks hashed so far. */
  #count = 0;
  readonly #memo: PrefixMemo | undefined;
  /** A copy of the prompt's bytes, once this chain is kept in a memo (whole words, zero-padded). */
  #words: Uint32Array | undefined;
  #bytes: Uint8Array | undefined;
  readonly #prompt: string;
  readonly #blockSize: number;
  /** Both lanes after the last hashed block (at first, after the scope). */
  #a: number;
  #b: number;
  /** Where the next block starts, in UTF-8 bytes and in UTF-16 code units. */
  #from = 0;
  #start = 0;
  /** Set once the prompt has no full block left. */
  #ended: boolean;

  /**
   * @param memo recent finished chains: a prompt that starts with the same bytes as one of them
   *   takes the hashes of the whole blocks they share instead of hashing them again.
   */
  constructor(fn: string, prompt: string, blockSize: number, memo?: PrefixMemo) {
    this.#prompt = prompt;
    this.#blockSize = blockSize;
    this.#memo = memo;
    this.#ended = prompt.length < blockSize;
    const scope = this.#ended ? undefined : scopeOf(fn);
    this.#a = scope?.a ?? 0;
    this.#b = scope?.b ?? 0;
  }

  /** Blocks hashed so far. */
  get hashed(): number {
    return this.#count;
  }

  /** Block `i`'s hash, hashing up to it if need be; undefined past the prompt's last full block. */
  at(i: number): bigint | undefined {
    if (i >= this.#count) {
      if (this.#ended) return undefined;
      this.#extend(i + 1);
      if (i >= this.#count) return undefined;
    }
    const data = this.#data!;
    key.setInt32(0, data[FIELDS * i]!, true);
    key.setInt32(4, data[FIELDS * i + 1]!, true);
    return key.getBigUint64(0, true);
  }

  /** Every block's hash, in a new array, hashing whatever is left; the chain is then kept in its memo. */
  all(): bigint[] {
    if (!this.#ended) this.#extend(Number.MAX_SAFE_INTEGER);
    const hashes: bigint[] = [];
    for (let i = 0; i < this.#count; i++) hashes.push(this.at(i)!);
    if (this.#memo !== undefined && hashes.length > 1 && this.#bytes === undefined) {
      const { bytes } = encoded(this, this.#prompt);
      if (bytes.length <= MEMO_MAX_PROMPT_BYTES) {
        const words = new Uint32Array((bytes.length + 3) >>> 2);
        this.#bytes = new Uint8Array(words.buffer, 0, bytes.length);
        this.#bytes.set(bytes);
        this.#words = words;
        this.#memo.keep(hashes[0]!, this);
      }
    }
    return hashes;
  }

  /** Bytes this chain holds on to while a memo keeps it, roughly: its copy, its numbers, its prompt. */
  get keptBytes(): number {
    return (this.#bytes?.length ?? 0) + (this.#data?.byteLength ?? 0) + 2 * this.#prompt.length;
  }

  /**
   * Takes blocks 1 onwards from the memo's chain with the same first block, as far as the two
   * prompts' bytes agree, and returns how many blocks this chain then has. Equal bytes mean equal
   * characters, so equal block ends as well as equal hashes, whatever the characters are.
   */
  #adopt(raw: Uint8Array, words: Uint32Array): number {
    const ref = this.#memo!.find(this.at(0)!);
    if (ref === undefined || ref === this || ref.#blockSize !== this.#blockSize) return 1;
    const same = sharedBytes(raw, words, ref.#bytes!, ref.#words!);
    // Blocks of the reference that end within the bytes both prompts share (their ends rise, so
    // by halving); each field of theirs is this prompt's too.
    const refData = ref.#data!;
    let blocks = 1;
    let beyond = ref.#count;
    while (beyond - blocks > 0) {
      const mid = (blocks + beyond) >>> 1;
      if (refData[FIELDS * mid + 4]! <= same) blocks = mid + 1;
      else beyond = mid;
    }
    this.#data!.set(refData.subarray(FIELDS, FIELDS * blocks), FIELDS);
    this.#count = blocks;
    return blocks;
  }

  /** Hashes blocks until there are `count` of them or the prompt runs out. */
  #extend(count: number): void {
    const prompt = this.#prompt;
    const length = prompt.length;
    const blockSize = this.#blockSize;
    const { bytes: raw, words, view: bytes } = encoded(this, prompt);
    // Every code unit below U+0080 is one byte, so a block's bytes are its characters.
    const ascii = raw.length === length;
    // Whole words straight from memory when every block starts on a word (ASCII blocks of a
    // multiple of four bytes, on a little-endian machine as the lanes' words are defined);
    // otherwise through the DataView, which reads a word at any byte.
    const aligned = ascii && blockSize % 4 === 0 && LITTLE_ENDIAN;
    // Room for every block the prompt can have: one per blockSize code units.
    const data = (this.#data ??= new Int32Array(FIELDS * Math.floor(length / blockSize)));
    let a = this.#a;
    let b = this.#b;
    let start = this.#start;
    let from = this.#from;
    while (this.#count < count) {
      if (length - start < blockSize) {
        this.#ended = true;
        break;
      }
      let to = from + blockSize;
      if (ascii) start += blockSize;
      else {
        // Whole characters up to blockSize code units, read off the UTF-8 lead bytes: a character
        // of four bytes is a surrogate pair, two units, and a block that would end between its
        // halves takes both (one unit more) rather than split the character. A lone surrogate is
        // U+FFFD's three bytes, one unit.
        let units = 0;
        to = from;
        while (units < blockSize) {
          const lead = raw[to]!;
          if (lead < 0x80) to += 1;
          else if (lead < 0xe0) to += 2;
          else if (lead < 0xf0) to += 3;
          else {
            to += 4;
            units++;
          }
          units++;
        }
        start += units;
      }
      // Four bytes at a time into both lanes; the last 1 to 3 as one word, and then the block's
      // length, which tells "ab" from "ab\0" and ends the block.
      let i = from;
      if (aligned) {
        for (let w = from >>> 2, end = to >>> 2; w < end; w++) {
          const word = words[w]!;
          a = mixA(a, word);
          b = mixB(b, word);
        }
        i = to;
      } else {
        for (; i + 4 <= to; i += 4) {
          const word = bytes.getUint32(i, true);
          a = mixA(a, word);
          b = mixB(b, word);
        }
      }
      if (i < to) {
        let word = 0;
        for (let shift = 0; i < to; i++, shift += 8) word |= raw[i]! << shift;
        a = mixA(a, word);
        b = mixB(b, word);
      }
      a = mixA(a, to - from);
      b = mixB(b, to - from);
      from = to;
      const at = FIELDS * this.#count++;
      data[at] = fmix((a + b) | 0);
      data[at + 1] = fmix(a ^ Math.imul(b, 0x9e3779b1));
      data[at + 2] = a;
      data[at + 3] = b;
      data[at + 4] = from;
      data[at + 5] = start;
      if (at === 0 && this.#memo !== undefined) {
        const last = FIELDS * (this.#adopt(raw, words) - 1);
        a = data[last + 2]!;
        b = data[last + 3]!;
        from = data[last + 4]!;
        start = data[last + 5]!;
      }
    }
    this.#a = a;
    this.#b = b;
    this.#start = start;
    this.#from = from;
  }
}

/** The constants of one lane's body step: multipliers and left rotations, as {@link mixStep} uses them. */
interface MixConstants {
  readonly c1: number;
  readonly r1: number;
  readonly c2: number;
  readonly r2: number;
  readonly m: number;
  readonly n: number;
}

/**
 * MurmurHash3's body step (Appleby, public domain): the word is scrambled (times c1, rotated by
 * r1, times c2), then folded into the lane, which is rotated by r2 and multiplied (times m, plus
 * n) so every bit of every word reaches every bit of the lane.
 */
function mixStep({ c1, r1, c2, r2, m, n }: MixConstants): (h: number, word: number) => number {
  return (h, word) => {
    let k = Math.imul(word, c1);
    k = Math.imul((k << r1) | (k >>> (32 - r1)), c2);
    h ^= k;
    h = (h << r2) | (h >>> (32 - r2));
    return (Math.imul(h, m) + n) | 0;
  };
}

/** MurmurHash3's own step, for the first lane. */
const mixA = mixStep({ c1: 0xcc9e2d51, r1: 15, c2: 0x1b873593, r2: 13, m: 5, n: 0xe6546b64 });

/** The same step with other constants and rotations, so the second lane fails independently of the first. */
const mixB = mixStep({ c1: 0x85ebca6b, r1: 16, c2: 0xc2b2ae35, r2: 11, m: 9, n: 0x561ccd1b });

/** MurmurHash3's finaliser: every input bit flips each output bit with probability near one half. */
function fmix(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

/** How many leading bytes two prompts share, compared a word at a time. */
function sharedBytes(bytes: Uint8Array, words: Uint32Array, otherBytes: Uint8Array, otherWords: Uint32Array): number {
  const n = Math.min(bytes.length, otherBytes.length);
  const end = n >>> 2;
  let w = 0;
  while (w < end && words[w] === otherWords[w]) w++;
  let same = w << 2;
  while (same < n && bytes[same] === otherBytes[same]) same++;
  return same;
}

/** 32-bit fields kept per block by a {@link BlockChain}. */
const FIELDS = 6;

/** Scratch for joining a key's two halves, each made from both lanes, into one 64-bit value. */
const key = new DataView(new ArrayBuffer(8));

/** The encoder's buffer is kept up to this size; a longer prompt gets one of its own. */
const KEEP_BYTES = 1 << 20;
const encoder = new TextEncoder();
/** Whether a Uint32Array reads a word's bytes lowest first, as the lanes' words are defined. */
const LITTLE_ENDIAN = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;

/** A prompt's UTF-8 bytes, with word and any-offset views over the same memory. */
interface Encoded {
  /** The bytes, exactly (a view of the start of `words`' buffer). */
  bytes: Uint8Array;
  words: Uint32Array;
  view: DataView;
}

/** The reused buffer, and the chain whose prompt it holds now. */
let scratch = encodedIn(new ArrayBuffer(4_096));
let scratchOwner: BlockChain | undefined;

/**
 * `prompt`'s UTF-8 bytes (a lone surrogate as U+FFFD), in the shared buffer, encoded again only
 * when another chain used the buffer since: a chain is read on, synchronously, by each lookup and
 * then by placed(), and other calls may hash in between.
 */
function encoded(owner: BlockChain, prompt: string): Encoded {
  if (scratchOwner === owner) return scratch;
  // At most three bytes per UTF-16 code unit (a pair's four bytes are two units), rounded up to
  // whole words for the word view.
  const most = (prompt.length * 3 + 3) & ~3;
  let target = scratch;
  if (most > target.words.byteLength) {
    target = encodedIn(new ArrayBuffer(most));
    // A longer prompt's buffer is not kept: it is encoded afresh each time its chain is read on.
    if (most <= KEEP_BYTES) scratch = target;
  }
  const all = new Uint8Array(target.words.buffer);
  target.bytes = all.subarray(0, encoder.encodeInto(prompt, all).written);
  if (target === scratch) scratchOwner = owner;
  return target;
}

function encodedIn(buffer: ArrayBuffer): Encoded {
  return { bytes: new Uint8Array(buffer, 0, 0), words: new Uint32Array(buffer), view: new DataView(buffer) };
}

/** The last scope's lanes: a gateway's calls mostly name a few models, often the same one. */
let lastScope: { fn: string; a: number; b: number } | undefined;

/** The state after the model's name and a NUL, which ends it so no name runs on into the first block. */
function scopeOf(fn: string): { a: number; b: number } {
  if (lastScope?.fn === fn) return lastScope;
  const bytes = encoder.encode(`${fn}\u0000`);
  let a = SEED_A;
  let b = SEED_B;
  const data = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let i = 0;
  for (; i + 4 <= bytes.length; i += 4) {
    a = mixA(a, data.getUint32(i, true));
    b = mixB(b, data.getUint32(i, true));
  }
  let word = 0;
  for (let shift = 0; i < bytes.length; i++, shift += 8) word |= bytes[i]! << shift;
  lastScope = { fn, a: mixA(mixA(a, word), bytes.length), b: mixB(mixB(b, word), bytes.length) };
  return lastScope;
}

const SEED_A = 0x2325cbf2;
const SEED_B = 0x9ce48422;

/** Prompts longer than this (in UTF-8 bytes) are not kept in a memo. */
const MEMO_MAX_PROMPT_BYTES = 1 << 20;

/**
 * Recent finished chains, the latest for each first block, so that a prompt sharing its start
 * with a recent one (an application's system prompt, a session's history resent with each turn)
 * compares bytes, a fraction of the cost of hashing them, for the blocks they share. Bounded by
 * count and by the bytes the kept chains hold.
 */
export class PrefixMemo {
  readonly #chains: LRUCache<bigint, BlockChain>;

  /**
   * @param maxChains how many chains to keep.
   * @param maxBytes about how many bytes they may hold between them (each its prompt, a copy of
   *   its UTF-8 bytes and its hashes).
   */
  constructor(maxChains: number, maxBytes: number) {
    this.#chains = new LRUCache<bigint, BlockChain>({
      max: maxChains,
      maxSize: maxBytes,
      sizeCalculation: (chain) => Math.max(1, chain.keptBytes),
    });
  }

  /** Chains kept now. */
  get size(): number {
    return this.#chains.size;
  }

  /** The kept chain whose first block is `first`, if any. */
  find(first: bigint): BlockChain | undefined {
    return this.#chains.get(first);
  }

  /** Keeps `chain`, finished, as the one for its first block `first`. */
  keep(first: bigint, chain: BlockChain): void {
    this.#chains.set(first, chain);
  }
}
