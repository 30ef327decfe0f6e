import { Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { KeyCall, KeyCalls, usageTokens } from '../../../gateway/access/key-calls.ts';
import type { ClientKey } from '../../../gateway/access/keys.ts';
import { createMemoryLimiter } from '../../../gateway/access/limits.ts';
import type { Limiter } from '../../../gateway/access/limits.ts';
import { RateLimitedError } from '../../../gateway/errors.ts';
import type { LogFields } from '../../../placer/kernel/index.ts';
import { warningRecorder } from '../../support/logger.ts';
import { T0, fakeClock } from './limits-contract.ts';

const key = (limits: ClientKey['limits']): ClientKey => ({ id: 'k1', name: 'ci', limits });

/**
 * The calls of one key with `limits`, over `limiter` (a memory limiter on a fake clock unless
 * given): `open` one as the call path does, or one the test expects to be `admitted`.
 */
function keyWith(limits: ClientKey['limits'], limiter?: Limiter, warnings: LogFields[] = []) {
  const { clock } = fakeClock();
  const calls = new KeyCalls({ limiter: limiter ?? createMemoryLimiter({ clock }), logger: warningRecorder(warnings) });
  const k = key(limits);
  const open = () => calls.open(k);
  const admitted = async (): Promise<KeyCall> => {
    const call = await open();
    expect(call).toBeInstanceOf(KeyCall);
    return call as KeyCall;
  };
  return { open, admitted };
}

/** A refusal of the key's limits carrying `headers` among its own. */
const refusedWith = (headers: Record<string, string>) => ({ code: 'GW_RATE_LIMITED', headers });

/** Lets the quiet writes (settle, release) land: they are not awaited by the call path. */
const flush = () => new Promise((resolve) => setImmediate(resolve));

describe('KeyCalls', () => {
  it('refuses a call over requestsPerMinute with 429, Retry-After and the x-ratelimit headers', async () => {
    const { open, admitted } = keyWith({ requestsPerMinute: 1 });
    expect((await admitted()).headers).toEqual({
      'x-ratelimit-limit-requests': '1',
      'x-ratelimit-remaining-requests': '0',
      'x-ratelimit-reset-requests': '1m0s',
    });
    const second = await open();
    expect(second).toBeInstanceOf(RateLimitedError);
    expect(second).toMatchObject({
      code: 'GW_RATE_LIMITED',
      status: 429,
      message: 'client key "ci" is at its requestsPerMinute (1); retry in 60 s',
      headers: {
        'retry-after': '60',
        'x-ratelimit-limit-requests': '1',
        'x-ratelimit-remaining-requests': '0',
        'x-ratelimit-reset-requests': '1m0s',
      },
    });
  });

  it('gives the concurrent call back on close, once', async () => {
    const { open, admitted } = keyWith({ concurrentCalls: 1 });
    const held = await admitted();
    expect(await open()).toMatchObject(refusedWith({ 'retry-after': '1' }));
    held.close();
    held.close();
    await flush();
    await admitted();
    expect(await open()).toBeInstanceOf(RateLimitedError);
  });

  it('counts a quarter of the prompt, and settles to the usage the answer reports', async () => {
    const { admitted } = keyWith({ tokensPerMinute: 100 });
    const call = await admitted();
    expect(await call.tokens(200)).toBeUndefined();
    expect(call.headers).toMatchObject({ 'x-ratelimit-remaining-tokens': '50' });
    const answer = Readable.from([
      Buffer.from('{"choices":[],'),
      Buffer.from('"usage":{"prompt_tokens":5,"completion_tokens":5,"total_tokens":10}}'),
    ]);
    call.watch(answer);
    await new Promise((resolve) => answer.on('end', resolve));
    call.close();
    await flush();
    const next = await admitted();
    expect(await next.tokens(4)).toBeUndefined();
    // 10 settled plus this 1.
    expect(next.headers['x-ratelimit-remaining-tokens']).toBe('89');
    expect(await next.tokens(400)).toMatchObject(refusedWith({ 'x-ratelimit-remaining-tokens': '89' }));
  });

  it('refuses a detached call while the key holds storedBytes of results', async () => {
    const { admitted } = keyWith({ storedBytes: 100 });
    const call = await admitted();
    expect(await call.storedRoom('c1', 1000, T0 + 30_000)).toBeUndefined();
    call.stored('c1', 100, T0 + 60_000);
    await flush();
    const next = await admitted();
    expect(await next.storedRoom('c2', 1000, T0 + 30_000)).toMatchObject(refusedWith({ 'retry-after': '60' }));
  });

  it("holds a detached call's room until its result is stored, and gives it back when none is", async () => {
    const { admitted } = keyWith({ storedBytes: 100 });
    const first = await admitted();
    expect(await first.storedRoom('c1', 60, T0 + 30_000)).toBeUndefined();
    const second = await admitted();
    // 60 reserved for c1: c2 gets the 40 left, and a third call finds nothing.
    expect(await second.storedRoom('c2', 60, T0 + 30_000)).toBeUndefined();
    const third = await admitted();
    expect(await third.storedRoom('c3', 60, T0 + 30_000)).toMatchObject({ code: 'GW_RATE_LIMITED' });
    // c1 stores no result: its room comes back at close.
    first.close();
    await flush();
    expect(await third.storedRoom('c3', 60, T0 + 30_000)).toBeUndefined();
  });

  it('admits every call while the limiter fails, and says so once', async () => {
    const broken: Limiter = {
      admitCall: () => Promise.reject(new Error('redis down')),
      admitTokens: () => Promise.reject(new Error('redis down')),
      settle: () => Promise.reject(new Error('redis down')),
      release: () => Promise.reject(new Error('redis down')),
      reserveStored: () => Promise.reject(new Error('redis down')),
      settleStored: () => Promise.reject(new Error('redis down')),
      releaseStored: () => Promise.reject(new Error('redis down')),
      close: () => Promise.resolve(),
    };
    const warnings: LogFields[] = [];
    const { open } = keyWith({ requestsPerMinute: 1, concurrentCalls: 1, tokensPerMinute: 1 }, broken, warnings);
    for (let i = 0; i < 3; i++) {
      const call = await open();
      expect(call).toBeInstanceOf(KeyCall);
      expect(await (call as KeyCall).tokens(1000)).toBeUndefined();
      (call as KeyCall).close();
    }
    await flush();
    expect(warnings.map((w) => w.msg)).toEqual(['key limits not answering; calls admitted without them']);
  });
});

describe('usageTokens', () => {
  it.each([
    ['a JSON answer', '{"id":"x","usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}', 7],
    [
      'a stream ending in a usage chunk',
      'data: {"choices":[],"usage":null}\n\ndata: {"choices":[],"usage":{"prompt_tokens":2,"completion_tokens":9,"total_tokens":11}}\n\ndata: [DONE]\n\n',
      11,
    ],
    ['no total', '{"usage": {"prompt_tokens": 3, "completion_tokens": 4}}', 7],
    ['embeddings', '{"usage":{"prompt_tokens":8,"total_tokens":8}}', 8],
    ['no usage', '{"choices":[]}', undefined],
    ['a null usage', 'data: {"usage":null}\n\n', undefined],
  ])('reads %s', (_what, text, tokens) => {
    expect(usageTokens(Buffer.from(text))).toBe(tokens);
  });
});

describe('KeyCall.answered', () => {
  it("settles a detached call's tokens from its stored result", async () => {
    const { admitted } = keyWith({ tokensPerMinute: 1000 });
    const call = await admitted();
    await call.tokens(400);
    call.answered(Buffer.from('{"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}'));
    call.close();
    await flush();
    const next = await admitted();
    await next.tokens(4);
    expect(next.headers['x-ratelimit-remaining-tokens']).toBe('997');
  });
});
