/**
 * Fault: the Responses API (`POST /v1/responses`, the default of the Vercel AI SDK's OpenAI
 * provider and of LangChain's `useResponsesApi`) got 404 from the embedded default, since the
 * simulated engine did not serve it. Here the official SDK's `responses.create` talks to a real
 * fleet (a simulated engine, its runner, a gateway), plain and streamed, and gets what OpenAI's
 * shapes promise: the output text, usage, and the typed events of a stream ending in
 * `response.completed` with its usage.
 */
import type OpenAI from 'openai';
import { APIError } from 'openai';
import { describe, expect, it } from 'vitest';
import { metrics, metricValue } from '../support/fleet.ts';
import { sdkFleetForSuite } from '../support/sdk-fleet.ts';

const OUTPUT_TOKENS = 5;

describe('the OpenAI SDK responses.create against a simulated engine behind the gateway', () => {
  const suite = sdkFleetForSuite(1, OUTPUT_TOKENS);

  it('returns a completed response with its output text and usage for a string input', async () => {
    const response = await suite.client.responses.create({
      model: 'sim-small',
      input: 'say hello to the river',
      instructions: 'answer briefly',
    });
    expect(response).toMatchObject({
      object: 'response',
      status: 'completed',
      model: 'sim-small',
      instructions: 'answer briefly',
      incomplete_details: null,
    });
    expect(response.id).toMatch(/^resp_[0-9a-f]{24}$/);
    expect(response.output).toHaveLength(1);
    expect(response.output[0]).toMatchObject({ type: 'message', role: 'assistant', status: 'completed' });
    expect(response.output_text.length).toBeGreaterThan(0);
    expect(response.usage).toMatchObject({ output_tokens: OUTPUT_TOKENS });
    // The system line and the user line, as the chat call it stands for renders them.
    expect(response.usage!.input_tokens).toBeGreaterThan(5);
    expect(response.usage!.total_tokens).toBe(response.usage!.input_tokens + OUTPUT_TOKENS);
  });

  it('returns the same words a chat call gets for the same messages', async () => {
    const messages = [{ role: 'user' as const, content: 'one question about stones' }];
    const chat = await suite.client.chat.completions.create({ model: 'sim-small', messages });
    const response = await suite.client.responses.create({ model: 'sim-small', input: messages });
    expect(response.output_text).toBe(chat.choices[0]!.message.content);
    expect(response.usage?.input_tokens).toBe(chat.usage?.prompt_tokens);
  });

  it('returns an incomplete response when max_output_tokens cuts the answer', async () => {
    const response = await suite.client.responses.create({
      model: 'sim-small',
      input: 'long story',
      max_output_tokens: 2,
    });
    expect(response.status).toBe('incomplete');
    expect(response.incomplete_details).toEqual({ reason: 'max_output_tokens' });
    expect(response.max_output_tokens).toBe(2);
    expect(response.usage?.output_tokens).toBe(2);
  });

  it('streams typed events, one text delta per token, ending in response.completed with usage', async () => {
    const input = [{ role: 'user' as const, content: 'stream a short answer' }];
    const whole = await suite.client.responses.create({ model: 'sim-small', input });
    const stream = await suite.client.responses.create({ model: 'sim-small', input, stream: true });
    const types: string[] = [];
    let text = '';
    let completed: OpenAI.Responses.Response | undefined;
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === 'response.output_text.delta') text += event.delta;
      if (event.type === 'response.completed') completed = event.response;
    }
    expect(types[0]).toBe('response.created');
    expect(types.at(-1)).toBe('response.completed');
    expect(types.filter((type) => type === 'response.output_text.delta')).toHaveLength(OUTPUT_TOKENS);
    expect(types).toContain('response.output_text.done');
    expect(text).toBe(whole.output_text);
    expect(completed?.status).toBe('completed');
    expect(completed?.usage).toMatchObject({ output_tokens: OUTPUT_TOKENS, input_tokens: whole.usage?.input_tokens });
  });

  it('raises an APIError naming the field for a body without input', async () => {
    const error = await suite.client.responses
      .create({ model: 'sim-small' } as OpenAI.Responses.ResponseCreateParamsNonStreaming)
      .catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(APIError);
    expect(error).toMatchObject({ status: 400 });
    expect((error as APIError).message).toContain('input');
  });

  it('returns the call in the gateway token usage, read from the responses usage block', async () => {
    const on = { gen_ai_request_model: 'sim-small', gen_ai_token_type: 'output' };
    const before = metricValue(await metrics(suite.fleet.gateway), 'gen_ai_client_token_usage_sum', on);
    await suite.client.responses.create({ model: 'sim-small', input: 'count me' });
    const after = metricValue(await metrics(suite.fleet.gateway), 'gen_ai_client_token_usage_sum', on);
    expect(after - before).toBe(OUTPUT_TOKENS);
  });
});
