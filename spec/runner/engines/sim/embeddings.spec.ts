import { describe, expect, it } from 'vitest';
import { postJson, readMetrics, startEngine } from './helpers.ts';

const fast = { ttftMs: 1, itlMs: 0, engineId: 'sim-embed', clock: { now: () => 1_700_000_000_500 } };

interface EmbeddingBody {
  object: string;
  model: string;
  data: Array<{ object: string; index: number; embedding: number[] | string }>;
  usage: { prompt_tokens: number; total_tokens: number };
}

async function embed(url: string, body: Record<string, unknown>): Promise<EmbeddingBody> {
  const res = await postJson(`${url}/v1/embeddings`, body);
  expect(res.statusCode).toBe(200);
  return (await res.body.json()) as EmbeddingBody;
}

/** Reads a base64 embedding back as the client does: little-endian float32 values. */
function decode(base64: string): number[] {
  const bytes = Buffer.from(base64, 'base64');
  return Array.from({ length: bytes.length / 4 }, (_, i) => bytes.readFloatLE(i * 4));
}

describe('sim engine embeddings', () => {
  it('sends base64 that decodes to exactly the numbers the float encoding sends', async () => {
    const { url } = await startEngine(fast);
    const input = ['alpha', 'beta gamma'];
    const floats = await embed(url, { input });
    const explicit = await embed(url, { input, encoding_format: 'float' });
    const base64 = await embed(url, { input, encoding_format: 'base64' });
    expect(explicit.data).toEqual(floats.data);
    expect(base64.data.map((item) => typeof item.embedding)).toEqual(['string', 'string']);
    const decoded = base64.data.map((item) => decode(item.embedding as string));
    expect(decoded.map((vector) => vector.length)).toEqual([384, 384]);
    expect(decoded).toEqual(floats.data.map((item) => item.embedding));
    expect(base64.usage).toEqual({ prompt_tokens: 3, total_tokens: 3 });
  });

  it('returns `dimensions` values, the leading ones of the full vector renormalised, in both encodings', async () => {
    const { url } = await startEngine(fast);
    const full = (await embed(url, { input: 'alpha' })).data[0]!.embedding as number[];
    const short = (await embed(url, { input: 'alpha', dimensions: 48 })).data[0]!.embedding as number[];
    const shortBase64 = decode(
      (await embed(url, { input: 'alpha', dimensions: 48, encoding_format: 'base64' })).data[0]!.embedding as string,
    );
    expect(short).toHaveLength(48);
    expect(shortBase64).toEqual(short);
    expect(Math.hypot(...short)).toBeCloseTo(1, 6);
    const norm = Math.hypot(...full.slice(0, 48));
    short.forEach((value, i) => expect(value).toBeCloseTo(full[i]! / norm, 6));
    expect((await embed(url, { input: 'alpha', dimensions: 384 })).data[0]!.embedding).toEqual(full);
  });

  it('takes a list of token ids as one input and a list of such lists as several, one token per id', async () => {
    const { url } = await startEngine(fast);
    const one = await embed(url, { input: [101, 7592, 102] });
    expect(one.data).toHaveLength(1);
    expect(one.usage).toEqual({ prompt_tokens: 3, total_tokens: 3 });
    const many = await embed(url, {
      input: [
        [101, 7592, 102],
        [5, 6],
      ],
    });
    expect(many.data.map((item) => item.index)).toEqual([0, 1]);
    expect(many.usage).toEqual({ prompt_tokens: 5, total_tokens: 5 });
    expect(many.data[0]!.embedding).toEqual(one.data[0]!.embedding);
    expect(many.data[1]!.embedding).not.toEqual(one.data[0]!.embedding);
  });

  it('holds a slot while it embeds, so a second call waits for it with one slot', async () => {
    const { url, engine } = await startEngine({ ...fast, ttftMs: 300, maxNumSeqs: 1 });
    const first = embed(url, { input: 'first' });
    const second = embed(url, { input: 'second' });
    while ((await readMetrics(url)).get('vllm:num_requests_waiting') !== 1);
    expect(engine.stats()).toMatchObject({ running: 1, waiting: 1 });
    await Promise.all([first, second]);
    expect(engine.stats()).toMatchObject({ received: 2, completed: 2 });
  });
});
