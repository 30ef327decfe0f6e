/**
 * runner/tracing.ts: the GenAI attributes read from an engine's answer. The span tree itself is
 * checked through a gateway and real runners in spec/gateway/observe/tracing.spec.ts.
 */
import { describe, expect, it } from 'vitest';
import { genAiAttributes, providerOf } from '../../runner/tracing.ts';

describe('genAiAttributes', () => {
  it('returns the model, tokens in and out and finish reasons of a JSON answer', () => {
    const answer = {
      model: 'sim-small',
      choices: [
        { index: 0, finish_reason: 'stop' },
        { index: 1, finish_reason: 'length' },
      ],
      usage: { prompt_tokens: 12, completion_tokens: 5, total_tokens: 17 },
    };
    expect(genAiAttributes(JSON.stringify(answer), 'json')).toEqual({
      'gen_ai.response.model': 'sim-small',
      'gen_ai.usage.input_tokens': 12,
      'gen_ai.usage.output_tokens': 5,
      'gen_ai.response.finish_reasons': ['stop', 'length'],
    });
  });

  it("returns what a stream's tail gives: the finish reason and the usage chunk, skipping a cut first event", () => {
    const tail =
      'ntent":"partial"}}]}\n\n' +
      'data: {"model":"sim-small","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n' +
      'data: {"model":"sim-small","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":9}}\n\n' +
      'data: [DONE]\n\n';
    expect(genAiAttributes(tail, 'sse')).toEqual({
      'gen_ai.response.model': 'sim-small',
      'gen_ai.usage.input_tokens': 3,
      'gen_ai.usage.output_tokens': 9,
      'gen_ai.response.finish_reasons': ['stop'],
    });
  });

  it('returns nothing for an answer that is not JSON, or has no usage', () => {
    expect(genAiAttributes('not json', 'json')).toEqual({});
    expect(genAiAttributes('{"usage":null}', 'json')).toEqual({});
  });

  it('returns the tokens of a Responses answer and of the response.completed event of its stream', () => {
    const response = { object: 'response', model: 'sim-small', usage: { input_tokens: 4, output_tokens: 6 } };
    const expected = {
      'gen_ai.response.model': 'sim-small',
      'gen_ai.usage.input_tokens': 4,
      'gen_ai.usage.output_tokens': 6,
    };
    expect(genAiAttributes(JSON.stringify(response), 'json')).toEqual(expected);
    const tail =
      'event: response.output_text.done\ndata: {"type":"response.output_text.done","text":"x"}\n\n' +
      `event: response.completed\ndata: ${JSON.stringify({ type: 'response.completed', response })}\n\n`;
    expect(genAiAttributes(tail, 'sse')).toEqual(expected);
  });
});

describe('providerOf', () => {
  it.each([
    ['vllm', 'vllm'],
    ['sglang', 'sglang'],
    ['llamacpp', 'llama.cpp'],
    ['openai', 'openai'],
    ['sim', 'sluice.sim'],
  ])('returns the gen_ai.provider.name of engine kind %s', (kind, provider) => {
    expect(providerOf(kind)).toBe(provider);
  });
});
