/**
 * Tokenization remembered by prefix. A conversation's next turn repeats the last one, and a
 * tenant's calls share a long context: neither is tokenized and hashed again. A prompt can be cut
 * where its tokenizer cannot merge tokens across (RenderedPrompt.cuts: an added token such as
 * `<|im_end|>`, a newline of the simulated engine's text); the cache keeps, under a digest of the
 * text up to such a cut, the block-hash chain's state there. A call looks up its longest cut
 * remembered and tokenizes and hashes only the rest, piece by piece between its cuts, remembering
 * the states at those it passes.
 *
 * The result is the uncached one exactly: the tokens of a prompt cut at its cuts are its tokens,
 * and the chain state holds all the later blocks' hashes depend on. The digest covers the
 * tokenizer, the block scheme and the ids the tokenizer puts first, so neither can be confused.
 */
import { createHash } from 'node:crypto';
import type { Hash } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import type { BlockHash, BlockScheme } from '../../runner/protocol/index.ts';
import { BlockChain, emptyChain } from './block-chain.ts';
import type { ChainState } from './block-chain.ts';
import type { PromptTokenizer, RenderedPrompt } from './prompt-tokenizer.ts';

/** A prompt's length in tokens and the keys of its full blocks. */
export interface MappedTokens {
  readonly promptTokens: number;
  readonly keys: readonly string[];
}

/** How much the cache holds. */
export interface TokenCacheLimits {
  /** The most states remembered; 0 remembers none. */
  readonly maxEntries: number;
  /** The most bytes they hold, by {@link stateBytes}. */
  readonly maxBytes: number;
}

/** A state's weight in bytes, as counted against the limit: its keys (pointer and string), its tail, the rest. */
export function stateBytes(state: ChainState): number {
  return 48 * state.keys.length + 8 * state.tail.length + 160;
}

/** Tokenizes and hashes prompts, remembering chain states at their cuts. */
export class TokenCache {
  readonly #states: LRUCache<string, ChainState> | undefined;

  constructor(limits: TokenCacheLimits) {
    this.#states =
      limits.maxEntries === 0
        ? undefined
        : new LRUCache({ max: limits.maxEntries, maxSize: limits.maxBytes, sizeCalculation: stateBytes });
  }

  /** How many states are remembered. */
  get size(): number {
    return this.#states?.size ?? 0;
  }

  /** The tokens and block keys of `prompt`, the same as {@link uncachedTokens} gives. */
  map(tokenizer: PromptTokenizer, prompt: RenderedPrompt, scheme: BlockScheme, seed: BlockHash): MappedTokens {
    const states = this.#states;
    if (states === undefined || prompt.cuts === undefined) return uncachedTokens(tokenizer, prompt, scheme, seed);
    const { text } = prompt;
    const ends = [...prompt.cuts, text.length];
    const names = cutNames(namespace(tokenizer, prompt, scheme), text, ends);
    let resumed = -1;
    let from: ChainState | undefined;
    for (let i = ends.length - 1; i >= 0 && from === undefined; i -= 1) {
      from = states.get(names[i]!);
      if (from !== undefined) resumed = i;
    }
    const chain = new BlockChain(scheme.blockSize, from ?? emptyChain(seed));
    if (from === undefined) chain.push(prompt.lead);
    let start = resumed === -1 ? 0 : ends[resumed]!;
    let remembered = chain.tokens;
    for (let i = resumed + 1; i < ends.length; i += 1) {
      chain.push(tokenizer.encodePiece(text.slice(start, ends[i])));
      start = ends[i]!;
      // States a block or more apart, and always the last cut's and the whole text's, where a
      // conversation's next turn goes on.
      if (chain.tokens - remembered >= scheme.blockSize || i >= ends.length - 2) {
        states.set(names[i]!, chain.state());
        remembered = chain.tokens;
      }
    }
    chain.push(prompt.trail);
    return { promptTokens: chain.tokens, keys: chain.keys };
  }
}

/** The tokens and block keys of `prompt`, tokenized whole: what the cache must equal. */
export function uncachedTokens(
  tokenizer: PromptTokenizer,
  prompt: RenderedPrompt,
  scheme: BlockScheme,
  seed: BlockHash,
): MappedTokens {
  const chain = new BlockChain(scheme.blockSize, emptyChain(seed));
  chain.push(tokenizer.encode(prompt));
  return { promptTokens: chain.tokens, keys: chain.keys };
}

/** What the digest starts from: whatever else than the text makes a state differ. */
function namespace(tokenizer: PromptTokenizer, prompt: RenderedPrompt, scheme: BlockScheme): Hash {
  return createHash('sha256').update(
    JSON.stringify([tokenizer.name, scheme.algorithm, scheme.seed, scheme.blockSize, prompt.lead]),
  );
}

/** The name of the text up to each end: one digest carried along the text, copied at each end. */
function cutNames(digest: Hash, text: string, ends: readonly number[]): string[] {
  const names: string[] = [];
  let start = 0;
  for (const end of ends) {
    digest.update(text.slice(start, end));
    names.push(digest.copy().digest('base64'));
    start = end;
  }
  return names;
}
