/**
 * The simulated engine's tokenizer and chat template, on the wire because both sides use them: the
 * simulated engine counts, caches and hashes a prompt's tokens with them, and a gateway computes
 * the same tokens for a call to a runner that announces the tokenizer {@link SIM_TOKENIZER}, so
 * its block hashes match the engine's exactly, as a real model's tokenizer makes them match a real
 * engine's. A token is a word or a single other visible character; its id is a stable hash of its
 * text, below 2^31.
 */

/** The tokenizer name a runner in front of the simulated engine announces. */
export const SIM_TOKENIZER = 'sluice-sim';

// A word (letters, digits, underscore) or a single other visible character; never whitespace,
// so a space can join tokens without ambiguity where they are hashed.
const TOKEN = /[\p{L}\p{N}_]+|[^\p{L}\p{N}_\s]/gu;

/**
 * Splits `text` into the simulator's tokens: each word and each punctuation mark is one token.
 * A stand-in for a real tokenizer, deterministic and cheap; the prefix cache hashes its output.
 */
export function simTokens(text: string): string[] {
  return text.match(TOKEN) ?? [];
}

/** A rough token count: each word and each punctuation mark is one token. */
export function simTokenCount(text: string): number {
  return text.match(TOKEN)?.length ?? 0;
}

function contentText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  // Multimodal parts: only text parts count, as a text-only model would see them.
  return content
    .map((part: unknown) =>
      typeof part === 'object' && part !== null && 'text' in part && typeof part.text === 'string' ? part.text : '',
    )
    .join(' ');
}

/** Renders chat messages as one prompt, a line per message, the way a chat template would roughly. */
export function simChatPrompt(messages: readonly unknown[]): string {
  return messages
    .map((message) => {
      if (typeof message !== 'object' || message === null) return '';
      const { role, content } = message as { role?: unknown; content?: unknown };
      return `${typeof role === 'string' ? role : 'user'}: ${contentText(content)}`;
    })
    .join('\n');
}

/**
 * Renders a completions `prompt` (text, texts, token ids or lists of token ids) as one text.
 * Token ids become space-separated numbers, so {@link simTokenCount} counts one per id.
 * Returns undefined for a shape OpenAI does not accept.
 */
export function simCompletionPrompt(prompt: unknown): string | undefined {
  if (typeof prompt === 'string') return prompt;
  if (!Array.isArray(prompt) || prompt.length === 0) return undefined;
  const parts: string[] = [];
  for (const item of prompt) {
    if (typeof item === 'string' || typeof item === 'number') parts.push(String(item));
    else if (Array.isArray(item) && item.every((id) => typeof id === 'number')) parts.push(item.join(' '));
    else return undefined;
  }
  return parts.join('\n');
}

/**
 * The token ids of `text`: each of {@link simTokens} named by FNV-1a over its UTF-16 code units,
 * kept below 2^31. Two different words may share an id (a 31-bit hash), as two spellings can
 * share a token in a real vocabulary; the same text always gives the same ids.
 */
export function simTokenIds(text: string): number[] {
  const tokens = simTokens(text);
  const ids = new Array<number>(tokens.length);
  for (let i = 0; i < tokens.length; i += 1) {
    const token = tokens[i]!;
    let hash = 0x811c9dc5;
    for (let c = 0; c < token.length; c += 1) hash = Math.imul(hash ^ token.charCodeAt(c), 0x01000193);
    ids[i] = (hash >>> 0) & 0x7fffffff;
  }
  return ids;
}
