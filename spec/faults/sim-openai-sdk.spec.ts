/**
 * Fault: the official OpenAI SDK got wrong answers from the embedded default. It asks for
 * base64 embeddings unless told otherwise, and the simulated engine answered floats, which the
 * SDK decoded as base64 into a two-value vector of near-zeros without a word. Nor did the engine
 * know `n`, `dimensions` or vLLM's refusals. Here the SDK talks to a real fleet (simulated
 * engines, runners, a gateway) as any client would, and each answer is checked against what
 * vLLM gives: the same numbers whatever the encoding, n choices, and vLLM's error for what the
 * engine refuses. The engines' call counters prove that every call ran exactly once.
 */
import type OpenAI from 'openai';
import { APIError } from 'openai';
import { describe, expect, it } from 'vitest';
import { metrics, metricValue, postJson } from '../support/fleet.ts';
import { sdkFleetForSuite } from '../support/sdk-fleet.ts';

const OUTPUT_TOKENS = 6;
const NATIVE_DIMENSIONS = 384;

describe('the OpenAI SDK against simulated engines behind the gateway', () => {
  const suite = sdkFleetForSuite(2, OUTPUT_TOKENS);

  /** The engines' call counters, summed over the fleet. */
  async function counters(): Promise<{ received: number; completed: number; aborted: number }> {
    const pages = await Promise.all(suite.fleet.nodes.map((node) => metrics(node.engine)));
    const sum = (name: string) => pages.reduce((total, page) => total + metricValue(page, name), 0);
    return {
      received: sum('sluice_sim_requests_total'),
      completed: sum('sluice_sim_requests_completed_total'),
      aborted: sum('sluice_sim_requests_aborted_total'),
    };
  }

  /** Runs `work`, then checks that exactly `calls` calls reached the engines and each completed once. */
  async function exactlyOnce(calls: number, work: () => Promise<void>): Promise<void> {
    const before = await counters();
    await work();
    const after = await counters();
    expect({
      received: after.received - before.received,
      completed: after.completed - before.completed,
      aborted: after.aborted - before.aborted,
    }).toEqual({
      received: calls,
      completed: calls,
      aborted: 0,
    });
  }

  async function floatEmbeddings(body: Record<string, unknown>): Promise<number[][]> {
    const res = await postJson(
      `${suite.fleet.gateway.url}/v1/embeddings`,
      JSON.stringify({ model: 'sim-small', encoding_format: 'float', ...body }),
    );
    expect(res.status).toBe(200);
    return res.json.data.map((item: { embedding: number[] }) => item.embedding);
  }

  it('decodes the default (base64) embeddings into the numbers a float request gets', async () => {
    const input = ['alpha', 'beta gamma'];
    await exactlyOnce(2, async () => {
      const viaSdk = await suite.client.embeddings.create({ model: 'sim-small', input });
      const raw = await floatEmbeddings({ input });
      expect(viaSdk.data.map((item) => item.embedding.length)).toEqual([NATIVE_DIMENSIONS, NATIVE_DIMENSIONS]);
      expect(viaSdk.data.map((item) => item.embedding)).toEqual(raw);
      expect(viaSdk.usage).toEqual({ prompt_tokens: 3, total_tokens: 3 });
      // A unit vector: the decoded bytes are the vector, not noise read as floats.
      expect(Math.hypot(...viaSdk.data[0]!.embedding)).toBeCloseTo(1, 5);
    });
  });

  it('returns a shorter, renormalised vector for dimensions, in either encoding', async () => {
    await exactlyOnce(3, async () => {
      const viaSdk = await suite.client.embeddings.create({ model: 'sim-small', input: 'alpha', dimensions: 64 });
      const [short] = await floatEmbeddings({ input: 'alpha', dimensions: 64 });
      const [full] = await floatEmbeddings({ input: 'alpha' });
      expect(viaSdk.data[0]!.embedding).toHaveLength(64);
      expect(viaSdk.data[0]!.embedding).toEqual(short);
      expect(Math.hypot(...short!)).toBeCloseTo(1, 5);
      // The leading 64 values of the native vector, scaled back to unit length.
      const norm = Math.hypot(...full!.slice(0, 64));
      short!.forEach((value, i) => expect(value).toBeCloseTo(full![i]! / norm, 6));
    });
  });

  it('returns n choices, each its own text, when not streaming', async () => {
    await exactlyOnce(1, async () => {
      const answer = await suite.client.chat.completions.create({
        model: 'sim-small',
        messages: [{ role: 'user', content: 'three ways to say hello' }],
        n: 3,
      });
      expect(answer.choices.map((choice) => choice.index)).toEqual([0, 1, 2]);
      expect(new Set(answer.choices.map((choice) => choice.message.content)).size).toBe(3);
      expect(answer.usage?.completion_tokens).toBe(3 * OUTPUT_TOKENS);
    });
  });

  it('streams n choices, each chunk naming its choice, with the texts the whole answer has', async () => {
    const messages = [{ role: 'user' as const, content: 'three streams please' }];
    await exactlyOnce(2, async () => {
      const whole = await suite.client.chat.completions.create({ model: 'sim-small', messages, n: 3 });
      const stream = await suite.client.chat.completions.create({
        model: 'sim-small',
        messages,
        n: 3,
        stream: true,
        stream_options: { include_usage: true },
      });
      const texts = ['', '', ''];
      const finished: Array<string | null> = [null, null, null];
      let usage: OpenAI.CompletionUsage | null | undefined;
      for await (const chunk of stream) {
        for (const choice of chunk.choices) {
          texts[choice.index] += choice.delta.content ?? '';
          if (choice.finish_reason !== null) finished[choice.index] = choice.finish_reason;
        }
        if (chunk.usage) usage = chunk.usage;
      }
      expect(texts).toEqual(whole.choices.map((choice) => choice.message.content));
      expect(finished).toEqual(['stop', 'stop', 'stop']);
      expect(usage?.completion_tokens).toBe(3 * OUTPUT_TOKENS);
    });
  });

  it.each([
    [
      'chat n: 0',
      (sdk: OpenAI) =>
        sdk.chat.completions.create({ model: 'sim-small', messages: [{ role: 'user', content: 'x' }], n: 0 }),
      'n must be at least 1, got 0.',
      'n',
    ],
    [
      'completions best_of: 2',
      (sdk: OpenAI) => sdk.completions.create({ model: 'sim-small', prompt: 'x', best_of: 2 }),
      'vLLM V1 does not yet support best_of.',
      'best_of',
    ],
    [
      'embeddings dimensions: 0',
      (sdk: OpenAI) => sdk.embeddings.create({ model: 'sim-small', input: 'x', dimensions: 0 }),
      'Dimensions must be greater than 0',
      'dimensions',
    ],
  ] as const)('raises an APIError with vLLM status, type and message for %s', async (_name, call, message, param) => {
    await exactlyOnce(0, async () => {
      const error = await call(suite.client).then(
        () => undefined,
        (caught: unknown) => caught,
      );
      expect(error).toBeInstanceOf(APIError);
      expect(error).toMatchObject({
        status: 400,
        type: 'BadRequestError',
        code: 400,
        param,
        message: `400 ${message}`,
      });
    });
  });

  it('raises an APIError for an encoding_format the engine cannot give', async () => {
    await exactlyOnce(0, async () => {
      const error = await suite.client.embeddings
        .create({ model: 'sim-small', input: 'x', encoding_format: 'hex' as 'float' })
        .catch((caught: unknown) => caught);
      expect(error).toBeInstanceOf(APIError);
      expect(error).toMatchObject({ status: 400, type: 'Bad Request', code: 400, param: 'body.encoding_format' });
      expect((error as APIError).message).toContain("Input should be 'float' or 'base64'");
    });
  });
});
