/**
 * Deterministic stand-ins for what a model computes: prompt rendering and token counts, output
 * words, and embeddings. The same input always gives the same output, so tests and benchmarks
 * can compare bodies across engines and runs.
 */
import { seededRandom } from '../../../placer/kernel/index.ts';

export {
  simChatPrompt as renderChatPrompt,
  simCompletionPrompt as renderCompletionPrompt,
  simTokenCount as countTokens,
  simTokens as tokenize,
} from '../../protocol/index.ts';

const VOCABULARY: readonly string[] = [
  'the',
  'river',
  'runs',
  'through',
  'a',
  'quiet',
  'valley',
  'and',
  'light',
  'falls',
  'on',
  'stone',
  'while',
  'wind',
  'moves',
  'over',
  'green',
  'fields',
  'of',
  'grain',
  'under',
  'open',
  'sky',
  'where',
  'birds',
  'turn',
  'slowly',
  'toward',
  'evening',
  'water',
  'gate',
  'sluice',
];

/** FNV-1a over UTF-16 code units: cheap, stable across runs, good enough to seed a generator. */
function hashText(text: string, seed = 0x811c9dc5): number {
  let hash = seed >>> 0;
  for (let i = 0; i < text.length; i += 1) {
    hash ^= text.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return hash;
}

/**
 * Returns a generator of the output tokens for `prompt`: call it with 0, 1, 2, ... in order.
 * Tokens after the first carry their leading space, so the concatenated deltas equal the text.
 * Each `choice` (a request's `n` answers, counted from 0) has its own words; choice 0's are the
 * words a request without `n` gets.
 */
export function createTokenWriter(prompt: string, choice = 0): (index: number) => string {
  const seed = hashText(prompt);
  const next = seededRandom(choice === 0 ? seed : hashText(`choice ${choice}`, seed));
  return (index) => {
    const word = VOCABULARY[Math.floor(next() * VOCABULARY.length)] ?? 'the';
    return index === 0 ? word : ` ${word}`;
  };
}

/**
 * Length of the simulator's embeddings, as a small sentence-embedding model's (all-MiniLM-L6-v2
 * and bge-small have 384): realistic for a client that sizes its index by it, cheap to draw.
 */
export const EMBEDDING_DIMENSIONS = 384;

/**
 * A unit-length vector derived from `text` alone. Asked for fewer `dimensions`, it behaves as a
 * matryoshka model does: the leading values of the full vector, scaled back to unit length.
 * Values are float32, as a model computes them, so the base64 encoding (float32 bytes) carries
 * exactly the numbers the float encoding shows.
 */
export function embedText(text: string, dimensions = EMBEDDING_DIMENSIONS): number[] {
  const next = seededRandom(hashText(text));
  // The generator is sequential, so drawing only the leading values gives the full vector's prefix.
  const raw = Array.from({ length: Math.min(dimensions, EMBEDDING_DIMENSIONS) }, () => next() * 2 - 1);
  let sum = 0;
  for (const value of raw) sum += value * value;
  const norm = Math.sqrt(sum) || 1;
  return raw.map((value) => Math.fround(value / norm));
}

/** An embedding as OpenAI's and vLLM's `base64` encoding sends it: little-endian float32 bytes, base64. */
export function embeddingToBase64(vector: readonly number[]): string {
  const bytes = Buffer.alloc(vector.length * 4);
  vector.forEach((value, i) => bytes.writeFloatLE(value, i * 4));
  return bytes.toString('base64');
}
