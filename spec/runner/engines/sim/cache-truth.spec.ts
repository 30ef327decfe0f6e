import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import { blockKey, chainBlockHashes, seedHash, simChatPrompt, simTokenIds } from '../../../../runner/protocol/index.ts';
import { postJson, readEvents, startEngine, words } from './helpers.ts';

/** The usage of a non-streamed completion of `prompt`. */
async function usageOf(url: string, prompt: string): Promise<Record<string, unknown>> {
  const res = await postJson(`${url}/v1/completions`, { prompt, max_tokens: 2 });
  expect(res.statusCode).toBe(200);
  return ((await res.body.json()) as { usage: Record<string, unknown> }).usage;
}

describe('the simulated engine and cache truth', () => {
  it('reports cached_tokens exactly: none the first time, the full blocks but the last token the second', async () => {
    const { url } = await startEngine({ enablePromptTokensDetails: true });
    const prompt = words(40);
    expect(await usageOf(url, prompt)).toMatchObject({
      prompt_tokens: 40,
      prompt_tokens_details: { cached_tokens: 0 },
    });
    // 39 tokens may come from the cache (the last is always computed): 2 blocks of 16.
    expect(await usageOf(url, prompt)).toMatchObject({
      prompt_tokens: 40,
      prompt_tokens_details: { cached_tokens: 32 },
    });
    // A prompt sharing the first block only hits that block.
    const fork = `${words(16)} ${words(24, 'x')}`;
    expect(await usageOf(url, fork)).toMatchObject({ prompt_tokens_details: { cached_tokens: 16 } });
  });

  it("counts in blocks of --block-size tokens, as vLLM's flag", async () => {
    const { url } = await startEngine({ enablePromptTokensDetails: true, blockSize: 4 });
    await usageOf(url, words(40));
    expect(await usageOf(url, words(40))).toMatchObject({ prompt_tokens_details: { cached_tokens: 36 } });
  });

  it('reports cached_tokens in the streamed usage chunk', async () => {
    const { url } = await startEngine({ enablePromptTokensDetails: true });
    const body = { prompt: words(40), max_tokens: 2, stream: true, stream_options: { include_usage: true } };
    for (const expected of [0, 32]) {
      const res = await postJson(`${url}/v1/completions`, body);
      const events = await readEvents(res.body);
      const usage = JSON.parse(events.at(-2)!.data).usage;
      expect(usage).toMatchObject({ prompt_tokens: 40, prompt_tokens_details: { cached_tokens: expected } });
    }
  });

  it('leaves prompt_tokens_details out without --enable-prompt-tokens-details', async () => {
    const { url } = await startEngine();
    await usageOf(url, words(40));
    expect(await usageOf(url, words(40))).not.toHaveProperty('prompt_tokens_details');
  });

  it("holds a chat prompt's blocks under the keys a gateway computes from the same tokenizer, template and seed", async () => {
    const { engine, url } = await startEngine({ hashSeed: '0', blockSize: 16 });
    const messages = [
      { role: 'system', content: words(30, 's') },
      { role: 'user', content: words(20, 'u') },
    ];
    const res = await postJson(`${url}/v1/chat/completions`, { messages, max_tokens: 1 });
    expect(res.statusCode).toBe(200);
    await res.body.dump();
    const tokens = simTokenIds(simChatPrompt(messages));
    const expected = chainBlockHashes(tokens, 16, seedHash('0')).map((hash) => blockKey(hash));
    expect(expected).toHaveLength(Math.floor(tokens.length / 16));
    expect(engine.cachedBlockKeys().sort()).toEqual([...expected].sort());
  });

  it('names blocks apart under another PYTHONHASHSEED, and draws a seed of its own when given none', async () => {
    const a = await startEngine({ hashSeed: '0' });
    const b = await startEngine({ hashSeed: '1' });
    const c = await startEngine();
    for (const { url } of [a, b, c]) await usageOf(url, words(40));
    expect(a.engine.cachedBlockKeys()).not.toEqual(b.engine.cachedBlockKeys());
    expect(c.engine.options.hashSeed).toMatch(/^[0-9a-f]{32}$/);
    expect(c.engine.cachedBlockKeys()).not.toEqual(a.engine.cachedBlockKeys());
  });

  it('forgets every block on POST /reset_prefix_cache', async () => {
    const { engine, url } = await startEngine({ enablePromptTokensDetails: true });
    await usageOf(url, words(40));
    expect(engine.cachedBlockKeys()).toHaveLength(2);
    const res = await request(`${url}/reset_prefix_cache`, { method: 'POST' });
    expect(res.statusCode).toBe(200);
    await res.body.dump();
    expect(engine.cachedBlockKeys()).toEqual([]);
    expect(await usageOf(url, words(40))).toMatchObject({ prompt_tokens_details: { cached_tokens: 0 } });
  });
});
