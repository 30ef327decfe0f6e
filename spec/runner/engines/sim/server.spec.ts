import { Readable } from 'node:stream';
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import { ENGINE_ID_HEADER } from '../../../../runner/engines/sim/index.ts';
import { postJson, readMetrics, startEngine } from './helpers.ts';

const fast = { ttftMs: 5, itlMs: 2, engineId: 'sim-test01', clock: { now: () => 1_700_000_000_500 } };

describe('sim engine HTTP', () => {
  it('returns a chat.completion with usage when not streaming', async () => {
    const { url } = await startEngine({ ...fast, outputTokens: 6 });
    const res = await postJson(`${url}/v1/chat/completions`, {
      model: 'sim-small',
      messages: [{ role: 'user', content: 'Hello, engine!' }],
    });
    expect(res.statusCode).toBe(200);
    expect(res.headers[ENGINE_ID_HEADER]).toBe('sim-test01');
    expect(res.headers['content-type']).toBe('application/json');
    const body = (await res.body.json()) as Record<string, any>;
    expect(body).toMatchObject({ object: 'chat.completion', created: 1_700_000_000, model: 'sim-small' });
    expect(body.id).toMatch(/^chatcmpl-[0-9a-f]{24}$/);
    expect(body.choices).toHaveLength(1);
    expect(body.choices[0]).toMatchObject({ index: 0, message: { role: 'assistant' }, finish_reason: 'stop' });
    expect(body.choices[0].message.content.split(' ')).toHaveLength(6);
    // "user: Hello, engine!" is user, :, Hello, ",", engine, "!"
    expect(body.usage).toEqual({ prompt_tokens: 6, completion_tokens: 6, total_tokens: 12 });
  });

  it('returns a text_completion on /v1/completions and uses the first model when none is named', async () => {
    const { url } = await startEngine({ ...fast, models: ['first', 'second'], outputTokens: 4 });
    const res = await postJson(`${url}/v1/completions`, { prompt: 'Once upon a time' });
    const body = (await res.body.json()) as Record<string, any>;
    expect(res.statusCode).toBe(200);
    expect(body).toMatchObject({
      object: 'text_completion',
      model: 'first',
      usage: { prompt_tokens: 4, completion_tokens: 4, total_tokens: 8 },
    });
    expect(body.id).toMatch(/^cmpl-/);
    expect(body.choices[0]).toMatchObject({ index: 0, finish_reason: 'stop' });
    expect(typeof body.choices[0].text).toBe('string');
  });

  it('caps the output at max_tokens and reports finish_reason length', async () => {
    const { url } = await startEngine({ ...fast, outputTokens: 10 });
    const res = await postJson(`${url}/v1/completions`, { prompt: 'x', max_tokens: 3 });
    const body = (await res.body.json()) as Record<string, any>;
    expect(body.usage.completion_tokens).toBe(3);
    expect(body.choices[0].text.split(' ')).toHaveLength(3);
    expect(body.choices[0].finish_reason).toBe('length');
    const longer = await postJson(`${url}/v1/chat/completions`, {
      messages: [{ role: 'user', content: 'x' }],
      max_completion_tokens: 50,
    });
    expect(((await longer.body.json()) as Record<string, any>).usage.completion_tokens).toBe(10);
  });

  it('generates exactly max_tokens when ignore_eos is set, as vLLM does', async () => {
    const { url } = await startEngine({ ...fast, itlMs: 0, outputTokens: 4 });
    const res = await postJson(`${url}/v1/completions`, { prompt: 'x', max_tokens: 30, ignore_eos: true });
    expect(((await res.body.json()) as Record<string, any>).usage.completion_tokens).toBe(30);
  });

  it('returns the same text for the same prompt', async () => {
    const { url } = await startEngine(fast);
    const ask = async (content: string): Promise<string> => {
      const res = await postJson(`${url}/v1/chat/completions`, { messages: [{ role: 'user', content }] });
      return ((await res.body.json()) as Record<string, any>).choices[0].message.content;
    };
    const first = await ask('what is a sluice?');
    expect(await ask('what is a sluice?')).toBe(first);
    expect(await ask('what is a gate?')).not.toBe(first);
  });

  it('returns deterministic embeddings for a string or a list', async () => {
    const { url } = await startEngine(fast);
    const res = await postJson(`${url}/v1/embeddings`, { model: 'sim-small', input: ['alpha', 'beta gamma'] });
    const body = (await res.body.json()) as Record<string, any>;
    expect(res.statusCode).toBe(200);
    expect(body).toMatchObject({
      object: 'list',
      created: 1_700_000_000,
      model: 'sim-small',
      usage: { prompt_tokens: 3, total_tokens: 3 },
    });
    expect(body.id).toMatch(/^embd-[0-9a-f]{24}$/);
    expect(body.data.map((item: any) => [item.object, item.index, item.embedding.length])).toEqual([
      ['embedding', 0, 384],
      ['embedding', 1, 384],
    ]);
    const single = (await (await postJson(`${url}/v1/embeddings`, { input: 'alpha' })).body.json()) as Record<
      string,
      any
    >;
    expect(single.data[0].embedding).toEqual(body.data[0].embedding);
  });

  it('echoes what /invoke/:fn received', async () => {
    const { url, engine } = await startEngine(fast);
    const res = await request(`${url}/invoke/resize%20image`, {
      method: 'POST',
      headers: { 'content-type': 'application/octet-stream' },
      body: Buffer.alloc(1234),
    });
    expect(res.statusCode).toBe(200);
    expect(res.headers[ENGINE_ID_HEADER]).toBe('sim-test01');
    expect(await res.body.json()).toEqual({ fn: 'resize image', bytes: 1234, contentType: 'application/octet-stream' });
    expect(engine.stats()).toMatchObject({ received: 1, completed: 1 });
  });

  it('lists the served models', async () => {
    const { url } = await startEngine({ ...fast, models: ['m1', 'm2'] });
    const res = await request(`${url}/v1/models`);
    expect(await res.body.json()).toEqual({
      object: 'list',
      data: [
        { id: 'm1', object: 'model', created: 1_700_000_000, owned_by: 'sluice-sim' },
        { id: 'm2', object: 'model', created: 1_700_000_000, owned_by: 'sluice-sim' },
      ],
    });
  });

  it('answers /health with 200 and an empty body', async () => {
    const { url } = await startEngine(fast);
    const res = await request(`${url}/health`);
    expect(res.statusCode).toBe(200);
    expect(res.headers[ENGINE_ID_HEADER]).toBe('sim-test01');
    expect(await res.body.text()).toBe('');
  });

  it('publishes vLLM gauges and the call counters on /metrics', async () => {
    const { url } = await startEngine({ ...fast, models: ['m"1'] });
    await (await postJson(`${url}/v1/completions`, { prompt: 'x' })).body.dump();
    const res = await request(`${url}/metrics`);
    const text = await res.body.text();
    expect(res.headers['content-type']).toMatch(/^text\/plain; version=0\.0\.4/);
    expect(text).toContain('# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name="m\\"1"} 0\n');
    expect(text).toContain('# HELP vllm:num_requests_waiting ');
    expect(text).toContain('vllm:num_requests_waiting{model_name="m\\"1"} 0\n');
    expect(text).toContain('# TYPE sluice_sim_requests_total counter\n');
    expect(Object.fromEntries(await readMetrics(url))).toMatchObject({
      sluice_sim_requests_total: 1,
      sluice_sim_requests_completed_total: 1,
      sluice_sim_requests_aborted_total: 0,
      sluice_sim_requests_rejected_total: 0,
    });
  });
});

