/**
 * POST /v1/runners/{id}/cache on a real gateway on port 0: the runner scope, 404 for a runner
 * that is not registered, 413 past the body bound, 400 with a stable code and a message naming
 * the field for every bad body, 409 for an update out of order, and no secret in any answer.
 */
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../../../gateway/server.ts';
import { MAX_CACHE_UPDATE_BYTES } from '../../../gateway/fleet/runner-routes.ts';
import { REGISTER_PATH, SIM_TOKENIZER, cacheFeedPath } from '../../../runner/protocol/index.ts';
import type { RunnerRegistration } from '../../../runner/protocol/index.ts';
import { asOperator, getJson, postJson } from '../../support/fleet.ts';
import { registeringGateway } from '../../support/registrations.ts';

const RUNNER_TOKEN = 'cache-route-spec-runner-token-0123456789';
const auth = { authorization: `Bearer ${RUNNER_TOKEN}` };

let gateway: Gateway;
let url: string;
beforeAll(async () => {
  gateway = registeringGateway(RUNNER_TOKEN, { heartbeatInterval: 60_000, lostAfter: 600_000 });
  url = (await gateway.listen()).url;
  const registration: RunnerRegistration = {
    id: 'r1',
    url: 'http://127.0.0.1:9',
    version: 'test',
    engines: [],
    models: ['m'],
    slots: 1,
    gpus: { gpus: [], source: 'none' },
    ready: true,
    load: { slotsInUse: 0, slots: 1, queue: 0, models: {} },
  };
  expect((await postJson(`${url}${REGISTER_PATH}`, JSON.stringify(registration), auth)).status).toBe(200);
});
afterAll(() => gateway?.close());

const send = (body: string, id = 'r1', headers: Record<string, string> = auth) =>
  postJson(`${url}${cacheFeedPath(id)}`, body, headers);
const good = { epoch: 'e1', seq: 1, engineFeed: 'live', reset: true };

describe('POST /v1/runners/{id}/cache', () => {
  it('takes a reset from a registered runner with 204', async () => {
    const answer = await send(JSON.stringify({ ...good, stored: Buffer.alloc(16, 1).toString('base64') }));
    expect(answer.status).toBe(204);
    expect(answer.text).toBe('');
  });

  it.each([
    ['no runner token', {}, 401],
    ['the operator token', asOperator, 403],
  ])('refuses %s', async (_name, headers, status) => {
    expect((await send(JSON.stringify(good), 'r1', headers)).status).toBe(status);
  });

  it('answers 404 GW_RUNNER_NOT_FOUND for a runner that is not registered', async () => {
    const answer = await send(JSON.stringify(good), 'nobody');
    expect(answer.status).toBe(404);
    expect(answer.json.error.code).toBe('GW_RUNNER_NOT_FOUND');
  });

  it('answers 413 GW_BODY_TOO_LARGE past the bound', async () => {
    const answer = await send(' '.repeat(MAX_CACHE_UPDATE_BYTES + 1));
    expect(answer.status).toBe(413);
    expect(answer.json.error.code).toBe('GW_BODY_TOO_LARGE');
  });

  it.each([
    ['not JSON', '{', 'GW_INVALID_JSON', 'not valid JSON'],
    ['a list', '[]', 'GW_INVALID_CACHE_UPDATE', 'JSON object'],
    ['an epoch with a space', { ...good, epoch: 'e 1' }, 'GW_INVALID_CACHE_UPDATE', 'epoch'],
    ['no epoch', { ...good, epoch: undefined }, 'GW_INVALID_CACHE_UPDATE', 'epoch'],
    ['seq 0', { ...good, seq: 0 }, 'GW_INVALID_CACHE_UPDATE', 'seq'],
    ['a fractional seq', { ...good, seq: 1.5 }, 'GW_INVALID_CACHE_UPDATE', 'seq'],
    ['an unknown engineFeed', { ...good, engineFeed: 'maybe' }, 'GW_INVALID_CACHE_UPDATE', 'engineFeed'],
    ['a reset that is no boolean', { ...good, reset: 'yes' }, 'GW_INVALID_CACHE_UPDATE', 'reset'],
    ['stored keys that are not base64', { ...good, stored: 'not base64!' }, 'GW_INVALID_CACHE_UPDATE', 'stored'],
    [
      'removed keys of 7 bytes',
      { ...good, removed: Buffer.alloc(7).toString('base64') },
      'GW_INVALID_CACHE_UPDATE',
      'removed',
    ],
    ['a load that is no object', { ...good, load: 3 }, 'GW_INVALID_CACHE_UPDATE', 'load'],
    [
      'a load of -1 slots in use',
      { ...good, load: { slotsInUse: -1, slots: 4, queue: 0 } },
      'GW_INVALID_CACHE_UPDATE',
      'load.slotsInUse',
    ],
    ['a load without a queue', { ...good, load: { slotsInUse: 1, slots: 4 } }, 'GW_INVALID_CACHE_UPDATE', 'load.queue'],
    [
      'a KV-cache use over 1',
      { ...good, load: { slotsInUse: 1, slots: 4, queue: 0, kvCacheUsage: 2 } },
      'GW_INVALID_CACHE_UPDATE',
      'load.kvCacheUsage',
    ],
    [
      'blocks in a down feed',
      { ...good, engineFeed: 'down', stored: Buffer.alloc(8).toString('base64') },
      'GW_INVALID_CACHE_UPDATE',
      'down',
    ],
  ])('answers 400 for %s', async (_name, body, code, named) => {
    const answer = await send(typeof body === 'string' ? body : JSON.stringify(body));
    expect(answer.status).toBe(400);
    expect(answer.json.error.code).toBe(code);
    expect(answer.json.error.message).toContain(named);
  });

  it('never echoes what a field held: a token sent as the epoch stays out of the answer', async () => {
    const answer = await send(JSON.stringify({ ...good, seq: RUNNER_TOKEN, epoch: `${RUNNER_TOKEN} ` }));
    expect(answer.status).toBe(400);
    expect(answer.text).not.toContain(RUNNER_TOKEN);
    expect(answer.json.error.message).toContain('a string of');
  });

  it('answers 409 GW_CACHE_FEED_OUT_OF_ORDER for a gap or an unknown epoch, naming what it expected', async () => {
    expect((await send(JSON.stringify({ ...good, epoch: 'e9' }))).status).toBe(204);
    const gap = await send(JSON.stringify({ epoch: 'e9', seq: 3, engineFeed: 'live' }));
    expect(gap.status).toBe(409);
    expect(gap.json.error).toMatchObject({ code: 'GW_CACHE_FEED_OUT_OF_ORDER' });
    expect(gap.json.error.message).toContain('expected seq 2, got 3');
    const epoch = await send(JSON.stringify({ epoch: 'e8', seq: 2, engineFeed: 'live' }));
    expect(epoch.status).toBe(409);
    expect((await send(JSON.stringify({ epoch: 'e9', seq: 2, engineFeed: 'live' }))).status).toBe(204);
  });
});

