/**
 * A model's Hugging Face tokenizer, from its `tokenizer.json` and `tokenizer_config.json`, with
 * `@huggingface/tokenizers` for the tokens and `@huggingface/jinja` for the chat template (both
 * Hugging Face's own JavaScript ports, used by Transformers.js; the template engine trims blocks
 * and strips their leading space as transformers' does).
 *
 * The prompt is the one vLLM (v0.11 on) makes, so its block hashes match the engine's:
 * - `/v1/chat/completions`: the chat template rendered with `add_generation_prompt` true and the
 *   tokenizer's special tokens (`bos_token`, `eos_token`...) as variables, each message's content
 *   a string (a list of parts becomes its text parts joined by newlines, vLLM's "string" content
 *   format), then tokenized with `add_special_tokens` false: the template writes any BOS itself,
 *   and vLLM's chat requests default to adding no other;
 * - `/v1/completions`: a text prompt tokenized with `add_special_tokens` true, so the BOS (or
 *   other tokens) the tokenizer's post-processor adds are there, as vLLM's completion requests
 *   default. (A list of prompts is several engine requests, and is not mapped.)
 * In both, special tokens written in the text (`<|im_start|>`) are read as themselves.
 */
import { Template } from '@huggingface/jinja';
import { Tokenizer } from '@huggingface/tokenizers';
import type { PromptSource, PromptTokenizer, RenderedPrompt } from './prompt-tokenizer.ts';

/** A tokenizer folder's files, parsed. */
export interface TokenizerFiles {
  /** `tokenizer.json`. */
  readonly tokenizer: unknown;
  /** `tokenizer_config.json`. */
  readonly config: unknown;
  /** `chat_template.jinja`, where the model keeps its template in a file of its own. */
  readonly chatTemplate?: string;
}

const NONE: readonly number[] = Object.freeze([]);
const SPECIAL_TOKEN_NAMES = [
  'bos_token',
  'eos_token',
  'unk_token',
  'sep_token',
  'pad_token',
  'cls_token',
  'mask_token',
];

/** A Hugging Face tokenizer as the mapper uses it. */
export class HfTokenizer implements PromptTokenizer {
  readonly name: string;
  readonly #tokenizer: Tokenizer;
  readonly #template: Template | undefined;
  readonly #variables: Readonly<Record<string, string>>;
  readonly #cutAfter: RegExp | undefined;
  readonly #wrap: { readonly lead: readonly number[]; readonly trail: readonly number[] } | undefined;

  /** @throws when the files do not make a tokenizer or the template does not parse. */
  constructor(name: string, files: TokenizerFiles) {
    const config = asRecord(files.config, 'tokenizer_config.json');
    const json = asRecord(files.tokenizer, 'tokenizer.json');
    this.name = name;
    this.#tokenizer = new Tokenizer(json, config);
    const template = files.chatTemplate ?? defaultTemplate(config.chat_template);
    this.#template = template === undefined ? undefined : new Template(template);
    this.#variables = specialTokens(config);
    this.#cutAfter = sectionsStandAlone(json) ? cutMarkers(json) : undefined;
    this.#wrap = this.#probeWrap();
  }

  render(source: PromptSource): RenderedPrompt | undefined {
    if (source.route === 'chat') return this.#renderChat(source);
    if (source.route === 'completions' && typeof source.prompt === 'string') return this.#completion(source.prompt);
    return undefined;
  }

  encode(prompt: RenderedPrompt): number[] {
    return this.#tokenizer.encode(prompt.text, { add_special_tokens: prompt.addsSpecialTokens }).ids;
  }

  encodePiece(text: string): number[] {
    return this.#tokenizer.encode(text, { add_special_tokens: false }).ids;
  }

