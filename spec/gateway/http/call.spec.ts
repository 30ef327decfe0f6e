import { describe, expect, it } from 'vitest';
import { Hono } from 'hono';
import {
  OPENAI_CALL_ROUTES,
  affinityKey,
  callRouteOf,
  parseInferenceBody,
  renderPrompt,
  renderResponsesPrompt,
  routedPath,
  uuidv7,
} from '../../../gateway/http/call.ts';
import { InvalidBodyError, InvalidJsonError, MissingModelError } from '../../../gateway/errors.ts';
import { SluiceError } from '../../../placer/kernel/index.ts';
import { expectThrows } from '../../support/throws.ts';

const json = (value: unknown): Buffer => Buffer.from(typeof value === 'string' ? value : JSON.stringify(value));

/** The SluiceError `fn` throws; fails the test when it returns. */
const thrown = (fn: () => unknown): SluiceError => expectThrows(fn, SluiceError, {});

describe('parseInferenceBody', () => {
  it('returns the model when the body names one', () => {
    expect(parseInferenceBody(json({ model: 'llama-3-8b', messages: [] }))).toEqual({
      model: 'llama-3-8b',
      promptParts: { messages: [] },
    });
  });

  it('returns the raw prompt fields of a chat or completion, for the engine blocks, and none for others', () => {
    const messages = [{ role: 'user', content: [{ type: 'text', text: 'hi' }] }];
    expect(parseInferenceBody(json({ model: 'm', messages }), 'chat').promptParts).toEqual({ messages });
    expect(parseInferenceBody(json({ model: 'm', prompt: [1, 2, 3] }), 'completions').promptParts).toEqual({
      prompt: [1, 2, 3],
    });
    expect(parseInferenceBody(json({ model: 'm', input: 'hi' }), 'responses').promptParts).toBeUndefined();
    expect(parseInferenceBody(json({ model: 'm', input: 'x' }), 'embeddings').promptParts).toBeUndefined();
  });

  it('says how a streamed chat or completion leaves its usage unasked', () => {
    const unasked = (fields: object, route: 'chat' | 'completions' | 'responses' = 'chat') =>
      parseInferenceBody(json({ model: 'm', messages: [], ...fields }), route).usageUnasked;
    expect(unasked({ stream: true })).toBe('no-options');
    expect(unasked({ stream: true, stream_options: null }, 'completions')).toBe('no-options');
    expect(unasked({ stream: true, stream_options: { include_usage: false } })).toBe('options');
    expect(unasked({ stream: true, stream_options: {} })).toBe('options');
    // Asked, not streamed, an engine's to refuse, or a route whose stream always ends with usage.
    expect(unasked({ stream: true, stream_options: { include_usage: true } })).toBeUndefined();
    expect(unasked({ stream: false })).toBeUndefined();
    expect(unasked({ stream: true, stream_options: 'yes' })).toBeUndefined();
    expect(unasked({ stream: true }, 'responses')).toBeUndefined();
  });

  it('returns the user as well when the body has a non-empty string user', () => {
    expect(parseInferenceBody(json({ model: 'm', user: 'alice' }))).toEqual({ model: 'm', user: 'alice' });
  });

  it.each([[''], [42], [null], [{ id: 'alice' }], [['alice']], [true]])('returns no user when user is %j', (user) => {
    const parsed = parseInferenceBody(json({ model: 'm', user }));
    expect(parsed).toEqual({ model: 'm' });
    expect(Object.hasOwn(parsed, 'user')).toBe(false);
  });

  it('returns the model when the body is UTF-8 with non-ASCII text', () => {
    expect(parseInferenceBody(json({ model: 'modèle-日本', user: 'ünïcode' }))).toEqual({
      model: 'modèle-日本',
      user: 'ünïcode',
    });
  });

  it.each(['{"model":', 'model=m', '', '   ', "{'model':'m'}", '{"model":"m"}}'])(
    'throws InvalidJsonError (400 GW_INVALID_JSON) when the body is %j',
    (text) => {
      const error = thrown(() => parseInferenceBody(json(text)));
      expect(error).toBeInstanceOf(InvalidJsonError);
      expect([error.status, error.code, error.type]).toEqual([400, 'GW_INVALID_JSON', 'invalid_request_error']);
      expect(error.message).toMatch(/^request body is not valid JSON: /);
      expect(error.cause).toBeInstanceOf(SyntaxError);
    },
  );

  it.each([[[{ model: 'm' }]], [[]], ['"m"'], [42], [null], [true]])(
    'throws InvalidBodyError (400 GW_INVALID_BODY) when the body is the JSON %j',
    (value) => {
      const error = thrown(() => parseInferenceBody(json(typeof value === 'string' ? value : JSON.stringify(value))));
      expect(error).toBeInstanceOf(InvalidBodyError);
      expect([error.status, error.code]).toEqual([400, 'GW_INVALID_BODY']);
      expect(error.message).toBe('request body must be a JSON object');
    },
  );

  it.each([[{}], [{ model: null }], [{ model: '' }], [{ messages: [], user: 'alice' }]])(
    'throws MissingModelError (400 GW_MISSING_MODEL) when the body is %j',
    (body) => {
      const error = thrown(() => parseInferenceBody(json(body)));
      expect(error).toBeInstanceOf(MissingModelError);
      expect([error.status, error.code, error.type]).toEqual([400, 'GW_MISSING_MODEL', 'invalid_request_error']);
      expect(error.message).toContain('"model"');
    },
  );

  it.each<[unknown, string]>([
    [42, 'number'],
    [true, 'boolean'],
    [['m'], 'object'],
    [{ name: 'm' }, 'object'],
  ])('throws InvalidBodyError naming the type when model is %j', (model, type) => {
    const error = thrown(() => parseInferenceBody(json({ model })));
    expect(error).toBeInstanceOf(InvalidBodyError);
    expect(error.code).toBe('GW_INVALID_BODY');
    expect(error.message).toBe(`"model" must be a string, got ${type}`);
  });
});

