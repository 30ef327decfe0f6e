/**
 * A call's prompt as an engine's cache names it: the engine's tokens (its tokenizer, with its
 * chat template applied to a chat) cut into the engine's blocks and hashed as it hashes them, so a
 * gateway can look the call up in the engines' cache truth.
 */
import {
  SIM_TOKENIZER,
  blockKeys,
  chainBlockHashes,
  seedHash,
  simChatPrompt,
  simCompletionPrompt,
  simTokenIds,
} from '../../runner/protocol/index.ts';
import type { BlockHash, CacheAnnouncement } from '../../runner/protocol/index.ts';

/** The parts of a call's body a prompt is made of, as the client sent them. */
export interface PromptSource {
  /** Which body shape: chat `messages`, a completion's `prompt`, or a response's `input` and `instructions`. */
  readonly route: 'chat' | 'completions' | 'responses';
  readonly messages?: unknown;
  readonly prompt?: unknown;
  readonly input?: unknown;
  readonly instructions?: unknown;
}

/** A prompt in an engine's blocks. */
export interface PromptBlocks {
  /** The prompt's length in the engine's tokens. */
  readonly promptTokens: number;
  /** The keys (block-hash.ts) of its full blocks, in order. */
  readonly keys: readonly string[];
}

/** Options for {@link PromptMapper}. */
export interface PromptMapperOptions {
  /** Prompts shorter than this, in tokens, are not mapped: a cache saves them too little to place on. @default 64 */
  readonly minPromptTokens?: number;
}

/**
 * Maps calls to the blocks of the engine that would serve them. Knows the simulated engine's
 * tokenizer ({@link SIM_TOKENIZER}); a tokenizer it does not know maps nothing, and the call is
 * placed without cache truth.
 */
export class PromptMapper {
  readonly #minPromptTokens: number;
  readonly #seeds = new Map<string, BlockHash>();

  constructor(options: PromptMapperOptions = {}) {
    this.#minPromptTokens = options.minPromptTokens ?? 64;
  }

  /** The call's blocks on an engine that announced `announcement`, or undefined when it cannot be mapped. */
  blocksOf(source: PromptSource, announcement: CacheAnnouncement): PromptBlocks | undefined {
    if (announcement.tokenizer !== SIM_TOKENIZER) return undefined;
    const text = simPromptText(source);
    if (text === undefined) return undefined;
    const tokens = simTokenIds(text);
    if (tokens.length < this.#minPromptTokens) return undefined;
    const { blockSize, seed } = announcement.scheme;
    return { promptTokens: tokens.length, keys: blockKeys(chainBlockHashes(tokens, blockSize, this.#seedOf(seed))) };
  }

  #seedOf(seed: string): BlockHash {
    let hash = this.#seeds.get(seed);
    if (hash === undefined) {
      hash = seedHash(seed);
      this.#seeds.set(seed, hash);
    }
    return hash;
  }
}

/** The text the simulated engine renders for the call, or undefined for a body it would refuse. */
function simPromptText(source: PromptSource): string | undefined {
  if (source.route === 'chat')
    return Array.isArray(source.messages) && source.messages.length > 0 ? simChatPrompt(source.messages) : undefined;
  if (source.route === 'completions') return simCompletionPrompt(source.prompt);
  return undefined;
}
