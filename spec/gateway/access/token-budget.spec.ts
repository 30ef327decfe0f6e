import { describe, expect, it } from 'vitest';
import { DEFAULT_MAX_TOKENS, tokenBudget, withUsageAsked } from '../../../gateway/access/token-budget.ts';

const buf = (value: unknown) => Buffer.from(typeof value === 'string' ? value : JSON.stringify(value));
const sent = (body: Buffer) => JSON.parse(body.toString()) as Record<string, unknown>;
const chat = { model: 'm', messages: [{ role: 'user', content: 'hi' }] };

describe('tokenBudget', () => {
  it.each([
    ['max_tokens × n', 'chat', { ...chat, max_tokens: 100, n: 3 }, 300],
    ['max_completion_tokens before max_tokens', 'chat', { ...chat, max_completion_tokens: 50, max_tokens: 100 }, 50],
    ['a completion', 'completions', { model: 'm', prompt: 'x', max_tokens: 7, n: 2 }, 14],
    ["a response's max_output_tokens, never n", 'responses', { model: 'm', input: 'x', max_output_tokens: 9, n: 4 }, 9],
    ['an embedding: no output', 'embeddings', { model: 'm', input: 'x', max_tokens: 9 }, 0],
    ['an /invoke body naming max_tokens', 'invoke', { max_tokens: 20, n: 2 }, 40],
    ['an /invoke body that is not JSON, at the cap', 'invoke', 'raw bytes', 1000],
  ] as const)('reserves %s', (_name, route, body, output) => {
    expect(tokenBudget(route, buf(body), 1000, 1000).outputTokens).toBe(output);
  });

  it("gives a call that names no max_tokens the key's cap, at most its tokensPerMinute, leaving the rest of the body as it came", () => {
    const body = '{"model":"m","seed":12345678901234567890,"messages":[{"role":"user","content":"hi"}] }';
    const budget = tokenBudget('chat', Buffer.from(body), 100_000, 64);
    expect(budget.outputTokens).toBe(64);
    expect(budget.body.toString()).toBe(
      '{"model":"m","seed":12345678901234567890,"messages":[{"role":"user","content":"hi"}] ,"max_tokens":64}',
    );
    expect(tokenBudget('chat', buf(chat), 300).outputTokens).toBe(300);
    expect(tokenBudget('chat', buf(chat), 100_000).outputTokens).toBe(DEFAULT_MAX_TOKENS);
    expect(sent(tokenBudget('responses', buf({ model: 'm', input: 'x' }), 500).body)).toMatchObject({
      max_output_tokens: 500,
    });
  });

  it('leaves a bound that is not a count to the engine, adding nothing beside it', () => {
    const body = buf({ ...chat, max_tokens: 'many' });
    expect(tokenBudget('chat', body, 1000, 50)).toEqual({ outputTokens: 50, body, stripUsage: false });
  });

  it('asks the engine for usage on a stream that did not, and says to strip it', () => {
    const budget = tokenBudget('chat', buf({ ...chat, stream: true, max_tokens: 5 }), 1000);
    expect(budget.stripUsage).toBe(true);
    expect(sent(budget.body)).toEqual({
      ...chat,
      stream: true,
      max_tokens: 5,
      stream_options: { include_usage: true },
    });
    const other = tokenBudget(
      'completions',
      buf({
        model: 'm',
        prompt: 'x',
        stream: true,
        max_tokens: 5,
        stream_options: { include_usage: false, continuous_usage_stats: true },
      }),
      1000,
    );
    expect(other.stripUsage).toBe(true);
    expect(sent(other.body).stream_options).toEqual({ include_usage: true, continuous_usage_stats: true });
  });

  it('leaves a stream that asked for usage, a call that does not stream, and a response stream as they came', () => {
    for (const [route, body] of [
      ['chat', buf({ ...chat, stream: true, max_tokens: 5, stream_options: { include_usage: true } })],
      ['chat', buf({ ...chat, max_tokens: 5 })],
      ['responses', buf({ model: 'm', input: 'x', stream: true, max_output_tokens: 5 })],
    ] as const) {
      expect(tokenBudget(route, body, 1000)).toEqual({ outputTokens: 5, body, stripUsage: false });
    }
  });
});

describe('withUsageAsked', () => {
  it('appends the usage request to a body with no stream_options, leaving its bytes as they were', () => {
    const body = Buffer.from('{"model":"m","seed":12345678901234567890,"stream":true}');
    expect(withUsageAsked(body, 'no-options').toString()).toBe(
      '{"model":"m","seed":12345678901234567890,"stream":true,"stream_options":{"include_usage":true}}',
    );
  });

  it('sets include_usage in the client stream_options, keeping its other options', () => {
    const body = Buffer.from(
      '{"model":"m","stream":true,"stream_options":{"include_usage":false,"continuous_usage_stats":true}}',
    );
    expect(JSON.parse(withUsageAsked(body, 'options').toString()).stream_options).toEqual({
      include_usage: true,
      continuous_usage_stats: true,
    });
  });
});