describe('the load an update carries', () => {
  const runnerOf = async () =>
    (await getJson(`${url}/v1/runners`, asOperator)).json.data.find((r: { id: string }) => r.id === 'r1');

  it("is the runner's fresh report, read by placement, the per-model counts kept from the heartbeat", async () => {
    // Registered with 1 slot, none in use: the feed says 4 slots, 3 in use, 2 waiting.
    const load = { slotsInUse: 3, slots: 4, queue: 2, kvCacheUsage: 0.5 };
    expect((await send(JSON.stringify({ epoch: 'e7', seq: 1, engineFeed: 'live', reset: true, load }))).status).toBe(
      204,
    );
    const runner = await runnerOf();
    // `slots` is what the placers read of the runner (its load()).
    expect(runner.slots).toBe(4);
    expect(runner.load).toEqual({ ...load, models: {} });
    expect(runner.loadAgeMs).toBeLessThan(60_000);
    const next = { slotsInUse: 1, slots: 4, queue: 0 };
    expect((await send(JSON.stringify({ epoch: 'e7', seq: 2, engineFeed: 'live', load: next }))).status).toBe(204);
    expect((await runnerOf()).load).toEqual({ ...next, models: {} });
  });

  it('is not taken from an update out of order', async () => {
    const stale = { slotsInUse: 0, slots: 9, queue: 0 };
    expect((await send(JSON.stringify({ epoch: 'e7', seq: 5, engineFeed: 'live', load: stale }))).status).toBe(409);
    expect((await runnerOf()).slots).toBe(4);
  });
});

describe('the cache announcement of registrations and heartbeats', () => {
  const announcement = {
    tokenizer: SIM_TOKENIZER,
    scheme: { algorithm: 'sha256_cbor', seed: '0', blockSize: 16 },
    events: true,
  };
  const heartbeat = { ready: true, state: 'serving', models: ['m'], load: { slotsInUse: 0, slots: 1 } };
  const cacheOf = async () =>
    (await getJson(`${url}/v1/runners`, asOperator)).json.data.find((r: { id: string }) => r.id === 'r1').cache;
  const beat = (body: unknown) => postJson(`${url}/v1/runners/r1/heartbeat`, JSON.stringify(body), auth);

  it('keeps what the last heartbeat announced, shown with the feed in GET /v1/runners', async () => {
    expect((await beat({ ...heartbeat, cache: announcement })).status).toBe(200);
    expect(await cacheOf()).toMatchObject({
      tokenizer: SIM_TOKENIZER,
      blockSize: 16,
      events: true,
      engineFeed: 'live',
    });
    expect((await beat(heartbeat)).status).toBe(200);
    expect(await cacheOf()).toBeUndefined();
  });

  it('ignores an announcement of a scheme it cannot match rather than refuse the heartbeat', async () => {
    const unusable = { ...announcement, scheme: { ...announcement.scheme, algorithm: 'sha256' } };
    expect((await beat({ ...heartbeat, cache: unusable })).status).toBe(200);
    expect(await cacheOf()).toBeUndefined();
  });

  it('refuses a heartbeat whose announcement is not one, naming the field, and keeps the runner', async () => {
    const refused = await beat({ ...heartbeat, cache: 'yes' });
    expect(refused.status).toBe(400);
    expect(refused.json.error.code).toBe('GW_INVALID_REGISTRATION');
    expect(refused.json.error.message).toContain('cache');
    expect((await beat({ ...heartbeat, cache: announcement })).status).toBe(200);
    expect(await cacheOf()).toMatchObject({ tokenizer: SIM_TOKENIZER });
  });
});

describe('a runner leaving the pool', () => {
  it('is dropped from the truth index', async () => {
    const runnersOf = async () =>
      (await getJson(`${url}/v1/stats`, asOperator)).json.cacheTruth.runners.map((r: { runner: string }) => r.runner);
    expect(await runnersOf()).toContain('r1');
    const left = await request(`${url}/v1/runners/r1`, { method: 'DELETE', headers: auth });
    expect(left.statusCode).toBe(204);
    expect(await runnersOf()).not.toContain('r1');
  });
});
