import { describe, expect, it } from 'vitest';
import { postJson, readEvents, startEngine } from './helpers.ts';

const fast = { ttftMs: 1, itlMs: 0, outputTokens: 5 };
const messages = [{ role: 'user', content: 'give me options' }];

describe('sim engine n choices', () => {
  it('returns n chat choices, indexed 0..n-1, each its own text, choice 0 the text without n', async () => {
    const { url } = await startEngine(fast);
    const single = (await (await postJson(`${url}/v1/chat/completions`, { messages })).body.json()) as any;
    const res = await postJson(`${url}/v1/chat/completions`, { messages, n: 3 });
    expect(res.statusCode).toBe(200);
    const body = (await res.body.json()) as any;
    expect(
      body.choices.map((choice: any) => [choice.index, choice.finish_reason, choice.message.content.split(' ').length]),
    ).toEqual([
      [0, 'stop', 5],
      [1, 'stop', 5],
      [2, 'stop', 5],
    ]);
    expect(body.choices[0].message.content).toBe(single.choices[0].message.content);
    expect(new Set(body.choices.map((choice: any) => choice.message.content)).size).toBe(3);
    expect(body.usage).toEqual({
      prompt_tokens: single.usage.prompt_tokens,
      completion_tokens: 15,
      total_tokens: single.usage.prompt_tokens + 15,
    });
  });

  it('returns n text completions, capped alike by max_tokens', async () => {
    const { url } = await startEngine(fast);
    const body = (await (
      await postJson(`${url}/v1/completions`, { prompt: 'once', n: 2, max_tokens: 3 })
    ).body.json()) as any;
    expect(
      body.choices.map((choice: any) => [choice.index, choice.finish_reason, choice.text.split(' ').length]),
    ).toEqual([
      [0, 'length', 3],
      [1, 'length', 3],
    ]);
    expect(body.usage.completion_tokens).toBe(6);
  });

  it('streams each choice in its own chunks, naming its index, with the texts of the whole answer and usage over all', async () => {
    const { url } = await startEngine(fast);
    const whole = (await (await postJson(`${url}/v1/chat/completions`, { messages, n: 2 })).body.json()) as any;
    const res = await postJson(`${url}/v1/chat/completions`, {
      messages,
      n: 2,
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks = (await readEvents(res.body)).slice(0, -1).map((event) => JSON.parse(event.data));
    const choiceChunks = chunks.filter((chunk) => chunk.choices.length > 0);
    expect(choiceChunks.every((chunk) => chunk.choices.length === 1)).toBe(true);
    const texts = ['', ''];
    for (const chunk of choiceChunks) texts[chunk.choices[0].index] += chunk.choices[0].delta.content ?? '';
    expect(texts).toEqual(whole.choices.map((choice: any) => choice.message.content));
    // Each choice opens with the assistant role and closes with its own finish chunk.
    for (const index of [0, 1]) {
      const own = choiceChunks.filter((chunk) => chunk.choices[0].index === index);
      expect(own).toHaveLength(5 + 1);
      expect(own[0].choices[0].delta.role).toBe('assistant');
      expect(own.at(-1).choices[0]).toEqual({ index, delta: {}, finish_reason: 'stop', logprobs: null });
    }
    expect(chunks.at(-1)).toMatchObject({ choices: [], usage: { completion_tokens: 10 } });
  });

  it('ends a stream with usage when stream_options is given without include_usage, as vLLM defaults it', async () => {
    const { url } = await startEngine(fast);
    const events = async (streamOptions: unknown) => {
      const res = await postJson(`${url}/v1/completions`, { prompt: 'x', stream: true, stream_options: streamOptions });
      return (await readEvents(res.body)).slice(0, -1).map((event) => JSON.parse(event.data));
    };
    expect((await events({})).at(-1)).toMatchObject({ choices: [], usage: { completion_tokens: 5 } });
    expect((await events({ include_usage: false })).at(-1).usage).toBeUndefined();
    expect((await events(null)).at(-1).usage).toBeUndefined();
  });

  it('holds KV blocks for each choice while it decodes', async () => {
    const { url, engine } = await startEngine({ ttftMs: 1, itlMs: 200, outputTokens: 20 });
    // A 16-token prompt is one block; each choice's first token opens one more block of its own.
    const prompt = Array.from({ length: 16 }, (_, i) => `w${i}`).join(' ');
    const holder = new AbortController();
    const res = await postJson(`${url}/v1/completions`, { prompt, n: 3, stream: true }, holder.signal);
    const reader = res.body[Symbol.asyncIterator]();
    await reader.next();
    expect(engine.stats().kvUsage * engine.options.kvBlocks).toBe(1 + 3);
    holder.abort();
    await res.body.dump().catch(() => undefined);
  });
});