describe('parseInferenceBody on /v1/responses', () => {
  it('returns the prompt from instructions and a string input when the route is responses', () => {
    expect(parseInferenceBody(json({ model: 'm', instructions: 'Be brief.', input: 'hello' }), 'responses')).toEqual({
      model: 'm',
      prompt: 'system: Be brief.\nuser: hello\n',
    });
  });

  it('returns no prompt from input when the route is embeddings, whose input is not a conversation', () => {
    expect(parseInferenceBody(json({ model: 'm', input: 'hello' }), 'embeddings')).toEqual({ model: 'm' });
  });
});

describe('renderResponsesPrompt', () => {
  it('returns the text a chat call with the same messages renders when given a list of messages', () => {
    const messages = [
      { role: 'developer', content: 'Answer in French.' },
      {
        role: 'user',
        content: [
          { type: 'input_text', text: 'Bonjour' },
          { type: 'input_image', image_url: 'x' },
        ],
      },
      { role: 'assistant', content: [{ type: 'output_text', text: 'Salut' }] },
    ];
    expect(renderResponsesPrompt(messages, 'Be brief.')).toBe(
      renderPrompt([{ role: 'system', content: 'Be brief.' }, ...messages], undefined),
    );
    expect(renderResponsesPrompt(messages, undefined)).toBe(
      'developer: Answer in French.\nuser: Bonjour\nassistant: Salut\n',
    );
  });

  it('returns only the items with a role when the input holds tool calls and outputs', () => {
    const input = [
      { role: 'user', content: 'weather?' },
      { type: 'function_call_output', call_id: 'c1', output: '{"t":20}' },
      null,
      'odd',
    ];
    expect(renderResponsesPrompt(input, undefined)).toBe('user: weather?\n');
  });

  it('returns undefined when there is neither input text nor instructions', () => {
    expect(renderResponsesPrompt(undefined, undefined)).toBeUndefined();
    expect(renderResponsesPrompt([], '')).toBeUndefined();
    expect(renderResponsesPrompt(42, 7)).toBeUndefined();
  });
});

describe('routedPath', () => {
  it.each<[Parameters<typeof routedPath>, string]>([
    [['chat', undefined, '/v1/chat/completions'], '/v1/chat/completions'],
    [['completions', undefined, '/v1/%63ompletions?x=1'], '/v1/completions?x=1'],
    [['embeddings', undefined, '/v1/embeddings?'], '/v1/embeddings?'],
    [['responses', undefined, '/v1/responses?api-version=2025-01-01'], '/v1/responses?api-version=2025-01-01'],
    [['invoke', 'org/model', '/invoke/org%2Fmodel'], '/invoke/org%2Fmodel'],
    [['invoke', 'héllo wörld', '/invoke/h%C3%A9llo%20w%C3%B6rld?q=%2e%2e'], '/invoke/h%C3%A9llo%20w%C3%B6rld?q=%2e%2e'],
  ])('returns the path the router matched, with the query as sent, when given %j', (args, path) => {
    expect(routedPath(...args)).toBe(path);
  });
});

