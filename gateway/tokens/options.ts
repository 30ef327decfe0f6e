/**
 * The tokens room's options: where model tokenizers are found and how much tokenization it
 * remembers, with their defaults and checks.
 */
import { GatewayConfigError } from '../errors.ts';
import { checksFor, rule, silentLogger } from '../../placer/kernel/index.ts';
import type { Fail, Logger, Resolved } from '../../placer/kernel/index.ts';

/** Options for {@link PromptMapper}. */
export interface PromptMapperOptions {
  /** Prompts shorter than this, in tokens, are not mapped: a cache saves them too little to place on. @default 64 */
  readonly minPromptTokens?: number;
  /**
   * A directory of Hugging Face tokenizer folders, `<dir>/<name>/tokenizer.json` and
   * `tokenizer_config.json` for the tokenizer a runner announces as `<name>` (as
   * `Qwen/Qwen2.5-7B-Instruct`). Nothing is downloaded. Unset: only the simulated engine's
   * tokenizer is known.
   * @default undefined
   */
  readonly tokenizerDir?: string;
  /**
   * The most prompt prefixes whose tokens and block hashes are remembered, so a conversation's next
   * turn or a shared context is not tokenized and hashed again. 0 turns the cache off.
   * Each call remembers a few (one per message boundary at most a block apart).
   * @default 16384
   */
  readonly prefixCacheEntries?: number;
  /**
   * The most bytes the remembered prefixes hold, estimated as 48 bytes per block key and 8 per
   * token of a partial block: about 3 KiB for an 1k-token prefix.
   * @default 64 MiB
   */
  readonly prefixCacheBytes?: number;
  /** Where a tokenizer that cannot be loaded is reported, once per name. @default a logger that drops everything */
  readonly logger?: Logger;
}

/** The defaults of {@link PromptMapperOptions}. */
export const promptMapperDefaults = Object.freeze({
  minPromptTokens: 64,
  tokenizerDir: undefined as string | undefined,
  prefixCacheEntries: 16_384,
  prefixCacheBytes: 64 * 1024 * 1024,
  logger: silentLogger as Logger,
});

/** The options resolved: every default applied, every value checked. */
export type PromptMapperSettings = Resolved<typeof promptMapperDefaults>;

const rules = {
  minPromptTokens: rule.integer({ min: 0 }),
  tokenizerDir: directoryRule,
  prefixCacheEntries: rule.integer({ min: 0 }),
  prefixCacheBytes: rule.integer({ min: 1 }),
  logger: rule.logger(),
};

const check = checksFor(GatewayConfigError);

/**
 * Applies defaults and checks each option.
 * @throws {@link GatewayConfigError} naming the first bad option.
 */
export function resolvePromptMapperOptions(options: PromptMapperOptions = {}): PromptMapperSettings {
  return check.resolve(promptMapperDefaults, rules, options);
}

/** A directory path, or nothing. */
function directoryRule(option: string, value: unknown, fail: Fail): string | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'string' || value.length === 0)
    throw fail(`${option} must be a directory path, got ${JSON.stringify(value)}`, option);
  return value;
}
