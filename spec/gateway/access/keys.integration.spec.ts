/**
 * Client keys and their limits across real processes: a keys file with a small limit window, a
 * key over its requests per minute answered 429 with Retry-After and the x-ratelimit headers and
 * then admitted again, a key calling a model outside its allow-list, and two gateways on one
 * redis-server sharing a key's counters.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashToken, newKeyToken } from '../../../gateway/access/keys.ts';
import { startService } from '../../../gateway/cli/entry.ts';
import type { ChildService } from '../../../placer/kernel/processes.ts';
import { request } from 'undici';
import { asOperator, bearer, chatBody, eventually, operatorEnv, postJson, startFleet } from '../../support/fleet.ts';
import type { Fleet } from '../../support/fleet.ts';
import { startRedis } from '../../support/redis.ts';
import type { RedisServer } from '../../support/redis.ts';
import { commandLine } from '../../support/command-line.ts';

const CHAT = '/v1/chat/completions';
const LIMITED = newKeyToken();
const LISTED = newKeyToken();
const OPEN = newKeyToken();

let dir: string;
let keysFile: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'sluice-keys-it-'));
  keysFile = join(dir, 'keys.json');
  await writeFile(
    keysFile,
    JSON.stringify([
      {
        name: 'limited',
        hash: `sha256:${hashToken(LIMITED)}`,
        limits: { requestsPerMinute: 2, tokensPerMinute: 100_000 },
      },
      { name: 'listed', hash: `sha256:${hashToken(LISTED)}`, models: ['sim-small'] },
      { name: 'open', hash: `sha256:${hashToken(OPEN)}` },
    ]),
  );
});
afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe('a key over its limit', () => {
  let fleet: Fleet;
  beforeAll(async () => {
    // A 3 s "minute", so the spec sees the window slide without waiting a minute.
    fleet = await startFleet({
      nodes: 1,
      engineArgs: ['--model', 'sim-small,sim-other'],
      gatewayArgs: ['--keys', keysFile, '--key-limit-window', '3s'],
    });
  });
  afterAll(async () => {
    await fleet?.stop();
  });

  it('gets 429 with Retry-After and the x-ratelimit headers, and is admitted again once the window slid', async () => {
    const gw = fleet.gateway.url;
    const first = await postJson(gw + CHAT, chatBody(), bearer(LIMITED));
    expect(first.status).toBe(200);
    expect(first.headers).toMatchObject({
      'x-ratelimit-limit-requests': '2',
      'x-ratelimit-remaining-requests': '1',
      'x-ratelimit-limit-tokens': '100000',
    });
    expect((await postJson(gw + CHAT, chatBody(), bearer(LIMITED))).status).toBe(200);
    const refused = await postJson(gw + CHAT, chatBody(), bearer(LIMITED));
    expect(refused.status).toBe(429);
    expect(refused.json.error).toMatchObject({ code: 'GW_RATE_LIMITED', type: 'rate_limit_error' });
    expect(refused.json.error.message).toContain('client key "limited" is at its requestsPerMinute (2)');
    expect(Number(refused.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    expect(Number(refused.headers['retry-after'])).toBeLessThanOrEqual(6);
    expect(refused.headers).toMatchObject({ 'x-ratelimit-limit-requests': '2', 'x-ratelimit-remaining-requests': '0' });
    // Another key is not held back by this one's counters.
    expect((await postJson(gw + CHAT, chatBody(), bearer(OPEN))).status).toBe(200);
    await eventually(
      async () => (await postJson(gw + CHAT, chatBody(), bearer(LIMITED))).status === 200,
      10_000,
      'the key to be admitted again',
    );
  });

  it('refuses a model outside the key allow-list with 403, and an unknown key with 401', async () => {
    const gw = fleet.gateway.url;
    const forbidden = await postJson(gw + CHAT, chatBody({ model: 'sim-other' }), bearer(LISTED));
    expect([forbidden.status, forbidden.json.error.code]).toEqual([403, 'GW_FORBIDDEN']);
    expect(forbidden.json.error.message).toBe(
      'client key "listed" may not call model "sim-other": its models are sim-small',
    );
    expect((await postJson(gw + CHAT, chatBody(), bearer(LISTED))).status).toBe(200);
    expect((await postJson(gw + CHAT, chatBody({ model: 'sim-other' }), bearer(OPEN))).status).toBe(200);
    const unknown = await postJson(gw + CHAT, chatBody(), bearer(newKeyToken()));
    expect([unknown.status, unknown.json.error.code]).toEqual([401, 'GW_UNAUTHORIZED']);
  });
});

describe('two gateways on one redis-server', () => {
  let redis: RedisServer;
  let fleet: Fleet;
  let other: ChildService;
  beforeAll(async () => {
    redis = await startRedis();
    const shared = ['--store', redis.url, '--keys', keysFile, '--key-limit-window', '1m'];
    fleet = await startFleet({ nodes: 1, gatewayArgs: [...shared, '--gateway-id', 'gw-a'] });
    const values = { runners: fleet.nodes[0]!.runner.url, 'log-level': 'warn' };
    other = await startService(commandLine('gateway', values, [...shared, '--gateway-id', 'gw-b']), {
      env: operatorEnv(),
    });
  });
  afterAll(async () => {
    await other?.stop('SIGTERM', 5000);
    await fleet?.stop();
    await redis?.stop();
  });

  it("share a key's requests per minute: the third call is refused whichever gateway gets it", async () => {
    const a = fleet.gateway.url;
    const b = other.url;
    expect((await postJson(a + CHAT, chatBody(), bearer(LIMITED))).status).toBe(200);
    const second = await postJson(b + CHAT, chatBody(), bearer(LIMITED));
    expect(second.status).toBe(200);
    expect(second.headers['x-ratelimit-remaining-requests']).toBe('0');
    const third = await postJson(a + CHAT, chatBody(), bearer(LIMITED));
    expect([third.status, third.json.error.code]).toEqual([429, 'GW_RATE_LIMITED']);
    expect((await postJson(b + CHAT, chatBody(), bearer(LIMITED))).status).toBe(429);
  });

  it("know a key made through one gateway's API, and stop taking it once the other revokes it", async () => {
    const made = await postJson(
      `${fleet.gateway.url}/v1/keys`,
      JSON.stringify({ name: 'from-api', limits: { concurrentCalls: 4 } }),
      asOperator,
    );
    expect(made.status).toBe(201);
    expect(made.json).toMatchObject({ object: 'client_key', name: 'from-api', source: 'api' });
    const token = made.json.key as string;
    await eventually(
      async () => (await postJson(other.url + CHAT, chatBody(), bearer(token))).status === 200,
      10_000,
      'the other gateway to take the new key',
    );
    const listed = await request(`${other.url}/v1/keys`, { headers: asOperator });
    const names = ((await listed.body.json()) as { data: Array<{ name: string }> }).data.map((k) => k.name);
    expect(names).toEqual(['limited', 'listed', 'open', 'from-api']);
    expect(
      (await request(`${other.url}/v1/keys/${made.json.id}`, { method: 'DELETE', headers: asOperator })).statusCode,
    ).toBe(204);
    await eventually(
      async () => (await postJson(fleet.gateway.url + CHAT, chatBody(), bearer(token))).status === 401,
      10_000,
      'the first gateway to drop the revoked key',
    );
  });
});