describe('callRouteOf', () => {
  // The gateway's call routes as the server registers them, answering what the router matched.
  const router = new Hono();
  for (const [path, route] of Object.entries(OPENAI_CALL_ROUTES)) router.post(path, (c) => c.json({ route, fn: null }));
  router.post('/invoke/:fn', (c) => c.json({ route: 'invoke', fn: c.req.param('fn') }));
  const routed = async (target: string): Promise<unknown> => {
    const answer = await router.request(target, { method: 'POST' });
    return answer.status === 404 ? undefined : answer.json();
  };

  it.each([
    ['/v1/chat/completions', { route: 'chat', fn: undefined }],
    ['/v1/completions?stream=1', { route: 'completions', fn: undefined }],
    ['/v1/embeddings', { route: 'embeddings', fn: undefined }],
    ['/v1/responses?', { route: 'responses', fn: undefined }],
    ['/invoke/my-fn', { route: 'invoke', fn: 'my-fn' }],
    ['/invoke/a.b_c~d?x=%2F', { route: 'invoke', fn: 'a.b_c~d' }],
    // Percent-encoded paths, read as the router decodes them.
    ['/v1/%63ompletions', { route: 'completions', fn: undefined }],
    ['/invoke/org%2Fmodel', { route: 'invoke', fn: 'org/model' }],
    ['/invoke/h%C3%A9llo', { route: 'invoke', fn: 'héllo' }],
    ['/invoke/a%25b', { route: 'invoke', fn: 'a%b' }],
    ['/invoke/a%2525b?q=1', { route: 'invoke', fn: 'a%25b' }],
  ])('reads %s as the router does', async (target, expected) => {
    expect(callRouteOf(target)).toEqual(expected);
    expect(await routed(target)).toEqual({ route: expected.route, fn: expected.fn ?? null });
  });

  it.each([
    '/v1/chat/completions/',
    '/V1/chat/completions',
    '/v1/chat',
    '/invoke/',
    '/invoke',
    '/invoke/a/b',
    '/v1/chat%2Fcompletions',
    '/v1/chat/completions%2F',
    '/healthz',
  ])('reads %s as no call route, as the router does', async (target) => {
    expect(callRouteOf(target)).toBeUndefined();
    expect(await routed(target)).toBeUndefined();
  });
});

describe('affinityKey', () => {
  it('returns the session when session, user and function are all given', () => {
    expect(affinityKey('sess-1', 'alice', 'llama')).toBe('sess-1');
  });

  it('returns the user when there is no session', () => {
    expect(affinityKey(undefined, 'alice', 'llama')).toBe('alice');
  });

  it('returns the user when the session header is empty', () => {
    expect(affinityKey('', 'alice', 'llama')).toBe('alice');
  });

  it('returns the function when there is neither session nor user', () => {
    expect(affinityKey(undefined, undefined, 'llama')).toBe('llama');
    expect(affinityKey('', '', 'llama')).toBe('llama');
  });
});

describe('uuidv7', () => {
  const shape = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

  it('returns an RFC 9562 v7 id (version nibble 7, variant 10) when called', () => {
    for (let i = 0; i < 200; i++) {
      const id = uuidv7();
      expect(id).toMatch(shape);
      expect(id[14]).toBe('7');
      expect((parseInt(id[19]!, 16) & 0b1100).toString(2)).toBe('1000');
    }
  });

  it('returns the time as the first 48 bits when given now', () => {
    expect(uuidv7(0x0123_4567_89ab).slice(0, 13)).toBe('01234567-89ab');
    expect(uuidv7(0).slice(0, 13)).toBe('00000000-0000');
    expect(uuidv7(2 ** 48 - 1).slice(0, 13)).toBe('ffffffff-ffff');
  });

  it('returns the current time in the id when now is not given', () => {
    const before = Date.now();
    const id = uuidv7();
    const after = Date.now();
    const ms = parseInt(id.slice(0, 8) + id.slice(9, 13), 16);
    expect(ms).toBeGreaterThanOrEqual(before);
    expect(ms).toBeLessThanOrEqual(after);
  });

  it('returns ids that sort in creation order when now increases', () => {
    const start = 1_700_000_000_000;
    const ids = Array.from({ length: 1000 }, (_, i) => uuidv7(start + i));
    expect([...ids].sort()).toEqual(ids);
    // Across a carry in the middle bytes too.
    expect(uuidv7(0xff_ffff) < uuidv7(0x100_0000)).toBe(true);
  });

  it('returns distinct ids when many are made in the same millisecond', () => {
    const ids = new Set(Array.from({ length: 10_000 }, () => uuidv7(1_700_000_000_000)));
    expect(ids.size).toBe(10_000);
  });
});
