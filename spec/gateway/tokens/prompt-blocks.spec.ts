import { describe, expect, it } from 'vitest';
import { PromptMapper } from '../../../gateway/tokens/index.ts';
import {
  blockKeys,
  chainBlockHashes,
  seedHash,
  simChatPrompt,
  simCompletionPrompt,
  simTokenIds,
} from '../../../runner/protocol/index.ts';
import { SIM_ANNOUNCEMENT as sim } from '../../support/cache-announcement.ts';

const system = { role: 'system', content: 'You answer questions about the fleet, briefly and exactly. '.repeat(8) };

describe('PromptMapper on the simulated engine tokenizer', () => {
  it('maps a longer conversation to the keys of the shorter one it continues, then more', () => {
    const mapper = new PromptMapper();
    const first = mapper.blocksOf({ route: 'chat', messages: [system, { role: 'user', content: 'hi' }] }, sim)!;
    const longer = mapper.blocksOf(
      {
        route: 'chat',
        messages: [system, { role: 'user', content: 'hi' }, { role: 'assistant', content: 'hello '.repeat(40) }],
      },
      sim,
    )!;
    expect(first.keys.length).toBe(Math.floor(first.promptTokens / 16));
    expect(longer.keys.slice(0, first.keys.length)).toEqual(first.keys);
    expect(longer.keys.length).toBeGreaterThan(first.keys.length);
  });

  it("names a call's blocks as the simulated engine does, from the wire's template, tokens and hashes", () => {
    const mapper = new PromptMapper({ minPromptTokens: 1 });
    const messages = [system, { role: 'user', content: [{ type: 'text', text: 'the fleet, now?' }] }];
    const prompt = ['word '.repeat(30), 'more words'];
    // The engine's side: runner/engines/sim renders and tokenizes with the same wire functions.
    const engineKeys = (text: string) => blockKeys(chainBlockHashes(simTokenIds(text), 16, seedHash('0')));
    // Twice each: the second answer comes from the token cache.
    for (let i = 0; i < 2; i += 1) {
      expect(mapper.blocksOf({ route: 'chat', messages }, sim)!.keys).toEqual(engineKeys(simChatPrompt(messages)));
      expect(mapper.blocksOf({ route: 'completions', prompt }, sim)!.keys).toEqual(
        engineKeys(simCompletionPrompt(prompt)!),
      );
    }
  });

  it('names blocks by the seed and block size the engine announced', () => {
    const mapper = new PromptMapper();
    const source = { route: 'completions', prompt: 'word '.repeat(100) } as const;
    const a = mapper.blocksOf(source, sim)!;
    const b = mapper.blocksOf(source, { ...sim, scheme: { ...sim.scheme, seed: '1' } })!;
    const c = mapper.blocksOf(source, { ...sim, scheme: { ...sim.scheme, blockSize: 32 } })!;
    expect(b.keys[0]).not.toBe(a.keys[0]);
    expect(c.keys).toHaveLength(Math.floor(a.keys.length / 2));
  });

  it('maps nothing for an unknown tokenizer, a short prompt or a body the engine would refuse', () => {
    const mapper = new PromptMapper({ minPromptTokens: 64 });
    expect(
      mapper.blocksOf({ route: 'completions', prompt: 'word '.repeat(100) }, { ...sim, tokenizer: 'acme/unknown' }),
    ).toBeUndefined();
    expect(mapper.blocksOf({ route: 'completions', prompt: 'just a few words' }, sim)).toBeUndefined();
    expect(mapper.blocksOf({ route: 'chat', messages: [] }, sim)).toBeUndefined();
    expect(mapper.blocksOf({ route: 'completions', prompt: { not: 'a prompt' } }, sim)).toBeUndefined();
  });
});
