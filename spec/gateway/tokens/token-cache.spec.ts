import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { PromptMapper } from '../../../gateway/tokens/index.ts';
import { simTokenizer } from '../../../gateway/tokens/prompt-tokenizer.ts';
import type { PromptSource, PromptTokenizer } from '../../../gateway/tokens/prompt-tokenizer.ts';
import { TokenCache, stateBytes } from '../../../gateway/tokens/token-cache.ts';
import { seedHash } from '../../../runner/protocol/index.ts';
import type { BlockScheme, CacheAnnouncement } from '../../../runner/protocol/index.ts';
import { SIM_ANNOUNCEMENT as sim } from '../../support/cache-announcement.ts';

const FIXTURES = join(import.meta.dirname, '../../fixtures/tokenizers');

/** A small seeded generator (mulberry32), so every run sees the same prompts. */
function seeded(seed: number): () => number {
  let state = seed;
  return () => {
    state = (state + 0x6d2b79f5) | 0;
    let t = Math.imul(state ^ (state >>> 15), 1 | state);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32;
  };
}

// Words, punctuation, digits, other scripts, whitespace runs and special-token text: the places
// where a cut in the wrong place would change the tokens.
const PIECES = [
  'the',
  'gateway',
  'places',
  'each',
  'call',
  'fleet',
  'engine',
  'prefix',
  'cache',
  'block',
  "it's",
  "we're",
  'données',
  '数据',
  '😀',
  '2026',
  '3.14',
  ',',
  '.',
  '?',
  '!',
  '(',
  ')',
  ' ',
  '  ',
  '\n',
  '\n\n',
  '\t',
  ' \n ',
  '<|im_end|>',
  '<|im_start|>',
  '<|begin_of_text|>',
  '<|im_',
  'assistant',
  'user',
  ':',
  'def f(x):\n    return x',
];

function text(random: () => number, words: number): string {
  let out = '';
  for (let i = 0; i < words; i += 1) {
    const piece = PIECES[Math.floor(random() * PIECES.length)]!;
    out += random() < 0.6 && !/^\s/.test(piece) ? ` ${piece}` : piece;
  }
  return out;
}

/**
 * Calls as a fleet sees them: tenants with a long shared system prompt, users in conversations of
 * several turns (each turn a call holding all before it), and completions sharing documents.
 */
function workload(seed: number): PromptSource[] {
  const random = seeded(seed);
  const systems = Array.from({ length: 4 }, () => text(random, 60 + Math.floor(random() * 200)));
  const documents = Array.from({ length: 3 }, () => text(random, 100 + Math.floor(random() * 200)));
  const calls: PromptSource[] = [];
  for (let conversation = 0; conversation < 12; conversation += 1) {
    const messages: { role: string; content: string }[] = [
      { role: 'system', content: systems[conversation % systems.length]! },
    ];
    for (let turn = 0; turn < 4; turn += 1) {
      messages.push({ role: 'user', content: text(random, 5 + Math.floor(random() * 40)) });
      calls.push({ route: 'chat', messages: [...messages] });
      messages.push({ role: 'assistant', content: text(random, 10 + Math.floor(random() * 60)) });
    }
    const document = documents[conversation % documents.length]!;
    calls.push({ route: 'completions', prompt: document + text(random, 3 + Math.floor(random() * 30)) });
  }
  return calls;
}

const model: CacheAnnouncement = { ...sim, tokenizer: 'sluice/chatml-bpe' };

