/**
 * A keyed gateway whose API keys live in Redis stays keyed when that Redis loses them (FLUSHALL,
 * or a restart without persistence): every client call gets 401, an error is logged once and
 * `/readyz` lists `no_client_keys`. While the Redis does not answer, a token the gateway does not
 * know gets 503 GW_KEYS_UNAVAILABLE (it may be a key made since the last read) and `/readyz`
 * lists `client_keys_unavailable`. And `sluice gateway --store redis://…` refuses to start open
 * over a Redis that holds keys unless told which it should be.
 */
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRedisKeyStore } from '../../gateway/access/key-store.ts';
import { KeyRing } from '../../gateway/access/keys.ts';
import { clientKeysOptions } from '../../gateway/cli/client-keys.ts';
import { systemClock } from '../../placer/kernel/index.ts';
import { chatBody, eventually, postJson } from '../support/fleet.ts';
import { asKeyedOperator, readyReasons, recordingLogger, startKeyedGateway } from '../support/keyed-gateway.ts';
import type { KeyedGateway, LoggedLine } from '../support/keyed-gateway.ts';
import { startRedis } from '../support/redis.ts';
import type { RedisServer } from '../support/redis.ts';

const CHAT = '/v1/chat/completions';
const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

let redis: RedisServer;
const cleanups: Array<() => Promise<unknown>> = [];
const lines: LoggedLine[] = [];
let gateway: KeyedGateway;
let token: string;

beforeAll(async () => {
  redis = await startRedis();
  const logger = recordingLogger(lines);
  // As the CLI makes it for a Redis --store, with a refresh short enough for a spec.
  const ring = new KeyRing({ store: createRedisKeyStore({ url: redis.url, refreshMs: 200, logger }), logger });
  await ring.start();
  gateway = await startKeyedGateway(cleanups, { clientKeys: ring, logger });
  const made = await postJson(`${gateway.url}/v1/keys`, JSON.stringify({ name: 'in-redis' }), asKeyedOperator);
  expect(made.status).toBe(201);
  token = made.json.key as string;
}, 30_000);
afterAll(async () => {
  while (cleanups.length > 0) await cleanups.pop()!().catch(() => {});
  await redis?.stop();
});

describe('client keys in a Redis that loses them', () => {
  it('takes the key while Redis holds it', async () => {
    expect((await postJson(gateway.url + CHAT, chatBody(), bearer(token))).status).toBe(200);
    expect((await postJson(gateway.url + CHAT, chatBody())).status).toBe(401);
  });

  it('will not start the CLI gateway open over a Redis holding keys, unless --require-keys says which', async () => {
    const logger = recordingLogger([]);
    await expect(clientKeysOptions({ store: redis.url }, logger, systemClock)).rejects.toMatchObject({
      code: 'GW_INVALID_OPTION',
      message: expect.stringContaining('--require-keys'),
    });
    for (const requireKeys of [true, false]) {
      const options = await clientKeysOptions({ store: redis.url, requireKeys }, logger, systemClock);
      expect(options.requireKeys).toBe(requireKeys);
      await options.clientKeys?.close();
    }
  });

  it('refuses every client call with 401 once Redis is flushed, logged once and on /readyz', async () => {
    const admin = new Redis(redis.url);
    try {
      await admin.flushall();
    } finally {
      admin.disconnect();
    }
    await eventually(
      async () => (await postJson(gateway.url + CHAT, chatBody(), bearer(token))).status === 401,
      10_000,
      'the flushed key to be dropped',
    );
    for (const headers of [{}, bearer(token), bearer('sk-anything')]) {
      const refused = await postJson(gateway.url + CHAT, chatBody(), headers);
      expect([refused.status, refused.json.error?.code]).toEqual([401, 'GW_UNAUTHORIZED']);
    }
    expect(await readyReasons(gateway.url)).toContain('no_client_keys');
    expect(lines.filter((l) => l.level === 'error')).toEqual([
      expect.objectContaining({ msg: 'no client key left; every client call is refused', reason: 'no_client_keys' }),
    ]);
    expect(JSON.stringify(lines)).not.toContain(token);
  });

  it('answers an unknown token 503 GW_KEYS_UNAVAILABLE while Redis does not answer, and says so on /readyz', async () => {
    await redis.stop();
    await eventually(
      async () => (await postJson(gateway.url + CHAT, chatBody(), bearer(token))).status === 503,
      15_000,
      'the keys to be unreadable',
    );
    const refused = await postJson(gateway.url + CHAT, chatBody(), bearer('sk-anything'));
    expect([refused.status, refused.json.error?.code]).toEqual([503, 'GW_KEYS_UNAVAILABLE']);
    expect(refused.headers['retry-after']).toBe('1');
    // No key at all is still no key.
    expect((await postJson(gateway.url + CHAT, chatBody())).status).toBe(401);
    expect(await readyReasons(gateway.url)).toContain('client_keys_unavailable');
  }, 30_000);
});
