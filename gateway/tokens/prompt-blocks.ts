/**
 * A call's prompt as an engine's cache names it: the engine's tokens (its tokenizer, with its
 * chat template applied to a chat) cut into the engine's blocks and hashed as it hashes them, so a
 * gateway can look the call up in the engines' cache truth.
 */
import type { Logger } from '../../placer/kernel/index.ts';
import { seedHash } from '../../runner/protocol/index.ts';
import type { BlockHash, CacheAnnouncement } from '../../runner/protocol/index.ts';
import { resolvePromptMapperOptions } from './options.ts';
import type { PromptMapperOptions } from './options.ts';
import type { PromptSource, PromptTokenizer } from './prompt-tokenizer.ts';
import { TokenCache } from './token-cache.ts';
import { TokenizerShelf } from './tokenizer-shelf.ts';

/** A prompt in an engine's blocks. */
export interface PromptBlocks {
  /** The prompt's length in the engine's tokens. */
  readonly promptTokens: number;
  /** The keys (block-hash.ts) of its full blocks, in order. */
  readonly keys: readonly string[];
}

/**
 * Maps calls to the blocks of the engine that would serve them. Knows the simulated engine's
 * tokenizer and the Hugging Face tokenizers in its tokenizer directory. A tokenizer it does not
 * have yet maps nothing while it loads; one it cannot load maps nothing at all (and is logged
 * once): the call is placed without cache truth, never failed.
 */
export class PromptMapper {
  readonly #minPromptTokens: number;
  readonly #shelf: TokenizerShelf;
  readonly #cache: TokenCache;
  readonly #seeds = new Map<string, BlockHash>();
  readonly #logger: Logger;
  /** Tokenizers that threw on a prompt, told once each. */
  readonly #failed = new Set<string>();

  /** @throws {@link GatewayConfigError} naming the first bad option. */
  constructor(options: PromptMapperOptions = {}) {
    const settings = resolvePromptMapperOptions(options);
    this.#minPromptTokens = settings.minPromptTokens;
    this.#logger = settings.logger;
    this.#shelf = new TokenizerShelf({ dir: settings.tokenizerDir, logger: settings.logger });
    this.#cache = new TokenCache({ maxEntries: settings.prefixCacheEntries, maxBytes: settings.prefixCacheBytes });
  }

  /**
   * Loads the tokenizer a runner announced, off the call path: call it when a runner registers.
   * Resolves to whether calls for it can be mapped; never rejects.
   */
  async prepare(announcement: CacheAnnouncement): Promise<boolean> {
    return (await this.#shelf.load(announcement.tokenizer)) !== undefined;
  }

  /** How many prompt prefixes' tokens are remembered. */
  get cachedPrefixes(): number {
    return this.#cache.size;
  }

  /** The call's blocks on an engine that announced `announcement`, or undefined when it cannot be mapped. */
  blocksOf(source: PromptSource, announcement: CacheAnnouncement): PromptBlocks | undefined {
    const tokenizer = this.#shelf.get(announcement.tokenizer);
    if (tokenizer === undefined) return undefined;
    try {
      return this.#map(tokenizer, source, announcement);
    } catch (error) {
      // A tokenizer that throws on some prompt costs that call its cache truth, never the call.
      this.#failedOnce(tokenizer.name, error);
      return undefined;
    }
  }

  #failedOnce(name: string, error: unknown): void {
    if (this.#failed.has(name)) return;
    this.#failed.add(name);
    // The error's class only: a library's message may quote the prompt, which is the client's.
    this.#logger.warn('prompt not mapped', {
      tokenizer: name,
      error: error instanceof Error ? error.name : typeof error,
    });
  }

  #map(tokenizer: PromptTokenizer, source: PromptSource, announcement: CacheAnnouncement): PromptBlocks | undefined {
    const prompt = tokenizer.render(source);
    // A UTF-16 unit is at most 3 bytes of UTF-8, and a token at least one byte: a bound without tokenizing.
    if (
      prompt === undefined ||
      3 * prompt.text.length + prompt.lead.length + prompt.trail.length < this.#minPromptTokens
    )
      return undefined;
    const { scheme } = announcement;
    const mapped = this.#cache.map(tokenizer, prompt, scheme, this.#seedOf(scheme.seed));
    return mapped.promptTokens < this.#minPromptTokens ? undefined : mapped;
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
