/**
 * Runners that register themselves, against a real gateway over real sockets: the token, the
 * pool shared with static runners, two-stage expiry, drain and deregistration. The runner side
 * of the wire is played by hand here so each answer can be checked.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { request } from 'undici';
import { createGateway } from '../../../gateway/server.ts';
import { createJsonLogger } from '../../../placer/kernel/index.ts';
import type { GatewayOptions } from '../../../gateway/options.ts';
import { createSimEngine } from '../../../runner/engines/sim/server.ts';
import { REGISTER_PATH, heartbeatPath, runnerPath } from '../../../runner/protocol/index.ts';
import { parseNvidiaSmi } from '../../../runner/inventory.ts';
import { createRunner } from '../../../runner/server.ts';
import { asOperator, chatBody, eventually, postJson } from '../../support/fleet.ts';
import { IDLE_LOAD as load, registeringGateway, registration } from '../../support/registrations.ts';
import { serversForEach } from '../../support/servers.ts';
import { startSimRunner } from '../../support/sim-runner.ts';

const TOKEN = 'a-runner-token-long-enough';
const auth = { authorization: `Bearer ${TOKEN}` };
const { cleanups } = serversForEach();

async function realRunner(id: string): Promise<string> {
  return (await startSimRunner(cleanups, { id })).runnerUrl;
}

async function gateway(options: Partial<GatewayOptions> = {}): Promise<string> {
  const gw = registeringGateway(TOKEN, {
    heartbeatInterval: 50,
    unreachableAfterMissed: 2,
    lostAfter: 400,
    placerTimeout: 300,
    ...options,
  });
  const { url } = await gw.listen();
  cleanups.push(() => gw.close());
  return url;
}

const runners = async (gw: string) =>
  ((await (await request(`${gw}/v1/runners`, { headers: asOperator })).body.json()) as { data: any[] }).data;

describe('runner registration', () => {
  it('refuses a wrong or missing token with 401, logged without the token, and accepts the right one', async () => {
    const lines: string[] = [];
    const gw = await gateway({ logger: createJsonLogger({ write: (line) => lines.push(line) }) });
    const body = JSON.stringify(registration('r1', 'http://127.0.0.1:9'));
    expect((await postJson(`${gw}${REGISTER_PATH}`, body, { authorization: 'Bearer wrong' })).status).toBe(401);
    expect((await postJson(`${gw}${REGISTER_PATH}`, body)).status).toBe(401);
    expect(lines.filter((l) => l.includes('credential refused'))).toHaveLength(2);
    expect(lines.join('\n')).not.toContain('wrong');
    const ok = await postJson(`${gw}${REGISTER_PATH}`, body, auth);
    expect(ok.status).toBe(200);
    expect(ok.json).toMatchObject({ heartbeatInterval: 50, gatewayId: expect.any(String) });
    const bad = await postJson(`${gw}${REGISTER_PATH}`, JSON.stringify({ id: 'r2', url: 'ftp://x' }), auth);
    expect(bad.status).toBe(400);
    expect(bad.json.error.code).toBe('GW_INVALID_REGISTRATION');
  });

  it('places calls on registered and static runners from one pool', async () => {
    const staticUrl = await realRunner('static-1');
    const registeredUrl = await realRunner('reg-1');
    const gw = await gateway({ runners: [staticUrl], lostAfter: 60_000, unreachableAfterMissed: 1000 });
    expect(
      (await postJson(`${gw}${REGISTER_PATH}`, JSON.stringify(registration('reg-1', registeredUrl)), auth)).status,
    ).toBe(200);
    const seen = new Set<unknown>();
    for (let i = 0; i < 8; i++)
      seen.add((await postJson(`${gw}/v1/chat/completions`, chatBody())).headers['sluice-runner-id']);
    expect([...seen].sort()).toEqual(['reg-1', 'static-1']);
    const list = await runners(gw);
    expect(list.map((r) => [r.id, r.source]).sort()).toEqual([
      ['reg-1', 'registered'],
      ['static-1', 'static'],
    ]);
  });

  it('stops placing on a silent runner (unreachable), then forgets it (lost)', async () => {
    const url = await realRunner('quiet');
    const gw = await gateway({ lostAfter: 1500 });
    await postJson(`${gw}${REGISTER_PATH}`, JSON.stringify(registration('quiet', url)), auth);
    expect((await runners(gw))[0]).toMatchObject({ id: 'quiet', state: 'live', placeable: true });
    await expect.poll(async () => (await runners(gw))[0]?.state, { timeout: 2000, interval: 20 }).toBe('unreachable');
    const refused = await postJson(`${gw}/v1/chat/completions`, chatBody());
    expect(refused.status).toBe(503);
    expect(refused.json.error.runners).toEqual([{ runner: 'quiet', reason: 'unreachable' }]);
    await expect.poll(async () => (await runners(gw)).length, { timeout: 4000, interval: 20 }).toBe(0);
    const hb = await postJson(
      `${gw}${heartbeatPath('quiet')}`,
      JSON.stringify({ ready: true, state: 'serving', models: ['sim-small'], load }),
      auth,
    );
    expect(hb.status).toBe(404);
  });

  it('drains a runner on request: no more calls, and its next heartbeat is told to drain', async () => {
    const a = await realRunner('a');
    const b = await realRunner('b');
    const gw = await gateway({ lostAfter: 60_000, unreachableAfterMissed: 1000 });
    for (const [id, url] of [
      ['a', a],
      ['b', b],
    ] as const)
      await postJson(`${gw}${REGISTER_PATH}`, JSON.stringify(registration(id, url)), auth);
    const drain = await postJson(`${gw}/v1/runners/a/drain`, '', asOperator);
    expect(drain.status).toBe(202);
    expect(drain.json.state).toBe('drain-requested');
    for (let i = 0; i < 6; i++)
      expect((await postJson(`${gw}/v1/chat/completions`, chatBody())).headers['sluice-runner-id']).toBe('b');
    const hb = await postJson(
      `${gw}${heartbeatPath('a')}`,
      JSON.stringify({ ready: true, state: 'serving', models: ['sim-small'], load }),
      auth,
    );
    expect(hb.json).toEqual({ drain: true });
    const gone = await request(`${gw}${runnerPath('a')}`, { method: 'DELETE', headers: auth });
    expect(gone.statusCode).toBe(204);
    expect((await runners(gw)).map((r) => r.id)).toEqual(['b']);
  });

  it('explains a 503 runner by runner: drain requested, another model', async () => {
    const a = await realRunner('a');
    const b = await realRunner('b');
    const gw = await gateway({ lostAfter: 60_000, unreachableAfterMissed: 1000 });
    await postJson(`${gw}${REGISTER_PATH}`, JSON.stringify(registration('a', a)), auth);
    await postJson(`${gw}${REGISTER_PATH}`, JSON.stringify({ ...registration('b', b), models: ['other-model'] }), auth);
    await postJson(`${gw}/v1/runners/a/drain`, '', asOperator);
    const refused = await postJson(`${gw}/v1/chat/completions`, chatBody());
    expect(refused.status).toBe(503);
    expect(refused.json.error.code).toBe('PLACER_TIMEOUT');
    expect(refused.json.error.runners).toEqual([
      { runner: 'a', reason: 'drain-requested' },
      { runner: 'b', reason: 'not-serving-model' },
    ]);
  });

  it('answers 404 on registration routes when no runner token is set', async () => {
    const gw = createGateway({ runners: ['http://127.0.0.1:9'] });
    const { url } = await gw.listen();
    cleanups.push(() => gw.close());
    const res = await postJson(`${url}${REGISTER_PATH}`, '{}', auth);
    expect(res.status).toBe(404);
    expect(res.json.error.code).toBe('GW_REGISTRATION_DISABLED');
  });
});

describe('what registered runners can host', () => {
  it("shows a real runner's labels, free GPUs and launchable kinds in /v1/runners, as its /status says them", async () => {
    const gw = await gateway({ lostAfter: 60_000, unreachableAfterMissed: 1000 });
    const engine = createSimEngine({ ttftMs: 0, itlMs: 0 });
    const { url: engineUrl } = await engine.listen();
    cleanups.push(() => engine.close());
    const h100 = readFileSync(new URL('../../fixtures/nvidia-smi/h100x8.csv', import.meta.url), 'utf8');
    const runner = createRunner(
      {
        engine: engineUrl,
        engineKind: 'sim',
        id: 'labelled',
        runnerToken: TOKEN,
        gateways: [gw],
        heartbeatInterval: 50,
        labels: ['zone=a', 'example.com/gpu=h100'],
      },
      {
        readInventory: async () => ({ source: 'nvidia-smi', gpus: parseNvidiaSmi(h100) }),
        profileFacts: {
          gpuIndices: [],
          findBinary: async (name) => (name === 'vllm' ? '/opt/bin/vllm' : undefined),
          portFree: async () => true,
        },
      },
    );
    await runner.listen();
    cleanups.push(() => runner.close({ drainTimeout: 0 }));
    const advertised = {
      labels: { zone: 'a', 'example.com/gpu': 'h100' },
      freeGpus: [0, 1, 2, 3, 4, 5, 6, 7],
      engineKinds: ['vllm', 'sim'],
    };
    expect(runner.status().capacity).toEqual(advertised);
    await eventually(async () => (await runners(gw)).some((r) => r.id === 'labelled'), 5000, 'the runner to register');
    expect((await runners(gw)).find((r) => r.id === 'labelled')).toMatchObject({ source: 'registered', ...advertised });
  });

  it('keeps the capacity of the last heartbeat, and shows none for a runner that sends none', async () => {
    const gw = await gateway({ lostAfter: 60_000, unreachableAfterMissed: 1000 });
    const capacity = { labels: { zone: 'b' }, freeGpus: [0, 1], engineKinds: ['sim'] };
    expect(
      (
        await postJson(
          `${gw}${REGISTER_PATH}`,
          JSON.stringify({ ...registration('cap', 'http://127.0.0.1:9'), capacity }),
          auth,
        )
      ).status,
    ).toBe(200);
    expect((await runners(gw))[0]).toMatchObject(capacity);
    const beat = {
      ready: true,
      state: 'serving',
      models: ['sim-small'],
      load,
      capacity: { ...capacity, freeGpus: [1] },
    };
    expect((await postJson(`${gw}${heartbeatPath('cap')}`, JSON.stringify(beat), auth)).status).toBe(200);
    expect((await runners(gw))[0]).toMatchObject({ freeGpus: [1], labels: { zone: 'b' } });
    // A heartbeat without the field (an older runner) leaves the last one in place.
    const { capacity: _c, ...older } = beat;
    expect((await postJson(`${gw}${heartbeatPath('cap')}`, JSON.stringify(older), auth)).status).toBe(200);
    expect((await runners(gw))[0]).toMatchObject({ freeGpus: [1] });
    const bad = await postJson(
      `${gw}${heartbeatPath('cap')}`,
      JSON.stringify({ ...beat, capacity: { ...capacity, labels: { 'bad key': 'x' } } }),
      auth,
    );
    expect(bad.status).toBe(400);
    expect(bad.json.error).toMatchObject({
      code: 'GW_INVALID_REGISTRATION',
      message: expect.stringMatching(/heartbeat capacity\.labels: label key "bad key" must be/),
    });
    expect(
      (await postJson(`${gw}${REGISTER_PATH}`, JSON.stringify(registration('cap', 'http://127.0.0.1:9')), auth)).status,
    ).toBe(200);
    const view = (await runners(gw))[0];
    expect(view).not.toHaveProperty('labels');
    expect(view).not.toHaveProperty('freeGpus');
  });
});

describe('draining the whole fleet', () => {
  it('asks runners one at a time, staggered, never all at once', async () => {
    const gw = await gateway({ lostAfter: 60_000, unreachableAfterMissed: 1000 });
    for (const id of ['d1', 'd2', 'd3'])
      await postJson(`${gw}${REGISTER_PATH}`, JSON.stringify(registration(id, 'http://127.0.0.1:9')), auth);
    const res = await postJson(`${gw}/v1/runners/drain?interval=150`, '', asOperator);
    expect(res.status).toBe(202);
    expect(res.json).toEqual({ runners: ['d1', 'd2', 'd3'], intervalMs: 150 });
    const drained = async () => (await runners(gw)).filter((r) => r.state === 'drain-requested').length;
    // The first is asked after 150 to 300 ms, the last after at least 450 ms.
    expect(await drained()).toBe(0);
    const seen: number[] = [];
    await expect
      .poll(
        async () => {
          const n = await drained();
          if (seen.at(-1) !== n) seen.push(n);
          return n;
        },
        { timeout: 5000, interval: 10 },
      )
      .toBe(3);
    expect(seen).toEqual([0, 1, 2, 3]);
    expect((await postJson(`${gw}/v1/runners/drain?interval=soon`, '', asOperator)).json.error.code).toBe(
      'GW_INVALID_DRAIN',
    );
  });
});

describe('the registration address policy, over the wire', () => {
  it("refuses the metadata address, a hostname and the gateway's own port, naming the field, logged, and keeps none of them", async () => {
    const lines: string[] = [];
    const gw = await gateway({ logger: createJsonLogger({ write: (line) => lines.push(line) }) });
    const own = new URL(gw);
    for (const [url, why] of [
      ['http://169.254.169.254:80', /169\.254\.169\.254 is not in --runner-networks/],
      ['http://localhost:9000', /must be an IP address/],
      [`http://127.0.0.1:${own.port}`, /is this gateway's own listener/],
    ] as const) {
      const res = await postJson(`${gw}${REGISTER_PATH}`, JSON.stringify(registration('sink', url)), auth);
      expect(res.status, url).toBe(400);
      expect(res.json.error.code).toBe('GW_INVALID_REGISTRATION');
      expect(res.json.error.message).toMatch(/^registration url refused: /);
      expect(res.json.error.message).toMatch(why);
    }
    expect(await runners(gw)).toEqual([]);
    const refused = lines.map((l) => JSON.parse(l)).filter((l) => l.msg === 'runner registration refused');
    expect(refused).toHaveLength(3);
    expect(refused[0]).toMatchObject({
      level: 'warn',
      runner: 'sink',
      reason: expect.stringContaining('169.254.169.254'),
    });
  });

  it('refuses loopback by default, when --runner-networks does not list it', async () => {
    const gw = await gateway({ runnerNetworks: [] });
    const res = await postJson(`${gw}${REGISTER_PATH}`, JSON.stringify(registration('r1', 'http://127.0.0.1:9')), auth);
    expect(res.status).toBe(400);
    expect(res.json.error.message).toBe(
      'registration url refused: 127.0.0.1 is a loopback address; list a network holding it in --runner-networks to allow it',
    );
    const metadata = await postJson(
      `${gw}${REGISTER_PATH}`,
      JSON.stringify(registration('r1', 'http://169.254.169.254')),
      auth,
    );
    expect(metadata.json.error.message).toMatch(/169\.254\.169\.254 is a link-local address/);
  });

  it('takes a registration at every field limit, which fits the body limit', async () => {
    const gw = await gateway();
    const models = Array.from({ length: 256 }, (_, i) => `${i}-`.padEnd(256, 'm'));
    const engines = Array.from({ length: 16 }, (_, i) => ({
      kind: 'sim',
      url: `http://127.0.0.1:${20_000 + i}`,
      models,
      state: 'ready',
    }));
    const perModel = Object.fromEntries(models.map((m) => [m, { running: 65_536, waiting: 65_536 }]));
    const capacity = {
      labels: Object.fromEntries(
        Array.from({ length: 64 }, (_, i) => [`${'p'.repeat(249)}.io/${`k${i}`.padEnd(63, 'x')}`, 'v'.repeat(63)]),
      ),
      freeGpus: Array.from({ length: 256 }, (_, i) => 4095 - i),
      engineKinds: Array.from({ length: 16 }, (_, i) => `kind-${i}`.padEnd(32, 'x')),
    };
    const body = JSON.stringify({
      ...registration('widest', 'http://127.0.0.1:9'),
      models,
      engines,
      slots: 65_536,
      load: { ...load, slots: 65_536, slotsInUse: 65_536, models: perModel },
      capacity,
    });
    expect(body.length).toBeGreaterThan(1024 * 1024);
    const res = await postJson(`${gw}${REGISTER_PATH}`, body, auth);
    expect(res.status).toBe(200);
  });

  it('refuses a body over 2 MiB with 413 before parsing it', async () => {
    const gw = await gateway();
    const big = JSON.stringify({ ...registration('big', 'http://127.0.0.1:9'), padding: 'x'.repeat(2 * 1024 * 1024) });
    const res = await postJson(`${gw}${REGISTER_PATH}`, big, auth);
    expect(res.status).toBe(413);
    expect(res.json.error.code).toBe('GW_BODY_TOO_LARGE');
    expect(await runners(gw)).toEqual([]);
  });
});

describe('runner tokens as a list, and a runner id bound to its token', () => {
  const NEW = 'the-new-runner-token-000';
  const OLD = 'the-old-runner-token-111';
  const as = (token: string) => ({ authorization: `Bearer ${token}` });
  const beat = (gw: string, id: string, token: string) =>
    postJson(
      `${gw}${heartbeatPath(id)}`,
      JSON.stringify({ ready: true, state: 'serving', models: ['sim-small'], load }),
      as(token),
    );

  async function rotating(): Promise<{ gw: string; lines: string[] }> {
    const lines: string[] = [];
    const gw = await gateway({
      runnerToken: undefined,
      runnerTokens: [NEW, OLD],
      logger: createJsonLogger({ write: (line) => lines.push(line) }),
    });
    return { gw, lines };
  }

  it('accepts every token of the list, and refuses one that is on none with 401', async () => {
    const { gw } = await rotating();
    expect(
      (await postJson(`${gw}${REGISTER_PATH}`, JSON.stringify(registration('a', 'http://127.0.0.1:9')), as(NEW)))
        .status,
    ).toBe(200);
    expect(
      (await postJson(`${gw}${REGISTER_PATH}`, JSON.stringify(registration('b', 'http://127.0.0.1:9')), as(OLD)))
        .status,
    ).toBe(200);
    expect(
      (await postJson(`${gw}${REGISTER_PATH}`, JSON.stringify(registration('c', 'http://127.0.0.1:9')), auth)).status,
    ).toBe(401);
    expect((await runners(gw)).map((r) => r.id).sort()).toEqual(['a', 'b']);
  });

  it('answers 403 GW_FORBIDDEN to a heartbeat or a deregistration under another token, logged without either token', async () => {
    const { gw, lines } = await rotating();
    await postJson(`${gw}${REGISTER_PATH}`, JSON.stringify(registration('a', 'http://127.0.0.1:9')), as(OLD));
    const hb = await beat(gw, 'a', NEW);
    expect(hb.status).toBe(403);
    expect(hb.json.error).toMatchObject({ code: 'GW_FORBIDDEN', type: 'permission_error' });
    expect(hb.json.error.message).toMatch(/runner id "a" is registered under another runner token/);
    const gone = await request(`${gw}${runnerPath('a')}`, { method: 'DELETE', headers: as(NEW) });
    expect(gone.statusCode).toBe(403);
    await gone.body.dump();
    expect((await runners(gw)).map((r) => r.id)).toEqual(['a']);
    expect((await beat(gw, 'a', OLD)).status).toBe(200);
    const refusals = lines.filter((l) => l.includes('runner id bound to another token'));
    expect(refusals).toHaveLength(2);
    expect(JSON.parse(refusals[0]!)).toMatchObject({ runner: 'a', request: 'heartbeat', token: 0, boundTo: 1 });
    expect(lines.join('\n')).not.toContain(NEW);
    expect(lines.join('\n')).not.toContain(OLD);
  });

  it('lets a live runner move to a newer token by registering again, never back to an older one', async () => {
    const { gw } = await rotating();
    await postJson(`${gw}${REGISTER_PATH}`, JSON.stringify(registration('a', 'http://127.0.0.1:9')), as(OLD));
    // Restarted with the rotated token, before its old entry is lost: it comes back at once.
    expect(
      (await postJson(`${gw}${REGISTER_PATH}`, JSON.stringify(registration('a', 'http://127.0.0.1:10')), as(NEW)))
        .status,
    ).toBe(200);
    expect((await beat(gw, 'a', NEW)).status).toBe(200);
    expect((await beat(gw, 'a', OLD)).status).toBe(403);
    // A holder of the older token cannot take the id back (and with it the runner's traffic).
    const back = await postJson(
      `${gw}${REGISTER_PATH}`,
      JSON.stringify(registration('a', 'http://127.0.0.1:11')),
      as(OLD),
    );
    expect(back.status).toBe(403);
    expect(back.json.error.code).toBe('GW_FORBIDDEN');
    expect((await runners(gw)).find((r) => r.id === 'a')?.url).toBe('http://127.0.0.1:10');
  });

  it('frees the id when its runner leaves: it may then register under any token', async () => {
    const { gw } = await rotating();
    await postJson(`${gw}${REGISTER_PATH}`, JSON.stringify(registration('a', 'http://127.0.0.1:9')), as(NEW));
    const gone = await request(`${gw}${runnerPath('a')}`, { method: 'DELETE', headers: as(NEW) });
    expect(gone.statusCode).toBe(204);
    expect(
      (await postJson(`${gw}${REGISTER_PATH}`, JSON.stringify(registration('a', 'http://127.0.0.1:9')), as(OLD)))
        .status,
    ).toBe(200);
  });

  it('replaces the tokens without a restart, each binding following its token', async () => {
    const gw = createGateway({
      runnerTokens: [OLD],
      runnerNetworks: ['127.0.0.0/8'],
      heartbeatInterval: 50,
      lostAfter: 60_000,
      unreachableAfterMissed: 1000,
    });
    const { url } = await gw.listen();
    cleanups.push(() => gw.close());
    await postJson(`${url}${REGISTER_PATH}`, JSON.stringify(registration('a', 'http://127.0.0.1:9')), as(OLD));
    expect((await beat(url, 'a', NEW)).status).toBe(401);
    // Step 1: the new token joins, first; 'a' stays bound to the old one, now second.
    gw.setRunnerTokens([NEW, OLD]);
    expect((await beat(url, 'a', OLD)).status).toBe(200);
    expect((await beat(url, 'a', NEW)).status).toBe(403);
    await postJson(`${url}${REGISTER_PATH}`, JSON.stringify(registration('b', 'http://127.0.0.1:10')), as(OLD));
    // Step 2: 'a' comes back with the new token.
    expect(
      (await postJson(`${url}${REGISTER_PATH}`, JSON.stringify(registration('a', 'http://127.0.0.1:9')), as(NEW)))
        .status,
    ).toBe(200);
    // Step 3: the old token leaves. It is refused; 'b', bound to it, is bound again by its next request.
    gw.setRunnerTokens([NEW]);
    expect((await beat(url, 'a', NEW)).status).toBe(200);
    expect((await beat(url, 'b', OLD)).status).toBe(401);
    expect((await beat(url, 'b', NEW)).status).toBe(200);
    expect(
      (await postJson(`${url}${REGISTER_PATH}`, JSON.stringify(registration('c', 'http://127.0.0.1:11')), as(OLD)))
        .status,
    ).toBe(401);
  });

  it('refuses a bad token list, and tokens on a gateway started without registration', async () => {
    const gw = createGateway({ runnerTokens: [OLD], runnerNetworks: ['127.0.0.0/8'] });
    expect(() => gw.setRunnerTokens([])).toThrow('runnerTokens must be a non-empty list of tokens');
    expect(() => gw.setRunnerTokens([NEW, 'too-short'])).toThrow(
      'runnerTokens[1] must be a string of at least 16 printable ASCII characters without spaces',
    );
    expect(() => gw.setRunnerTokens([NEW, NEW])).toThrow('runnerTokens[1] repeats runnerTokens[0]');
    const off = createGateway({ runners: ['http://127.0.0.1:9'] });
    expect(() => off.setRunnerTokens([NEW])).toThrow(expect.objectContaining({ code: 'GW_INVALID_OPTION' }));
    await Promise.all([gw.close(), off.close()]);
  });

  it('frees the id when its runner is lost', async () => {
    const { gw } = await rotating();
    await postJson(`${gw}${REGISTER_PATH}`, JSON.stringify(registration('a', 'http://127.0.0.1:9')), as(NEW));
    await expect.poll(async () => (await runners(gw)).length, { timeout: 4000, interval: 20 }).toBe(0);
    expect(
      (await postJson(`${gw}${REGISTER_PATH}`, JSON.stringify(registration('a', 'http://127.0.0.1:9')), as(OLD)))
        .status,
    ).toBe(200);
  });
});
