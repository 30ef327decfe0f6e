import { describe, expect, it } from 'vitest';
import {
  countTokens,
  createTokenWriter,
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
      { role: 'user', content: [{ type: 'text', text: 'hi' }, { type: 'image_url', image_url: {} }] },
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

  it('embeds text as a deterministic unit vector of 8 values', () => {
    const vector = embedText('sluice');
    expect(vector).toHaveLength(8);
    expect(embedText('sluice')).toEqual(vector);
    expect(embedText('gate')).not.toEqual(vector);
    expect(Math.hypot(...vector)).toBeCloseTo(1, 10);
  });
});
