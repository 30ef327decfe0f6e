/**
 * A client key refused for its concurrentCalls gets the x-ratelimit headers of its per-minute
 * limits, as every other answer to it does, with the in-memory limiter and the Redis one; and a
 * refusal for its requests per minute carries the tokens' headers too.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { request } from 'undici';
import { newKeyToken } from '../../gateway/access/keys.ts';
import { createRedisLimiter } from '../../gateway/access/limits-redis.ts';
import { createMemoryLimiter } from '../../gateway/access/limits.ts';
import type { Limiter } from '../../gateway/access/limits.ts';
import { chatBody, postJson } from '../support/fleet.ts';
import { keyRingOf, startKeyedGateway } from '../support/keyed-gateway.ts';
import { startRedis } from '../support/redis.ts';
import type { RedisServer } from '../support/redis.ts';

const CHAT = '/v1/chat/completions';
const TOKEN = newKeyToken();
const bearer = { authorization: `Bearer ${TOKEN}` };

let redis: RedisServer;
beforeAll(async () => {
  redis = await startRedis();
});
afterAll(async () => {
  await redis?.stop();
});
const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!().catch(() => {});
});

const LIMITERS: Record<string, () => Limiter> = {
  memory: () => createMemoryLimiter(),
  redis: () => createRedisLimiter({ url: redis.url, keyPrefix: `conc-${Math.random().toString(36).slice(2)}:` }),
};

describe.each(Object.keys(LIMITERS))('a key at its concurrentCalls (%s limiter)', (name) => {
  it('is refused 429 with the x-ratelimit headers of its requests and tokens', async () => {
    const clientKeys = keyRingOf([{ name: 'one-at-a-time', token: TOKEN, limits: { requestsPerMinute: 100, tokensPerMinute: 100_000, concurrentCalls: 1 } }]);
    // Slow tokens: the first call holds the key's one concurrent call while the second comes.
    const { url } = await startKeyedGateway(cleanups, { clientKeys, limiter: LIMITERS[name]!() }, { itlMs: 100 });
    const first = await request(url + CHAT, { method: 'POST', body: chatBody({ stream: true, max_tokens: 200 }), headers: { 'content-type': 'application/json', ...bearer } });
    cleanups.push(async () => first.body.destroy());
    expect(first.statusCode).toBe(200);
    expect(first.headers['x-ratelimit-limit-requests']).toBe('100');

    const refused = await postJson(url + CHAT, chatBody(), bearer);
    expect([refused.status, refused.json.error.code]).toEqual([429, 'GW_RATE_LIMITED']);
    expect(refused.json.error.message).toContain('concurrentCalls (1)');
    expect(refused.headers['retry-after']).toBe('1');
    expect(refused.headers).toMatchObject({
      'x-ratelimit-limit-requests': '100',
      // The first call was counted; the refused one is not.
      'x-ratelimit-remaining-requests': '99',
      'x-ratelimit-limit-tokens': '100000',
    });
    expect(refused.headers['x-ratelimit-reset-requests']).toMatch(/^\d/);
    expect(Number(refused.headers['x-ratelimit-remaining-tokens'])).toBeLessThan(100_000);
    expect(refused.headers['x-ratelimit-reset-tokens']).toMatch(/^\d/);
  });

  it('is refused for its requests per minute with the tokens headers too', async () => {
    const clientKeys = keyRingOf([{ name: 'one-a-minute', token: TOKEN, limits: { requestsPerMinute: 1, tokensPerMinute: 100_000 } }]);
    const { url } = await startKeyedGateway(cleanups, { clientKeys, limiter: LIMITERS[name]!() });
    expect((await postJson(url + CHAT, chatBody(), bearer)).status).toBe(200);
    const refused = await postJson(url + CHAT, chatBody(), bearer);
    expect(refused.status).toBe(429);
    expect(refused.headers).toMatchObject({ 'x-ratelimit-limit-requests': '1', 'x-ratelimit-remaining-requests': '0', 'x-ratelimit-limit-tokens': '100000' });
  });
});