describe('the token cache', () => {
  it.each([
    ['the simulated engine tokenizer, blocks of 16', sim],
    ['the simulated engine tokenizer, blocks of 5', { ...sim, scheme: { ...sim.scheme, blockSize: 5 } }],
    ['a Hugging Face tokenizer, blocks of 16', model],
    ['a Hugging Face tokenizer, blocks of 3', { ...model, scheme: { ...model.scheme, blockSize: 3 } }],
  ])('maps every call of a workload as the uncached path does, on %s', async (_, announcement) => {
    const cached = new PromptMapper({ tokenizerDir: FIXTURES, minPromptTokens: 1 });
    const uncached = new PromptMapper({ tokenizerDir: FIXTURES, minPromptTokens: 1, prefixCacheEntries: 0 });
    expect(await cached.prepare(announcement)).toBe(true);
    expect(await uncached.prepare(announcement)).toBe(true);
    for (const seed of [1, 2, 3]) {
      for (const call of workload(seed)) {
        const expected = uncached.blocksOf(call, announcement);
        expect(expected).toBeDefined();
        expect(cached.blocksOf(call, announcement)).toEqual(expected);
      }
    }
    expect(cached.cachedPrefixes).toBeGreaterThan(100);
    expect(uncached.cachedPrefixes).toBe(0);
  });

  it('keeps the two block schemes and the two tokenizers apart', async () => {
    const mapper = new PromptMapper({ tokenizerDir: FIXTURES, minPromptTokens: 1 });
    await mapper.prepare(model);
    const call = workload(4)[0]!;
    const first = mapper.blocksOf(call, sim)!;
    expect(mapper.blocksOf(call, { ...sim, scheme: { ...sim.scheme, seed: '1' } })!.keys[0]).not.toBe(first.keys[0]);
    expect(mapper.blocksOf(call, model)!.keys[0]).not.toBe(first.keys[0]);
    expect(mapper.blocksOf(call, sim)).toEqual(first);
  });

  it("tokenizes only what a conversation's next turn adds, and a shared context once", () => {
    let tokenized = 0;
    const counting: PromptTokenizer = {
      ...simTokenizer,
      encodePiece: (piece) => {
        tokenized += piece.length;
        return simTokenizer.encodePiece(piece);
      },
    };
    const cache = new TokenCache({ maxEntries: 100, maxBytes: 1 << 20 });
    const scheme: BlockScheme = sim.scheme;
    const seed = seedHash(scheme.seed);
    const random = seeded(9);
    const system = { role: 'system', content: `${text(random, 150)}\n${text(random, 150)}` };
    const turn1 = [system, { role: 'user', content: text(random, 30) }];
    const turn2 = [...turn1, { role: 'assistant', content: text(random, 50) }, { role: 'user', content: 'and then?' }];
    const other = [system, { role: 'user', content: text(random, 30) }];
    const length = (messages: unknown[]) => simTokenizer.render({ route: 'chat', messages })!.text.length;
    const map = (messages: unknown[]) => {
      tokenized = 0;
      cache.map(counting, simTokenizer.render({ route: 'chat', messages })!, scheme, seed);
      return tokenized;
    };
    expect(map(turn1)).toBe(length(turn1));
    // Only the new turn, and at most the newline gap of the simulated tokenizer's cuts before it.
    expect(map(turn2)).toBeLessThanOrEqual(length(turn2) - length(turn1) + 64);
    expect(map(turn2)).toBe(0);
    expect(map(other)).toBeLessThanOrEqual(length(other) - length([system]) + 64);
  });

  it('holds no more states than its entries and bytes allow', () => {
    const scheme: BlockScheme = sim.scheme;
    const seed = seedHash(scheme.seed);
    const calls = workload(5).map((call) => simTokenizer.render(call)!);
    const byEntries = new TokenCache({ maxEntries: 7, maxBytes: 1 << 30 });
    const byBytes = new TokenCache({ maxEntries: 10_000, maxBytes: 20_000 });
    let largest = 0;
    for (const prompt of calls) {
      byEntries.map(simTokenizer, prompt, scheme, seed);
      byBytes.map(simTokenizer, prompt, scheme, seed);
      expect(byEntries.size).toBeLessThanOrEqual(7);
      largest = Math.max(largest, byBytes.size);
    }
    expect(byEntries.size).toBe(7);
    // States of prompts of a few hundred tokens weigh a few KiB each: 20 kB holds only a few.
    expect(largest).toBeGreaterThan(1);
    expect(largest).toBeLessThan(20_000 / stateBytes({ tokens: 0, keys: [], parent: seed, tail: [] }));
    expect(byBytes.size).toBeLessThan(20);
  });
});
