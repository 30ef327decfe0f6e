/**
 * A prompt cut into fixed-size blocks, each hashed together with everything before it, the way
 * engines key their prefix caches (vLLM hashes 16-token blocks as a chain). Two prompts share
 * block hash i exactly when they share their first i + 1 blocks, so the index can answer "longest
 * shared prefix" with one lookup per block instead of comparing text.
 */

/**
 * The chained hashes of `prompt`'s full blocks of `blockSize` UTF-16 code units, scoped by `fn`.
 *
 * Blocks are characters, not tokens: the gateway has no tokenizer for every model, and with the
 * default of 64 characters (about 16 tokens of English) a block lines up roughly with an engine's
 * KV block. A trailing partial block is left out because engines cache only full blocks, so a
 * prompt shorter than one block never matches.
 *
 * The chain starts from `fn` so that the same system prompt sent to two models, which share no
 * KV cache, keeps one index entry per model instead of each overwriting the other's.
 *
 * The prompt is encoded to UTF-8 once, natively, and its bytes are hashed four at a time in two
 * 32-bit lanes of MurmurHash3's step ({@link mixA}, {@link mixB}); a block's key is both lanes
 * finalised into 64 bits. No string is sliced and a block costs one BigInt. This is a speed
 * matter only: the keys live in one gateway's memory, so no other process has to agree on them.
 */
export function blockHashes(fn: string, prompt: string, blockSize: number): bigint[] {
  const hashes: bigint[] = [];
  const length = prompt.length;
  if (length < blockSize) return hashes;
  const raw = utf8Of(prompt);
  const bytes = new DataView(raw.buffer, 0, raw.length);
  const scope = scopeOf(fn);
  let a = scope.a;
  let b = scope.b;
  // Every code unit below U+0080 is one byte, so a block's bytes are its characters.
  const ascii = raw.length === length;
  let start = 0;
  let from = 0;
  while (length - start >= blockSize) {
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
    for (; i + 4 <= to; i += 4) {
      const word = bytes.getUint32(i, true);
      a = mixA(a, word);
      b = mixB(b, word);
    }
    if (i < to) {
      let word = 0;
      for (let shift = 0; i < to; i++, shift += 8) word |= bytes.getUint8(i) << shift;
      a = mixA(a, word);
      b = mixB(b, word);
    }
    a = mixA(a, to - from);
    b = mixB(b, to - from);
    // One BigInt per block, read straight from the key's two 32-bit halves.
    key.setUint32(0, fmix((a + b) | 0), true);
    key.setUint32(4, fmix(a ^ Math.imul(b, 0x9e3779b1)), true);
    hashes.push(key.getBigUint64(0, true));
    from = to;
  }
  return hashes;
}

/**
 * MurmurHash3's body step (Appleby, public domain): the word is scrambled, then folded into the
 * lane, which is rotated and multiplied so every bit of every word reaches every bit of the lane.
 */
function mixA(h: number, word: number): number {
  let k = Math.imul(word, 0xcc9e2d51);
  k = Math.imul((k << 15) | (k >>> 17), 0x1b873593);
  h ^= k;
  h = (h << 13) | (h >>> 19);
  return (Math.imul(h, 5) + 0xe6546b64) | 0;
}

/** The same step with other constants and rotations, so the second lane fails independently of the first. */
function mixB(h: number, word: number): number {
  let k = Math.imul(word, 0x85ebca6b);
  k = Math.imul((k << 16) | (k >>> 16), 0xc2b2ae35);
  h ^= k;
  h = (h << 11) | (h >>> 21);
  return (Math.imul(h, 9) + 0x561ccd1b) | 0;
}

/** MurmurHash3's finaliser: every input bit flips each output bit with probability near one half. */
function fmix(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

/** Scratch for joining a key's two halves, each made from both lanes, into one 64-bit value. */
const key = new DataView(new ArrayBuffer(8));

/** The encoder's buffer is kept up to this size; a longer prompt gets one of its own. */
const KEEP_BYTES = 1 << 20;
const encoder = new TextEncoder();
let scratch = new Uint8Array(4_096);

/**
 * The UTF-8 bytes of `text` (a lone surrogate as U+FFFD), in a reused buffer: valid until the
 * next call, which the synchronous hash never overlaps.
 */
function utf8Of(text: string): Uint8Array {
  // At most three bytes per UTF-16 code unit (a pair's four bytes are two units).
  const most = text.length * 3;
  let buffer = scratch;
  if (most > buffer.length) {
    buffer = new Uint8Array(most);
    if (most <= KEEP_BYTES) scratch = buffer;
  }
  const { written } = encoder.encodeInto(text, buffer);
  return buffer.subarray(0, written);
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
