/**
 * Fault: an engine that fails in the middle of an SSE event. The gateway used to append its error
 * event right after the partial `data: {"id":"x",` line, so the OpenAI SDK threw a JSON
 * SyntaxError instead of an APIError carrying the code. Now the gateway relays whole events only,
 * and a stream cut mid-event ends with the error event alone.
 */
import { createServer } from 'node:http';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import OpenAI, { APIError } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startService } from '../../gateway/cli/processes.ts';
import type { ChildService } from '../../gateway/cli/processes.ts';

const chunk = (content: string) =>
  `data: ${JSON.stringify({ id: 'x', object: 'chat.completion.chunk', created: 1, model: 'cut-model', choices: [{ index: 0, delta: { content }, finish_reason: null }] })}\n\n`;

/** An OpenAI-compatible engine whose streams send one whole event, half of the next, and die. */
async function cuttingEngine(): Promise<{ url: string; calls: () => number; close: () => Promise<void> }> {
  let calls = 0;
  const server: Server = createServer((req, res) => {
    if (req.method === 'GET' && req.url === '/v1/models') return res.end(JSON.stringify({ object: 'list', data: [{ id: 'cut-model' }] }));
    calls++;
    req.resume();
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write(chunk('hi'));
    // Half an event, then the connection drops, as an engine that crashed would leave it.
    setTimeout(() => {
      res.write('data: {"id":"x","object":"chat.completion.chunk",');
      setTimeout(() => res.socket?.destroy(), 50);
    }, 50);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    calls: () => calls,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

describe('an engine failing mid-event in a stream', () => {
  let engine: Awaited<ReturnType<typeof cuttingEngine>>;
  let runner: ChildService;
  let gateway: ChildService;

  beforeAll(async () => {
    engine = await cuttingEngine();
    runner = await startService(['runner', '--port', '0', '--engine', engine.url, '--engine-kind', 'openai', '--log-level', 'error']);
    gateway = await startService(['gateway', '--port', '0', '--runners', runner.url, '--log-level', 'error']);
  }, 60_000);
  afterAll(async () => {
    await Promise.all([gateway?.stop(), runner?.stop()]);
    await engine?.close();
  });

  it('gives the OpenAI SDK the whole events before the cut, then an APIError with the code', async () => {
    const client = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const stream = await client.chat.completions.create({ model: 'cut-model', messages: [{ role: 'user', content: 'hello' }], stream: true });
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
    expect(engine.calls()).toBe(1);
  });
});
