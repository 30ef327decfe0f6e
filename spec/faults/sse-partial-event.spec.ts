/**
 * Fault: an engine that fails in the middle of an SSE event. The gateway used to append its error
 * event right after the partial `data: {"id":"x",` line, so the OpenAI SDK threw a JSON
 * SyntaxError instead of an APIError carrying the code. Now the gateway relays whole events only,
 * and a stream cut mid-event ends with the error event alone.
 */
import OpenAI, { APIError } from 'openai';
import { describe, expect, it } from 'vitest';
import { childFrontForSuite, startScriptedEngine } from '../support/scripted-engine.ts';

const chunk = (content: string) =>
  `data: ${JSON.stringify({ id: 'x', object: 'chat.completion.chunk', created: 1, model: 'cut-model', choices: [{ index: 0, delta: { content }, finish_reason: null }] })}\n\n`;

/** An OpenAI-compatible engine whose streams send one whole event, half of the next, and die. */
const cuttingEngine = () =>
  startScriptedEngine(['cut-model'], (req, res) => {
    req.resume();
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write(chunk('hi'));
    // Half an event, then the connection drops, as an engine that crashed would leave it.
    setTimeout(() => {
      res.write('data: {"id":"x","object":"chat.completion.chunk",');
      setTimeout(() => res.socket?.destroy(), 50);
    }, 50);
  });

describe('an engine failing mid-event in a stream', () => {
  const front = childFrontForSuite(cuttingEngine);

  it('gives the OpenAI SDK the whole events before the cut, then an APIError with the code', async () => {
    const client = new OpenAI({ baseURL: `${front.gateway.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const stream = await client.chat.completions.create({
      model: 'cut-model',
      messages: [{ role: 'user', content: 'hello' }],
      stream: true,
    });
    const contents: string[] = [];
    let failure: unknown;
    try {
      for await (const part of stream) contents.push(part.choices[0]?.delta.content ?? '');
    } catch (error) {
      failure = error;
    }
    expect(contents).toEqual(['hi']);
    expect(failure).toBeInstanceOf(APIError);
    expect((failure as APIError).code).toBe('GW_RUNNER_FAILED_AFTER_COMMIT');
    expect((failure as APIError).message).toContain('RUNNER_ENGINE_FAILED');
    expect(front.engine.calls()).toBe(1);
  });
});
