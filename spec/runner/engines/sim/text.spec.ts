import { describe, expect, it } from 'vitest';
import {
  countTokens,
  createTokenWriter,
  EMBEDDING_DIMENSIONS,
  embeddingToBase64,
  embedText,
  renderChatPrompt,
  renderCompletionPrompt,
} from '../../../../runner/engines/sim/text.ts';

function generate(prompt: string, tokens: number): string {
  const write = createTokenWriter(prompt);
  return Array.from({ length: tokens }, (_, index) => write(index)).join('');
}

describe('text', () => {
  it('returns the same words for the same prompt and other words for another', () => {
    expect(generate('hello there', 12)).toBe(generate('hello there', 12));
    expect(generate('hello there', 12)).not.toBe(generate('goodbye', 12));
    expect(generate('hello there', 12).split(' ')).toHaveLength(12);
  });

  it('counts words and punctuation marks as tokens', () => {
    expect(countTokens('Hello, world! How are you?')).toBe(8);
    expect(countTokens('   ')).toBe(0);
  });

  it('renders chat messages with roles and text parts', () => {
    const prompt = renderChatPrompt([
      { role: 'system', content: 'be brief' },
      {
        role: 'user',
        content: [
          { type: 'text', text: 'hi' },
          { type: 'image_url', image_url: {} },
        ],
      },
    ]);
    expect(prompt).toBe('system: be brief\nuser: hi ');
  });

  it('renders completion prompts of every OpenAI shape and refuses others', () => {
    expect(renderCompletionPrompt('abc')).toBe('abc');
    expect(renderCompletionPrompt(['a', 'b'])).toBe('a\nb');
    expect(countTokens(renderCompletionPrompt([1, 2, 3]) ?? '')).toBe(3);
    expect(countTokens(renderCompletionPrompt([[1, 2], [3]]) ?? '')).toBe(3);
    expect(renderCompletionPrompt({})).toBeUndefined();
    expect(renderCompletionPrompt([])).toBeUndefined();
  });

  it('embeds text as a deterministic unit vector of 384 float32 values', () => {
    const vector = embedText('sluice');
    expect(vector).toHaveLength(EMBEDDING_DIMENSIONS);
    expect(EMBEDDING_DIMENSIONS).toBe(384);
    expect(embedText('sluice')).toEqual(vector);
    expect(embedText('gate')).not.toEqual(vector);
    expect(Math.hypot(...vector)).toBeCloseTo(1, 6);
    expect(vector.every((value) => Math.fround(value) === value)).toBe(true);
  });

  it('cuts a shorter vector as a matryoshka model does: the leading values, back to unit length', () => {
    const full = embedText('sluice');
    const short = embedText('sluice', 32);
    expect(short).toHaveLength(32);
    expect(Math.hypot(...short)).toBeCloseTo(1, 6);
    const norm = Math.hypot(...full.slice(0, 32));
    short.forEach((value, i) => expect(value).toBeCloseTo(full[i]! / norm, 6));
  });

  it('encodes an embedding as base64 little-endian float32 bytes that decode to the same numbers', () => {
    const vector = embedText('sluice', 5);
    const bytes = Buffer.from(embeddingToBase64(vector), 'base64');
    expect(bytes).toHaveLength(5 * 4);
    expect(Array.from({ length: 5 }, (_, i) => bytes.readFloatLE(i * 4))).toEqual(vector);
    expect(embeddingToBase64([1, -2])).toBe(Buffer.from([0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0]).toString('base64'));
  });

  it('gives each choice of a request its own words, choice 0 the words of a request without n', () => {
    const take = (write: (index: number) => string) => Array.from({ length: 6 }, (_, i) => write(i)).join('');
    const plain = take(createTokenWriter('a prompt'));
    expect(take(createTokenWriter('a prompt', 0))).toBe(plain);
    expect(take(createTokenWriter('a prompt', 1))).not.toBe(plain);
    expect(take(createTokenWriter('a prompt', 2))).not.toBe(take(createTokenWriter('a prompt', 1)));
    expect(take(createTokenWriter('a prompt', 1))).toBe(take(createTokenWriter('a prompt', 1)));
  });
});