  #renderChat(source: PromptSource): RenderedPrompt | undefined {
    if (this.#template === undefined || (Array.isArray(source.tools) && source.tools.length > 0)) return undefined;
    const messages = chatMessages(source.messages);
    if (messages === undefined) return undefined;
    let text: string;
    try {
      text = this.#template.render({ ...this.#variables, messages, add_generation_prompt: true });
    } catch {
      // The template refused the conversation (raise_exception), as the engine would.
      return undefined;
    }
    return { text, cuts: this.#cutsOf(text), addsSpecialTokens: false, lead: NONE, trail: NONE };
  }

  #completion(text: string): RenderedPrompt {
    // Without a known wrap the text can only be encoded whole, with the tokenizer's own special tokens.
    if (this.#wrap === undefined) return { text, cuts: undefined, addsSpecialTokens: true, lead: NONE, trail: NONE };
    return { text, cuts: this.#cutsOf(text), addsSpecialTokens: true, ...this.#wrap };
  }

  #cutsOf(text: string): number[] | undefined {
    if (this.#cutAfter === undefined) return undefined;
    const cuts: number[] = [];
    for (const match of text.matchAll(this.#cutAfter)) {
      const at = match.index + match[0].length;
      if (at < text.length) cuts.push(at);
    }
    return cuts;
  }

  /**
   * The ids the tokenizer's post-processor puts around a text (`add_special_tokens`), found by
   * encoding a text with and without them; undefined when they are not simply around it.
   */
  #probeWrap(): { lead: number[]; trail: number[] } | undefined {
    const probe = 'probe text';
    const bare: number[] = this.#tokenizer.encode(probe, { add_special_tokens: false }).ids;
    const wrapped: number[] = this.#tokenizer.encode(probe, { add_special_tokens: true }).ids;
    for (let at = 0; at + bare.length <= wrapped.length; at += 1) {
      if (bare.every((id, i) => wrapped[at + i] === id))
        return { lead: wrapped.slice(0, at), trail: wrapped.slice(at + bare.length) };
    }
    return undefined;
  }
}

function asRecord(value: unknown, file: string): Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    throw new TypeError(`${file} is not an object`);
  return value as Record<string, unknown>;
}

/** The config's chat template: a string, or the one named `default` of a list of named templates. */
function defaultTemplate(value: unknown): string | undefined {
  if (typeof value === 'string') return value;
  if (!Array.isArray(value)) return undefined;
  const named = value.find((entry) => entry?.name === 'default');
  return typeof named?.template === 'string' ? named.template : undefined;
}

/** The special tokens a template may name, as transformers passes them: text, whichever form the config holds. */
function specialTokens(config: Record<string, unknown>): Record<string, string> {
  const variables: Record<string, string> = {};
  for (const name of SPECIAL_TOKEN_NAMES) {
    const value = config[name];
    const text = typeof value === 'string' ? value : (value as { content?: unknown } | null)?.content;
    if (typeof text === 'string') variables[name] = text;
  }
  return variables;
}

/** Chat messages as vLLM hands them to a template, or undefined for a conversation it would refuse. */
function chatMessages(value: unknown): Record<string, unknown>[] | undefined {
  if (!Array.isArray(value) || value.length === 0) return undefined;
  const messages: Record<string, unknown>[] = [];
  for (const message of value) {
    if (typeof message !== 'object' || message === null || typeof message.role !== 'string') return undefined;
    const content = contentText(message.content);
    if (content === undefined) return undefined;
    messages.push({ ...message, content });
  }
  return messages;
}

function contentText(content: unknown): string | undefined {
  if (typeof content === 'string') return content;
  if (content === undefined || content === null) return '';
  if (!Array.isArray(content)) return undefined;
  const texts: string[] = [];
  for (const part of content) {
    if (typeof part !== 'object' || part === null) return undefined;
    // A part that is not text (an image) changes the engine's blocks in ways not matched here.
    if (part.type !== 'text' || typeof part.text !== 'string') return undefined;
    texts.push(part.text);
  }
  return texts.join('\n');
}

/**
 * True when the tokenizer takes each stretch of text between its added tokens on its own, so a
 * text cut just after an added token tokenizes as the two parts do. A Metaspace pre-tokenizer
 * that prepends its space only to the first stretch (`prepend_scheme: first`) breaks that.
 */
function sectionsStandAlone(json: Record<string, unknown>): boolean {
  const firstOnly = (node: unknown): boolean => {
    if (typeof node !== 'object' || node === null) return false;
    const step = node as { type?: unknown; prepend_scheme?: unknown; pretokenizers?: unknown };
    if (step.type === 'Metaspace' && step.prepend_scheme === 'first') return true;
    return Array.isArray(step.pretokenizers) && step.pretokenizers.some(firstOnly);
  };
  return !firstOnly(json.pre_tokenizer);
}

/**
 * A pattern matching the added tokens after which a text can be cut: those matched on the raw
 * text (not normalized) that do not strip the space after them; longest first, as the tokenizer
 * matches them. Undefined when there are none.
 */
function cutMarkers(json: Record<string, unknown>): RegExp | undefined {
  const added = Array.isArray(json.added_tokens) ? json.added_tokens : [];
  const markers = added
    .filter((token) => typeof token?.content === 'string' && token.content.length > 0)
    .filter((token) => token.rstrip !== true && (token.normalized !== true || json.normalizer == null))
    .map((token) => token.content as string)
    .sort((a, b) => b.length - a.length);
  if (markers.length === 0) return undefined;
  return new RegExp(markers.map((marker) => marker.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('|'), 'g');
}
