/**
 * Runners that register themselves, against a real gateway over real sockets: the token, the
 * pool shared with static runners, two-stage expiry, drain and deregistration. The runner side
 * of the wire is played by hand here so each answer can be checked.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { request } from 'undici';
import { createGateway } from '../../gateway/server.ts';
import { createJsonLogger } from '../../placer/kernel/index.ts';
import type { GatewayOptions } from '../../gateway/options.ts';
import { createSimEngine } from '../../runner/engines/sim/server.ts';
import { REGISTER_PATH, heartbeatPath, runnerPath } from '../../runner/protocol.ts';
import type { RunnerRegistration } from '../../runner/protocol.ts';
import { createRunner } from '../../runner/server.ts';
import { chatBody, postJson } from '../support/fleet.ts';

const TOKEN = 'a-runner-token-long-enough';
const auth = { authorization: `Bearer ${TOKEN}` };
const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!().catch(() => {});
});

async function realRunner(id: string): Promise<string> {
  const engine = createSimEngine({ ttftMs: 0, itlMs: 0 });
  const { url: engineUrl } = await engine.listen();
  cleanups.push(() => engine.close());
  const runner = createRunner({ engine: engineUrl, engineKind: 'sim', id });
  const { url } = await runner.listen();
  cleanups.push(() => runner.close({ drainTimeout: 0 }));
  return url;
}

async function gateway(options: Partial<GatewayOptions> = {}): Promise<string> {
  const gw = createGateway({ runnerToken: TOKEN, runnerNetworks: ['127.0.0.0/8'], heartbeatInterval: 50, unreachableAfterMissed: 2, lostAfter: 400, placerTimeout: 300, ...options });
  const { url } = await gw.listen();
  cleanups.push(() => gw.close());
  return url;
}

const load = { slotsInUse: 0, slots: 4, queue: 0, models: {} };
function registration(id: string, url: string): RunnerRegistration {
  return { id, url, version: 'test', engines: [], models: ['sim-small'], slots: 4, gpus: { gpus: [], source: 'none' }, ready: true, load };
}

const runners = async (gw: string) => ((await (await request(`${gw}/v1/runners`)).body.json()) as { data: any[] }).data;

describe('runner registration', () => {
  it('refuses a wrong or missing token with 401, logged without the token, and accepts the right one', async () => {
    const lines: string[] = [];
    const gw = await gateway({ logger: createJsonLogger({ write: (line) => lines.push(line) }) });
    const body = JSON.stringify(registration('r1', 'http://127.0.0.1:9'));
    expect((await postJson(`${gw}${REGISTER_PATH}`, body, { authorization: 'Bearer wrong' })).status).toBe(401);
    expect((await postJson(`${gw}${REGISTER_PATH}`, body)).status).toBe(401);
    expect(lines.filter((l) => l.includes('runner token refused'))).toHaveLength(2);
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
    expect((await postJson(`${gw}${REGISTER_PATH}`, JSON.stringify(registration('reg-1', registeredUrl)), auth)).status).toBe(200);
    const seen = new Set<unknown>();
    for (let i = 0; i < 8; i++) seen.add((await postJson(`${gw}/v1/chat/completions`, chatBody())).headers['sluice-runner-id']);
    expect([...seen].sort()).toEqual(['reg-1', 'static-1']);
    const list = await runners(gw);
    expect(list.map((r) => [r.id, r.source]).sort()).toEqual([[new URL(staticUrl).host, 'static'], ['reg-1', 'registered']]);
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
    const hb = await postJson(`${gw}${heartbeatPath('quiet')}`, JSON.stringify({ ready: true, state: 'serving', models: ['sim-small'], load }), auth);
    expect(hb.status).toBe(404);
  });

  it('drains a runner on request: no more calls, and its next heartbeat is told to drain', async () => {
    const a = await realRunner('a');
    const b = await realRunner('b');
    const gw = await gateway({ lostAfter: 60_000, unreachableAfterMissed: 1000 });
    for (const [id, url] of [['a', a], ['b', b]] as const) await postJson(`${gw}${REGISTER_PATH}`, JSON.stringify(registration(id, url)), auth);
    const drain = await postJson(`${gw}/v1/runners/a/drain`, '', auth);
    expect(drain.status).toBe(202);
    expect(drain.json.state).toBe('drain-requested');
    for (let i = 0; i < 6; i++) expect((await postJson(`${gw}/v1/chat/completions`, chatBody())).headers['sluice-runner-id']).toBe('b');
    const hb = await postJson(`${gw}${heartbeatPath('a')}`, JSON.stringify({ ready: true, state: 'serving', models: ['sim-small'], load }), auth);
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
    await postJson(`${gw}/v1/runners/a/drain`, '', auth);
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

describe('draining the whole fleet', () => {
  it('asks runners one at a time, staggered, never all at once', async () => {
    const gw = await gateway({ lostAfter: 60_000, unreachableAfterMissed: 1000 });
    for (const id of ['d1', 'd2', 'd3']) await postJson(`${gw}${REGISTER_PATH}`, JSON.stringify(registration(id, 'http://127.0.0.1:9')), auth);
    const res = await postJson(`${gw}/v1/runners/drain?interval=150`, '', auth);
    expect(res.status).toBe(202);
    expect(res.json).toEqual({ runners: ['d1', 'd2', 'd3'], intervalMs: 150 });
    const drained = async () => (await runners(gw)).filter((r) => r.state === 'drain-requested').length;
    // The first is asked after 150 to 300 ms, the last after at least 450 ms.
    expect(await drained()).toBe(0);
    const seen: number[] = [];
    await expect
      .poll(async () => {
        const n = await drained();
        if (seen.at(-1) !== n) seen.push(n);
        return n;
      }, { timeout: 5000, interval: 10 })
      .toBe(3);
    expect(seen).toEqual([0, 1, 2, 3]);
    expect((await postJson(`${gw}/v1/runners/drain?interval=soon`, '', auth)).json.error.code).toBe('GW_INVALID_DRAIN');
  });
});
