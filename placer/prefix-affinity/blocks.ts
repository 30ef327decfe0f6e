/**
 * A prompt cut into fixed-size blocks, each hashed together with everything before it, the way
 * engines key their prefix caches (vLLM hashes 16-token blocks as a chain). Two prompts share
 * block hash i exactly when they share their first i + 1 blocks, so the index can answer "longest
 * shared prefix" with one lookup per block instead of comparing text.
 */
import { fnv1a64 } from '../hash.ts';

/**
 * The chained hashes of `prompt`'s full blocks of `blockSize` UTF-16 code units, scoped by `fn`.
 *
 * Blocks are characters, not tokens: the gateway has no tokenizer for every model, and with the
 * default of 64 characters (about 16 tokens of English) a block lines up roughly with an engine's
 * KV block. A trailing partial block is left out because engines cache only full blocks, so a
 * prompt shorter than one block never matches.
 *
 * The chain starts from the hash of `fn` so that the same system prompt sent to two models, which
 * share no KV cache, keeps one index entry per model instead of each overwriting the other's.
 */
export function blockHashes(fn: string, prompt: string, blockSize: number): bigint[] {
  const hashes: bigint[] = [];
  // NUL ends the scope so no model name can run on into the first block and mimic another.
  let hash = fnv1a64(`${fn}\u0000`);
  let start = 0;
  while (prompt.length - start >= blockSize) {
    let end = start + blockSize;
    // Never split a surrogate pair: both halves would hash as U+FFFD, so two different emoji
    // straddling a boundary would collide. The block grows by one instead, the same in every prompt.
    if (end < prompt.length && isHighSurrogate(prompt.charCodeAt(end - 1))) end++;
    hash = fnv1a64(prompt.slice(start, end), hash);
    hashes.push(hash);
    start = end;
  }
  return hashes;
}

function isHighSurrogate(code: number): boolean {
  return code >= 0xd800 && code <= 0xdbff;
}
