/**
 * How an engine names the blocks of its KV cache, computed the same way on both sides of the wire:
 * the engine (and the simulated engine) store blocks under these names and publish them in their
 * KV-cache events, the runner relays the names, and a gateway computes them for a call's prompt to
 * find which runners already hold its prefix.
 *
 * The scheme is vLLM's prefix-cache hashing with `--prefix-caching-hash-algo sha256_cbor`, as read
 * in vLLM v0.11 to v0.17 (`vllm/v1/core/kv_cache_utils.py`: `init_none_hash`, `hash_block_tokens`,
 * `get_request_block_hasher`, `maybe_convert_block_hash`; `vllm/utils/hashing.py`: `sha256_cbor`):
 * - a prompt is cut into full blocks of `block_size` token ids; a partial last block has no name;
 * - block i's hash is SHA-256 over the canonical CBOR encoding of the triple
 *   (parent hash, block's token ids, extra keys), where the parent of block 0 is the seed hash and
 *   the extra keys are null for a plain text prompt (LoRA, multimodal input and cache salt add keys;
 *   calls that carry them are not matched here);
 * - the seed hash is `sha256_cbor(PYTHONHASHSEED)`, the seed as a text string: an engine started
 *   without PYTHONHASHSEED seeds from random bytes, and no router can match its blocks;
 * - in KV events a block hash is the 32 bytes, or, with `VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES`, the
 *   low 64 bits of those bytes read big-endian, as an integer.
 * A block's key on the wire is those low 64 bits as 16 hex digits, so either form maps to one key.
 * The test vectors in spec/runner/protocol/block-hash-vectors.json pin the scheme.
 */
import { createHash } from 'node:crypto';

/** The hash algorithms a gateway can match; the others (pickle-based, the builtin hash) are process-bound. */
export const BLOCK_HASH_ALGORITHMS = ['sha256_cbor'] as const;

/** One of {@link BLOCK_HASH_ALGORITHMS}. */
export type BlockHashAlgorithm = (typeof BLOCK_HASH_ALGORITHMS)[number];

/** How an engine names its cache blocks: enough, with the tokens, to name them anywhere. */
export interface BlockScheme {
  readonly algorithm: BlockHashAlgorithm;
  /** The engine's PYTHONHASHSEED, which seeds the first block's parent hash. */
  readonly seed: string;
  /** Tokens per block (`--block-size`, vLLM's default 16). */
  readonly blockSize: number;
}

/** A 32-byte block hash, as the engine computes it. */
export type BlockHash = Buffer;

/** The seed hash: the parent of every chain's first block. */
export function seedHash(seed: string): BlockHash {
  return sha256Cbor(cborText(seed));
}

/**
 * The hashes of the full blocks of `tokens` from block `start` on, chained from `parent` (the hash
 * of block `start - 1`, or the seed hash when `start` is 0). Pass `seedHash(scheme.seed)` once
 * and reuse it: it is the same for every call.
 */
export function chainBlockHashes(
  tokens: ArrayLike<number>,
  blockSize: number,
  parent: BlockHash,
  start = 0,
): BlockHash[] {
  const hashes: BlockHash[] = [];
  let previous = parent;
  for (let end = (start + 1) * blockSize; end <= tokens.length; end += blockSize) {
    previous = sha256Cbor(blockTriple(previous, tokens, end - blockSize, end));
    hashes.push(previous);
  }
  return hashes;
}

/**
 * A block's key: the low 64 bits of its hash read big-endian, as 16 lowercase hex digits. Takes
 * the 32 bytes, or the integer vLLM sends with `VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES` (a number when
 * the decoder made it one: only exact for values below 2^53, which is why decoders should give
 * bigints).
 */
export function blockKey(hash: Uint8Array | bigint | number): string {
  if (typeof hash === 'bigint') return BigInt.asUintN(64, hash).toString(16).padStart(16, '0');
  if (typeof hash === 'number') return blockKey(BigInt(hash));
  const start = Math.max(0, hash.length - 8);
  let key = '';
  for (let i = start; i < hash.length; i += 1) key += HEX[hash[i]!];
  return key.padStart(16, '0');
}

/** The keys of `hashes`, in order. */
export function blockKeys(hashes: readonly Uint8Array[]): string[] {
  return hashes.map((hash) => blockKey(hash));
}

const HEX: readonly string[] = Array.from({ length: 256 }, (_, byte) => byte.toString(16).padStart(2, '0'));

function sha256Cbor(encoded: Buffer): BlockHash {
  return createHash('sha256').update(encoded).digest();
}

// Canonical CBOR (RFC 8949 section 4.2.1, shortest form) of exactly the values the scheme hashes:
// a text string (the seed), a byte string (a parent hash), an array of unsigned integers (token
// ids), null (no extra keys) and the triple around them. Written out rather than taken from a CBOR
// library: these few shapes are the whole of it, and the hot path encodes one block per call.

const MAJOR_UNSIGNED = 0;
const MAJOR_BYTES = 2;
const MAJOR_TEXT = 3;
const MAJOR_ARRAY = 4;
const NULL = 0xf6;

/** The head of a CBOR item: major type and argument, in the shortest form. */
function head(major: number, value: number, out: number[]): void {
  const type = major << 5;
  if (value < 24) out.push(type | value);
  else if (value < 0x100) out.push(type | 24, value);
  else if (value < 0x10000) out.push(type | 25, value >>> 8, value & 0xff);
  else if (value < 0x100000000)
    out.push(type | 26, value >>> 24, (value >>> 16) & 0xff, (value >>> 8) & 0xff, value & 0xff);
  else throw new RangeError(`a token id of ${value} is beyond the 32-bit range the block hash encodes`);
}

function cborText(text: string): Buffer {
  const bytes = Buffer.from(text, 'utf8');
  const out: number[] = [];
  head(MAJOR_TEXT, bytes.length, out);
  return Buffer.concat([Buffer.from(out), bytes]);
}

/** `[parent, [tokens[from..to)], null]` in canonical CBOR. */
function blockTriple(parent: Uint8Array, tokens: ArrayLike<number>, from: number, to: number): Buffer {
  const out: number[] = [];
  head(MAJOR_ARRAY, 3, out);
  head(MAJOR_BYTES, parent.length, out);
  for (let i = 0; i < parent.length; i += 1) out.push(parent[i]!);
  head(MAJOR_ARRAY, to - from, out);
  for (let i = from; i < to; i += 1) {
    const token = tokens[i]!;
    if (!(Number.isInteger(token) && token >= 0)) throw new RangeError(`token ids are unsigned integers, got ${token}`);
    head(MAJOR_UNSIGNED, token, out);
  }
  out.push(NULL);
  return Buffer.from(out);
}
