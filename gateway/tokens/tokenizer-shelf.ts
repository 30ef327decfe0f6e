/**
 * The tokenizers a gateway knows, by the name runners announce: the simulated engine's, always,
 * and each Hugging Face tokenizer found in the tokenizer directory, loaded once, the first time
 * its name is asked for. Nothing is downloaded: the folders are put there by the operator.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { SIM_TOKENIZER } from '../../runner/protocol/index.ts';
import type { Logger } from '../../placer/kernel/index.ts';
import { HfTokenizer } from './hf-tokenizer.ts';
import { simTokenizer } from './prompt-tokenizer.ts';
import type { PromptTokenizer } from './prompt-tokenizer.ts';

/** A Hugging Face name: an optional owner and a model, each of letters, digits, `.`, `_` and `-`, never `..`. */
const NAME = /^(?:[A-Za-z0-9][\w.-]*\/)?[A-Za-z0-9][\w.-]*$/;

/** Where tokenizers come from and where a failure to load one is told. */
export interface TokenizerShelfOptions {
  /** The directory of tokenizer folders, `<dir>/<name>/`; undefined when there is none. */
  readonly dir: string | undefined;
  readonly logger: Logger;
}

/** Loads each tokenizer once and hands it out without waiting once loaded. */
export class TokenizerShelf {
  readonly #dir: string | undefined;
  readonly #logger: Logger;
  /** Each name asked for: its tokenizer, null when it cannot be loaded, or the load under way. */
  readonly #shelf = new Map<string, PromptTokenizer | null | Promise<PromptTokenizer | undefined>>();

  constructor(options: TokenizerShelfOptions) {
    this.#dir = options.dir;
    this.#logger = options.logger;
    this.#shelf.set(SIM_TOKENIZER, simTokenizer);
  }

  /**
   * The tokenizer named `name` when it is loaded; otherwise undefined, and its load starts (once)
   * so that later calls find it.
   */
  get(name: string): PromptTokenizer | undefined {
    const held = this.#shelf.get(name);
    if (held === undefined) void this.load(name);
    return held instanceof Promise || held === null ? undefined : held;
  }

  /** The tokenizer named `name`, loaded if it is not yet, or undefined when it cannot be (told once, in the log). */
  load(name: string): Promise<PromptTokenizer | undefined> {
    const held = this.#shelf.get(name);
    if (held instanceof Promise) return held;
    if (held !== undefined) return Promise.resolve(held ?? undefined);
    const loading = this.#read(name).then(
      (tokenizer) => {
        this.#shelf.set(name, tokenizer);
        return tokenizer;
      },
      (error: unknown) => {
        this.#shelf.set(name, null);
        this.#logger.warn('tokenizer not loaded', {
          tokenizer: name,
          reason: error instanceof Error ? error.message : String(error),
        });
        return undefined;
      },
    );
    this.#shelf.set(name, loading);
    return loading;
  }

  async #read(name: string): Promise<PromptTokenizer> {
    if (this.#dir === undefined) throw new Error('no tokenizer directory is set (--tokenizers)');
    if (!NAME.test(name) || name.split('/').includes('..')) throw new Error('not a tokenizer name');
    const folder = join(this.#dir, ...name.split('/'));
    const [tokenizer, config, chatTemplate] = await Promise.all([
      readJson(join(folder, 'tokenizer.json')),
      readJson(join(folder, 'tokenizer_config.json')),
      readOptional(join(folder, 'chat_template.jinja')),
    ]);
    return new HfTokenizer(
      name,
      chatTemplate === undefined ? { tokenizer, config } : { tokenizer, config, chatTemplate },
    );
  }
}

async function readJson(path: string): Promise<unknown> {
  return JSON.parse(await readFile(path, 'utf8'));
}

async function readOptional(path: string): Promise<string | undefined> {
  try {
    return await readFile(path, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw error;
  }
}
