/**
 * What the mapper asks of a tokenizer: the prompt text an engine makes of a call, where that text
 * can be cut without changing its tokens, and the tokens of a text. One contract for the simulated
 * engine's tokenizer and a model's Hugging Face tokenizer, so the prefix cache serves both.
 */
import { SIM_TOKENIZER, simChatPrompt, simCompletionPrompt, simTokenIds } from '../../runner/protocol/index.ts';

/** The parts of a call's body a prompt is made of, as the client sent them. */
export interface PromptSource {
  /** Which body shape: chat `messages`, a completion's `prompt`, or a response's `input` and `instructions`. */
  readonly route: 'chat' | 'completions' | 'responses';
  readonly messages?: unknown;
  readonly prompt?: unknown;
  readonly input?: unknown;
  readonly instructions?: unknown;
  /**
   * A chat's `tools`. A model's chat template renders them as the engine serialises them, which a
   * gateway does not reproduce exactly: a chat with tools is not mapped on a model's tokenizer.
   */
  readonly tools?: unknown;
}

/** A call's prompt as the engine renders it, before tokenization. */
export interface RenderedPrompt {
  readonly text: string;
  /**
   * Offsets into `text`, ascending and below its length, at which it can be cut: the tokens of the
   * text are the tokens of the part before a cut followed by those of the part after. (Its end is
   * always such a place and need not be listed.) Undefined when the tokenizer can only take the
   * text whole: nothing of it is then remembered.
   */
  readonly cuts: readonly number[] | undefined;
  /** Whether the tokenizer adds its special tokens (`lead`, `trail`) to the text's own, as to a completion's. */
  readonly addsSpecialTokens: boolean;
  /** Token ids the tokenizer puts before the text's own (a BOS on a completion), else empty. */
  readonly lead: readonly number[];
  /** Token ids the tokenizer puts after the text's own, else empty. */
  readonly trail: readonly number[];
}

/** A tokenizer as the mapper uses it. */
export interface PromptTokenizer {
  /** The name runners announce it by. */
  readonly name: string;
  /** The prompt the engine makes of the call, or undefined for a call it cannot render. */
  render(source: PromptSource): RenderedPrompt | undefined;
  /** The token ids of a whole rendered prompt, `lead` and `trail` included: what the engine computes. */
  encode(prompt: RenderedPrompt): number[];
  /** The token ids of a piece of a rendered prompt between two cuts, without `lead` or `trail`. */
  encodePiece(text: string): number[];
}

const NONE: readonly number[] = Object.freeze([]);

/** Cuts closer than this, in characters, are not offered: each costs a lookup and a digest. */
const SIM_CUT_GAP = 64;

/**
 * The simulated engine's tokenizer (runner/protocol/sim-prompt.ts). Its tokens never hold
 * whitespace, so any whitespace is a cut; the cuts offered are newlines (between a chat's messages
 * and within them) at least {@link SIM_CUT_GAP} characters apart, where prompts that share a
 * start tend to part ways.
 */
export const simTokenizer: PromptTokenizer = Object.freeze({
  name: SIM_TOKENIZER,
  render(source: PromptSource): RenderedPrompt | undefined {
    const text = simPromptText(source);
    if (text === undefined) return undefined;
    return { text, cuts: newlines(text), addsSpecialTokens: false, lead: NONE, trail: NONE };
  },
  encode: (prompt: RenderedPrompt) => simTokenIds(prompt.text),
  encodePiece: (text: string) => simTokenIds(text),
});

/** The text the simulated engine renders for the call, or undefined for a body it would refuse. */
function simPromptText(source: PromptSource): string | undefined {
  if (source.route === 'chat')
    return Array.isArray(source.messages) && source.messages.length > 0 ? simChatPrompt(source.messages) : undefined;
  if (source.route === 'completions') return simCompletionPrompt(source.prompt);
  return undefined;
}

/** The newlines of `text` at least {@link SIM_CUT_GAP} apart, each counted from the last one taken. */
function newlines(text: string): number[] {
  const cuts: number[] = [];
  let last = 0;
  for (let at = text.indexOf('\n', SIM_CUT_GAP); at !== -1; at = text.indexOf('\n', last + SIM_CUT_GAP)) {
    cuts.push(at);
    last = at;
  }
  return cuts;
}
