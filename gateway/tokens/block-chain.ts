/**
 * A prompt's block hashes built as its tokens arrive, piece by piece: the full blocks hashed as
 * soon as they fill, the partial last block kept until more tokens come. Its state at any point is
 * all a later piece needs, which is what lets the token cache resume a prompt where a cached
 * prefix ends.
 */
import { blockKeys, chainBlockHashes } from '../../runner/protocol/index.ts';
import type { BlockHash } from '../../runner/protocol/index.ts';

/** A chain's state after some tokens: all a later piece needs to go on. */
export interface ChainState {
  /** The tokens so far. */
  readonly tokens: number;
  /** The keys of the full blocks so far, in order. */
  readonly keys: readonly string[];
  /** The hash of the last full block, or the seed hash before the first. */
  readonly parent: BlockHash;
  /** The tokens after the last full block: fewer than a block. */
  readonly tail: readonly number[];
}

/** The state before any token, for a scheme seeded with `seed`. */
export function emptyChain(seed: BlockHash): ChainState {
  return { tokens: 0, keys: [], parent: seed, tail: [] };
}

/** A chain being built; it never changes the state it starts from. */
export class BlockChain {
  readonly #blockSize: number;
  #tokens: number;
  readonly #keys: string[];
  #parent: BlockHash;
  #tail: number[];

  constructor(blockSize: number, from: ChainState) {
    this.#blockSize = blockSize;
    this.#tokens = from.tokens;
    this.#keys = from.keys.slice();
    this.#parent = from.parent;
    this.#tail = from.tail.slice();
  }

  /** The tokens so far. */
  get tokens(): number {
    return this.#tokens;
  }

  /** The keys of the full blocks so far: the chain's own list, to read once it is done. */
  get keys(): readonly string[] {
    return this.#keys;
  }

  /** Adds `ids` at the end. */
  push(ids: readonly number[]): void {
    if (ids.length === 0) return;
    this.#tokens += ids.length;
    const pending = this.#tail.length === 0 ? ids : this.#tail.concat(ids);
    const full = pending.length - (pending.length % this.#blockSize);
    if (full > 0) {
      const hashes = chainBlockHashes(pending, this.#blockSize, this.#parent);
      for (const key of blockKeys(hashes)) this.#keys.push(key);
      this.#parent = hashes[hashes.length - 1]!;
    }
    this.#tail = pending.slice(full);
  }

  /** The state now, to resume from later. */
  state(): ChainState {
    return { tokens: this.#tokens, keys: this.#keys.slice(), parent: this.#parent, tail: this.#tail };
  }
}
