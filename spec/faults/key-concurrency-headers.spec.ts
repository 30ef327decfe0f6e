/**
 * Every answer to a client key with per-minute limits carries their x-ratelimit headers, with the
 * in-memory limiter and the Redis one: a refusal for its concurrentCalls, for its requests per
 * minute, for a body the gateway cannot read and for a model it may not call, each before the
 * call's tokens were counted (the tokens' window is read, nothing counted).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { request } from 'undici';
import { newKeyToken } from '../../gateway/access/keys.ts';
import { createRedisLimiter } from '../../gateway/access/limits-redis.ts';
import { createMemoryLimiter } from '../../gateway/access/limits.ts';
import type { Limiter } from '../../gateway/access/limits.ts';
import { chatBody, postJson } from '../support/fleet.ts';
import { keyRingOf, startKeyedGateway } from '../support/keyed-gateway.ts';
import { startRedis } from '../support/redis.ts';
import type { RedisServer } from '../support/redis.ts';
import { serversForEach } from '../support/servers.ts';

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
const { cleanups } = serversForEach();

const LIMITERS: Record<string, () => Limiter> = {
  memory: () => createMemoryLimiter(),
  redis: () => createRedisLimiter({ url: redis.url, keyPrefix: `conc-${Math.random().toString(36).slice(2)}:` }),
};

describe.each(Object.keys(LIMITERS))('a key at its concurrentCalls (%s limiter)', (name) => {
  it('is refused 429 with the x-ratelimit headers of its requests and tokens', async () => {
    const clientKeys = keyRingOf([
      {
        name: 'one-at-a-time',
        token: TOKEN,
        limits: { requestsPerMinute: 100, tokensPerMinute: 100_000, concurrentCalls: 1 },
      },
    ]);
    // Slow tokens: the first call holds the key's one concurrent call while the second comes.
    const { url } = await startKeyedGateway(cleanups, { clientKeys, limiter: LIMITERS[name]!() }, { itlMs: 100 });
    const first = await request(url + CHAT, {
      method: 'POST',
      body: chatBody({ stream: true, max_tokens: 200 }),
      headers: { 'content-type': 'application/json', ...bearer },
    });
    cleanups.push(async () => first.body.destroy());
    expect(first.statusCode).toBe(200);
    expect(first.headers['x-ratelimit-limit-requests']).toBe('100');

    const refused = await postJson(url + CHAT, chatBody(), bearer);
    expect([refused.status, refused.json.error?.code]).toEqual([429, 'GW_RATE_LIMITED']);
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

  it("answers a body it cannot read and a model it may not call with both windows' headers", async () => {
    const clientKeys = keyRingOf([
      {
        name: 'listed',
        token: TOKEN,
        models: ['sim-small'],
        limits: { requestsPerMinute: 100, tokensPerMinute: 100_000 },
      },
    ]);
    const { url } = await startKeyedGateway(cleanups, { clientKeys, limiter: LIMITERS[name]!() });
    for (const [body, status] of [
      ['{"model":', 400],
      [chatBody({ model: 'sim-other' }), 403],
    ] as const) {
      const refused = await postJson(url + CHAT, body, bearer);
      expect(refused.status).toBe(status);
      expect(refused.headers).toMatchObject({
        'x-ratelimit-limit-requests': '100',
        'x-ratelimit-limit-tokens': '100000',
        'x-ratelimit-remaining-tokens': '100000',
      });
    }
  });

  it('is refused for its requests per minute with the tokens headers too', async () => {
    const clientKeys = keyRingOf([
      { name: 'one-a-minute', token: TOKEN, limits: { requestsPerMinute: 1, tokensPerMinute: 100_000 } },
    ]);
    const { url } = await startKeyedGateway(cleanups, { clientKeys, limiter: LIMITERS[name]!() });
    expect((await postJson(url + CHAT, chatBody(), bearer)).status).toBe(200);
    const refused = await postJson(url + CHAT, chatBody(), bearer);
    expect(refused.status).toBe(429);
    expect(refused.headers).toMatchObject({
      'x-ratelimit-limit-requests': '1',
      'x-ratelimit-remaining-requests': '0',
      'x-ratelimit-limit-tokens': '100000',
    });
  });
});