describe('sim engine HTTP errors', () => {
  // vLLM's ErrorResponse: the HTTP status again as `code`, a number, and `param` null where no field is at fault.
  const errorShape = (status: number, type: string, param: string | null = null) => ({
    error: { message: expect.any(String), type, param, code: status },
  });

  it('returns 400 Bad Request, as vLLM validation does, for a body that is not JSON', async () => {
    const { url, engine } = await startEngine(fast);
    const res = await request(`${url}/v1/chat/completions`, { method: 'POST', body: '{"model":' });
    expect(res.statusCode).toBe(400);
    expect(res.headers[ENGINE_ID_HEADER]).toBe('sim-test01');
    const body = (await res.body.json()) as { error: { message: string } };
    expect(body).toEqual(errorShape(400, 'Bad Request', 'body'));
    expect(body.error.message).toMatch(
      /^1 validation error:\n {2}\{'type': 'json_invalid', 'loc': \('body',\), 'msg': 'JSON decode error', 'input': '.+'\}$/,
    );
    expect(engine.stats().received).toBe(0);
  });

  it.each([
    [
      '/v1/chat/completions',
      { messages: 'hi' },
      'body.messages',
      "'type': 'list_type', 'loc': ('body', 'messages'), 'msg': 'Input should be a valid list', 'input': 'hi'",
    ],
    [
      '/v1/chat/completions',
      { messages: [{ role: 'user', content: 'x' }], stream: 'yes' },
      'body.stream',
      "'type': 'bool_type', 'loc': ('body', 'stream'), 'msg': 'Input should be a valid boolean', 'input': 'yes'",
    ],
    [
      '/v1/chat/completions',
      { messages: [{ role: 'user', content: 'x' }], n: 2.5 },
      'body.n',
      "'type': 'int_from_float', 'loc': ('body', 'n'), 'msg': 'Input should be a valid integer, got a number with a fractional part', 'input': 2.5",
    ],
    [
      '/v1/chat/completions',
      { messages: [{ role: 'user', content: 'x' }], stream_options: { include_usage: true } },
      'stream_options',
      "'type': 'value_error', 'loc': ('body',), 'msg': 'Value error, Stream options can only be defined when `stream=True`.', 'input': <dict of 2 items>",
    ],
    ['/v1/completions', { prompt: { text: 'x' } }, 'body.prompt', "'type': 'union_type', 'loc': ('body', 'prompt')"],
    [
      '/v1/completions',
      { model: 7, prompt: 'x' },
      'body.model',
      "'type': 'string_type', 'loc': ('body', 'model'), 'msg': 'Input should be a valid string', 'input': 7",
    ],
    ['/v1/embeddings', { input: 42 }, 'body.input', "'type': 'union_type', 'loc': ('body', 'input')"],
    [
      '/v1/embeddings',
      { input: 'x', encoding_format: 'bytes' },
      'body.encoding_format',
      `'type': 'literal_error', 'loc': ('body', 'encoding_format'), 'msg': "Input should be 'float' or 'base64'", 'input': 'bytes'`,
    ],
    [
      '/v1/embeddings',
      { input: 'x', dimensions: '64' },
      'body.dimensions',
      "'type': 'int_type', 'loc': ('body', 'dimensions'), 'msg': 'Input should be a valid integer', 'input': '64'",
    ],
  ])(
    "returns 400 Bad Request with pydantic's detail for a %s body %j that breaks the schema",
    async (path, body, param, detail) => {
      const { url, engine } = await startEngine(fast);
      const res = await postJson(`${url}${path}`, body);
      expect(res.statusCode).toBe(400);
      const answer = (await res.body.json()) as { error: { message: string } };
      expect(answer).toEqual(errorShape(400, 'Bad Request', param));
      expect(answer.error.message).toContain(`1 validation error:\n  {${detail}`);
      expect(engine.stats().received).toBe(0);
    },
  );

  it.each([
    ['/v1/chat/completions', { messages: [] }, 'messages', 'messages must be a non-empty array'],
    [
      '/v1/chat/completions',
      { messages: [{ role: 'user', content: 'x' }], max_tokens: 0 },
      'max_tokens',
      'max_tokens must be at least 1, got 0.',
    ],
    ['/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], n: 0 }, 'n', 'n must be at least 1, got 0.'],
    [
      '/v1/chat/completions',
      { messages: [{ role: 'user', content: 'x' }], n: 17 },
      'n',
      "n must be at most 16 (the engine's max-num-seqs), got 17.",
    ],
    ['/v1/completions', { prompt: 'x', best_of: 3 }, 'best_of', 'vLLM V1 does not yet support best_of.'],
    [
      '/v1/completions',
      { prompt: 'x', n: 2, best_of: 1 },
      'best_of',
      'best_of must be greater than or equal to n, got n=2 and best_of=1.',
    ],
    ['/v1/embeddings', { input: 'x', dimensions: 0 }, 'dimensions', 'Dimensions must be greater than 0'],
    [
      '/v1/embeddings',
      { input: 'x', dimensions: 385 },
      'dimensions',
      'Model "sim-small" has 384 dimensions; dimensions must be at most 384, got 385',
    ],
    ['/v1/embeddings', { input: [] }, 'input', 'input must hold at least one item'],
    ['/v1/embeddings', { input: [[1, 2], [-3]] }, 'input', 'Token id -3 is out of vocabulary'],
  ])(
    'returns 400 BadRequestError for a %s body %j that asks what cannot be done',
    async (path, body, param, message) => {
      const { url, engine } = await startEngine(fast);
      const res = await postJson(`${url}${path}`, body);
      expect(res.statusCode).toBe(400);
      expect(await res.body.json()).toEqual({ error: { message, type: 'BadRequestError', param, code: 400 } });
      expect(engine.stats().received).toBe(0);
    },
  );

  it('returns 404 NotFoundError for a model it does not serve', async () => {
    const { url } = await startEngine(fast);
    const res = await postJson(`${url}/v1/chat/completions`, {
      model: 'gpt-9',
      messages: [{ role: 'user', content: 'x' }],
    });
    expect(res.statusCode).toBe(404);
    expect(await res.body.json()).toEqual({
      error: { message: 'The model `gpt-9` does not exist.', type: 'NotFoundError', param: 'model', code: 404 },
    });
  });

  it('returns 404 for an unknown route and 405 with Allow for a wrong method', async () => {
    const { url } = await startEngine(fast);
    const missing = await request(`${url}/v2/nothing`);
    expect(missing.statusCode).toBe(404);
    expect(missing.headers[ENGINE_ID_HEADER]).toBe('sim-test01');
    expect(await missing.body.json()).toEqual(errorShape(404, 'NotFoundError'));
    const wrong = await request(`${url}/v1/chat/completions`);
    expect(wrong.statusCode).toBe(405);
    expect(wrong.headers.allow).toBe('POST');
    expect(await wrong.body.json()).toEqual(errorShape(405, 'Method Not Allowed'));
    const wrongRead = await request(`${url}/metrics`, { method: 'POST', body: '' });
    expect(wrongRead.statusCode).toBe(405);
    expect(wrongRead.headers.allow).toBe('GET, HEAD');
    await wrongRead.body.dump();
  });

  it('returns 413 for a declared length over maxBodyBytes', async () => {
    const { url, engine } = await startEngine({ ...fast, maxBodyBytes: 1024 });
    const res = await request(`${url}/invoke/f`, { method: 'POST', body: Buffer.alloc(2048) });
    expect(res.statusCode).toBe(413);
    expect(await res.body.json()).toEqual(errorShape(413, 'Request Entity Too Large'));
    expect(engine.stats().received).toBe(0);
  });

  it('returns 413 for a chunked body that grows past maxBodyBytes', async () => {
    const { url } = await startEngine({ ...fast, maxBodyBytes: 1024 });
    async function* chunks(): AsyncGenerator<Buffer> {
      for (let i = 0; i < 4; i += 1) yield Buffer.alloc(512, 'a');
    }
    const res = await request(`${url}/v1/completions`, { method: 'POST', body: Readable.from(chunks()) });
    expect(res.statusCode).toBe(413);
    expect(await res.body.json()).toEqual(errorShape(413, 'Request Entity Too Large'));
  });
});
