/**
 * Serverless on real processes: gateways started with `sluice gateway` and a deployments file,
 * runners started with no engine that register with them, and simulated engines the runners
 * launch when the gateway's reconciler orders them. Each case is one of issue 14's: scale from
 * zero on the first call, a burst to the maximum with no failed call, back to zero after the idle
 * delay with the engine processes gone, a start that fails retried on the other runner and, when
 * every attempt fails, dead-lettered with its reason; and two gateways on one redis-server, the
 * leader killed mid scale-up, the other finishing it.
 */
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, request } from 'undici';
import { afterEach, beforeAll, afterAll, describe, expect, it } from 'vitest';
import { SLUICE_BIN, startService } from '../../../placer/kernel/processes.ts';
import type { ChildService } from '../../../placer/kernel/processes.ts';
import { asOperator, eventually, getJson, metricValue, metrics, operatorEnv } from '../../support/fleet.ts';
import { startRedis } from '../../support/redis.ts';
import type { RedisServer } from '../../support/redis.ts';

const MODEL = 'sim-serverless';
const RUNNER_TOKEN = 'spec-runner-token-serverless-0123';
const quiet = ['--log-level', 'warn'];
/** Short windows and delays, so a whole cycle takes seconds; the rules are the defaults'. */
const FAST = ['--reconcile-period', '300ms', '--scale-stable-window', '2s', '--scale-panic-window', '500ms', '--heartbeat-interval', '200ms', '--runner-networks', '127.0.0.0/8'];

let dir: string;
let started: ChildService[] = [];
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'sluice-serverless-spec-'));
  // An engine binary for the sim kind that fails where SPEC_ENGINE_FAILS is set (the runner's
  // environment reaches its engine), and is the real simulated engine elsewhere.
  const script = join(dir, 'sim-or-fail');
  writeFileSync(script, `#!/bin/sh\nif [ -n "$SPEC_ENGINE_FAILS" ]; then echo "CUDA error: out of memory (spec)"; exit 1; fi\nexec "${process.execPath}" "${SLUICE_BIN}" "$@"\n`);
  chmodSync(script, 0o755);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));
afterEach(async () => {
  await Promise.all(started.map((s) => s.stop('SIGTERM', 10_000).catch(() => undefined)));
  started = [];
});

interface DeploymentFields {
  minReplicas?: number;
  maxReplicas?: number;
  targetConcurrency?: number;
  scaleDownDelay?: number;
  engineArgs?: string[];
  binary?: string;
}

function deploymentsFile(name: string, fields: DeploymentFields): string {
  const { engineArgs = [], binary, ...rest } = fields;
  const file = join(dir, `${name}.json`);
  writeFileSync(file, JSON.stringify([{ model: MODEL, profile: { kind: 'sim', args: engineArgs, ...(binary ? { binary } : {}) }, ...rest }]));
  return file;
}

async function gateway(file: string, extra: readonly string[] = [], env: NodeJS.ProcessEnv = {}): Promise<ChildService> {
  const gw = await startService(['gateway', '--port', '0', '--deployments', file, ...FAST, ...quiet, ...extra], { env: { ...operatorEnv(), SLUICE_RUNNER_TOKEN: RUNNER_TOKEN, ...env } });
  started.push(gw);
  return gw;
}

async function runner(id: string, gateways: readonly ChildService[], env: NodeJS.ProcessEnv = {}): Promise<ChildService> {
  // The runners' operator allows the spec's engine binary for kind sim (an order may name no other).
  const allow = ['--engine-binary', `sim=${join(dir, 'sim-or-fail')}`];
  const r = await startService(['runner', '--port', '0', '--id', id, '--slots', '8', '--gateway', gateways.map((g) => g.url).join(','), '--drain-timeout', '5s', ...allow, ...quiet], {
    env: { ...process.env, SLUICE_RUNNER_TOKEN: RUNNER_TOKEN, ...env },
  });
  started.push(r);
  return r;
}

interface Status {
  reconciler: string;
  wanted: number;
  starting: number;
  ready: number;
  draining: number;
  outdated: number;
  replicas: { replica: string; runner: string; state: string }[];
  pending: { attempts: { runner: string; reason: string; output?: string[] }[]; lastReason: string }[];
  deadLettered: { attempts: { runner: string; reason: string; output?: string[] }[] }[];
  blocked?: string;
  events: { from: number; to: number; reason: string }[];
}

async function status(gw: ChildService): Promise<Status> {
  const res = await getJson(`${gw.url}/v1/deployments/${MODEL}`, asOperator);
  expect(res.status).toBe(200);
  return res.json.status as Status;
}

async function registered(gw: ChildService, count: number): Promise<void> {
  await eventually(async () => (await getJson(`${gw.url}/v1/runners`, asOperator)).json.data.length === count, 30_000, `${count} runners registered`);
}

const chat = (extra: Record<string, unknown> = {}) => JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hello' }], max_tokens: 20, ...extra });

/** A streamed call, read to its end: the status, the cold-start header, and whether the stream ended well. */
async function streamed(gw: ChildService, dispatcher?: Agent): Promise<{ status: number; coldStart?: string; ended: boolean }> {
  const res = await request(`${gw.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: chat({ stream: true }), ...(dispatcher ? { dispatcher } : {}) });
  const text = await res.body.text();
  const cold = res.headers['sluice-cold-start'];
  return { status: res.statusCode, ...(typeof cold === 'string' ? { coldStart: cold } : {}), ended: text.includes('data: [DONE]') && !text.includes('"error"') };
}

/** The engine pids the runners show in /status. */
async function enginePids(runners: readonly ChildService[]): Promise<number[]> {
  const pids: number[] = [];
  for (const r of runners) {
    const s = (await getJson(`${r.url}/status`)).json as { engines: { supervised?: { pid?: number } }[] };
    for (const e of s.engines) if (e.supervised?.pid) pids.push(e.supervised.pid);
  }
  return pids;
}

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

describe('serverless: one gateway, runners with no engine', () => {
  it('scales a deployment at zero to one on the first call, which succeeds and says it waited', async () => {
    const gw = await gateway(deploymentsFile('first-call', { maxReplicas: 2, engineArgs: ['--startup-delay-ms', '600'] }));
    const runners = [await runner('sl-a', [gw]), await runner('sl-b', [gw])];
    await registered(gw, 2);
    expect(await status(gw)).toMatchObject({ reconciler: 'leading', wanted: 0, ready: 0, starting: 0 });
    expect(await enginePids(runners)).toEqual([]);
    // Listed while no runner serves it: a client that checks the list first finds it.
    expect((await getJson(`${gw.url}/v1/models`)).json.data.map((m: { id: string }) => m.id)).toContain(MODEL);
    expect((await getJson(`${gw.url}/v1/models/${MODEL}`)).status).toBe(200);

    const first = await streamed(gw);
    expect(first.status).toBe(200);
    expect(first.ended).toBe(true);
    // It waited for the engine's start (600 ms of loading at least).
    expect(Number(first.coldStart)).toBeGreaterThanOrEqual(600);
    const after = await status(gw);
    expect(after).toMatchObject({ wanted: 1, ready: 1 });
    // Why, in words: the waiting call itself, or its concurrency once a sample has counted it.
    expect(after.events[0], JSON.stringify(after.events)).toMatchObject({ from: 0, to: 1, reason: expect.stringMatching(/^(a call is waiting with no replica|(panic: )?[\d.]+ calls over)/) });
    // A warm call after it does not wait.
    expect((await streamed(gw)).coldStart).toBeUndefined();
    const page = await metrics(gw);
    expect(metricValue(page, 'sluice_deployment_cold_starts_total', { model: MODEL })).toBe(1);
    expect(metricValue(page, 'sluice_deployment_replicas', { model: MODEL, state: 'ready' })).toBe(1);
  }, 90_000);

  it('scales out to the maximum on a burst with no failed call, then back to zero with the engines gone', async () => {
    const gw = await gateway(deploymentsFile('burst', { maxReplicas: 2, targetConcurrency: 1, scaleDownDelay: 1500, engineArgs: ['--startup-delay-ms', '300', '--itl-ms', '60'] }));
    const runners = [await runner('sl-a', [gw]), await runner('sl-b', [gw])];
    await registered(gw, 2);
    const dispatcher = new Agent({ connections: 32 });
    try {
      // Two waves of six calls of about 1.2 s each: the first wave scales it out from zero.
      const wave = () => Promise.all(Array.from({ length: 6 }, () => streamed(gw, dispatcher)));
      const answers = [...(await wave()), ...(await wave())];
      expect(answers.map((a) => [a.status, a.ended])).toEqual(answers.map(() => [200, true]));
      const out = await status(gw);
      expect(out.wanted).toBe(2);
      expect(out.events.some((e) => e.to === 2)).toBe(true);
      await eventually(async () => (await status(gw)).ready === 2, 15_000, 'two ready replicas');
      const pids = await enginePids(runners);
      expect(pids).toHaveLength(2);
      expect(pids.every(alive)).toBe(true);

      // Idle past the scale-down delay: one replica at a time, down to zero, engines stopped.
      await eventually(async () => {
        const s = await status(gw);
        return s.wanted === 0 && s.ready + s.starting + s.draining === 0;
      }, 30_000, 'scale to zero');
      await eventually(() => pids.every((pid) => !alive(pid)), 15_000, 'the engine processes gone');
      const downs = (await status(gw)).events.filter((e) => e.to < e.from);
      expect(downs.map((e) => e.from - e.to)).toEqual(downs.map(() => 1));
      expect(downs.at(-1)).toMatchObject({ to: 0 });
    } finally {
      await dispatcher.close();
    }
  }, 120_000);

  it('retries a start that fails on the other runner', async () => {
    const binary = join(dir, 'sim-or-fail');
    const gw = await gateway(deploymentsFile('retry', { minReplicas: 1, maxReplicas: 1, binary }), ['--start-backoff', '200ms', '--start-backoff-cap', '400ms', '--engine-binary', `sim=${binary}`]);
    // The first by id gets the first attempt; its engines fail at once.
    await runner('sl-a', [gw], { SPEC_ENGINE_FAILS: '1' });
    await runner('sl-b', [gw]);
    await registered(gw, 2);
    await eventually(async () => (await status(gw)).ready === 1, 30_000, 'a ready replica');
    const s = await status(gw);
    expect(s.replicas.map((r) => [r.runner, r.state])).toEqual([['sl-b', 'ready']]);
    const page = await metrics(gw);
    expect(metricValue(page, 'sluice_replica_start_failures_total', { model: MODEL })).toBeGreaterThanOrEqual(1);
    // The call goes to the replica that started.
    expect((await streamed(gw)).status).toBe(200);
  }, 90_000);

  it('dead-letters a start whose every attempt fails, with each attempt\'s reason and output, and starts no more', async () => {
    const binary = join(dir, 'sim-or-fail');
    const gw = await gateway(deploymentsFile('dead', { minReplicas: 1, maxReplicas: 1, binary }), ['--start-backoff', '100ms', '--start-backoff-cap', '200ms', '--start-attempts', '3', '--engine-binary', `sim=${binary}`]);
    await runner('sl-a', [gw], { SPEC_ENGINE_FAILS: '1' });
    await runner('sl-b', [gw], { SPEC_ENGINE_FAILS: '1' });
    await registered(gw, 2);
    await eventually(async () => (await status(gw)).deadLettered.length === 1, 30_000, 'a dead-lettered start');
    const s = await status(gw);
    const [letter] = s.deadLettered;
    expect(letter!.attempts).toHaveLength(3);
    // Each failure with its runner, the engine's exit and its last words. (Which runners: the
    // retry spec above shows a retry moving to the other one; a runner late with its heartbeats
    // on a loaded machine is not placeable, and the retry may then go back to the first.)
    for (const attempt of letter!.attempts) expect(['sl-a', 'sl-b']).toContain(attempt.runner);
    for (const attempt of letter!.attempts) {
      expect(attempt.reason).toMatch(/exited with code 1/);
      expect(attempt.output?.join('\n')).toContain('CUDA error: out of memory (spec)');
    }
    expect(s.blocked).toBeDefined();
    expect(s.pending).toEqual([]);
    // Nothing loops: the block holds across passes.
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const later = await status(gw);
    expect([later.deadLettered.length, later.pending.length, later.ready + later.starting]).toEqual([1, 0, 0]);
  }, 90_000);
});

describe('serverless: a deployment changed through the API', () => {
  it('rolls to the new profile, one replica at a time, with no failed call', async () => {
    const none = join(dir, 'none.json');
    writeFileSync(none, '[]');
    const gw = await gateway(none);
    const runners = await Promise.all(['sl-r1', 'sl-r2', 'sl-r3'].map((id) => runner(id, [gw])));
    await registered(gw, 3);
    // The answer's length tells which profile's engine served a call.
    const put = async (tokens: number): Promise<void> => {
      const body = { model: MODEL, profile: { kind: 'sim', args: ['--startup-delay-ms', '400', '--output-tokens', String(tokens)] }, minReplicas: 2, maxReplicas: 2 };
      const res = await request(`${gw.url}/v1/deployments/${MODEL}`, { method: 'PUT', headers: { ...asOperator, 'content-type': 'application/json' }, body: JSON.stringify(body) });
      await res.body.dump();
      expect(res.statusCode).toBeLessThan(300);
    };
    const call = async (): Promise<{ status: number; tokens?: number }> => {
      const res = await request(`${gw.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: chat({ max_tokens: undefined }) });
      const json = (await res.body.json().catch(() => ({}))) as { usage?: { completion_tokens?: number } };
      return { status: res.statusCode, ...(json.usage?.completion_tokens === undefined ? {} : { tokens: json.usage.completion_tokens }) };
    };
    await put(3);
    await eventually(async () => (await status(gw)).ready === 2, 30_000, 'two ready replicas');
    const first = (await status(gw)).replicas.map((r) => r.replica);
    expect((await call()).tokens).toBe(3);

    await put(5);
    // Calls all through the roll, one after another (bounded in count and time).
    const answers: { status: number; tokens?: number }[] = [];
    const until = Date.now() + 45_000;
    let rolled = false;
    while (!rolled && Date.now() < until && answers.length < 2_000) {
      answers.push(await call());
      const s = await status(gw);
      expect(s.ready).toBeGreaterThanOrEqual(2);
      rolled = s.ready === 2 && s.starting === 0 && s.draining === 0 && s.outdated === 0 && s.replicas.every((r) => !first.includes(r.replica));
    }
    expect(rolled).toBe(true);
    expect(answers.filter((a) => a.status !== 200)).toEqual([]);
    expect(new Set(answers.map((a) => a.tokens))).toEqual(new Set([3, 5]));
    for (let i = 0; i < 4; i++) expect((await call()).tokens).toBe(5);
    const page = await metrics(gw);
    expect(metricValue(page, 'sluice_replicas_replaced_total', { model: MODEL })).toBe(2);
    // The revision rides the heartbeat only: no status route shows it.
    const hosted = [];
    for (const r of runners) {
      const shown = (await getJson(`${r.url}/status`)).json as { hosted?: Record<string, unknown> };
      if (shown.hosted) hosted.push(shown.hosted);
    }
    expect(hosted.length).toBeGreaterThanOrEqual(2);
    for (const h of hosted) expect(h).not.toHaveProperty('revision');
    expect(JSON.stringify((await getJson(`${gw.url}/v1/deployments/${MODEL}`, asOperator)).json)).not.toMatch(/revision/);
  }, 90_000);
});

describe('serverless: two gateways on one redis-server', () => {
  let redis: RedisServer;
  beforeAll(async () => {
    redis = await startRedis();
  }, 30_000);
  afterAll(async () => {
    await redis?.stop();
  });

  it('the other gateway takes over when the leader is killed mid scale-up and finishes it', async () => {
    const file = deploymentsFile('shared', { minReplicas: 2, maxReplicas: 2, engineArgs: ['--startup-delay-ms', '3000'] });
    const shared = ['--store', redis.url, '--lease-ttl', '1s'];
    const a = await gateway(file, [...shared, '--gateway-id', 'gw-a']);
    const b = await gateway(file, [...shared, '--gateway-id', 'gw-b']);
    await runner('sl-a', [a, b]);
    await runner('sl-b', [a, b]);
    await registered(a, 2);
    await registered(b, 2);
    // Whichever took the lease orders both replicas; the engines take 3 s to load.
    let leader: ChildService | undefined;
    await eventually(async () => {
      for (const gw of [a, b]) if ((await status(gw)).reconciler === 'leading' && (await status(gw)).starting === 2) leader = gw;
      return leader !== undefined;
    }, 15_000, 'a leader with two replicas starting');
    const survivor = leader === a ? b : a;
    // The follower answers with the leader's status, as published.
    expect((await status(survivor)).wanted).toBe(2);
    leader!.child.kill('SIGKILL');
    await eventually(async () => (await status(survivor)).reconciler === 'leading', 10_000, 'the survivor leading');
    // It adopted the replicas starting rather than stopping them, and they become ready.
    await eventually(async () => (await status(survivor)).ready === 2, 20_000, 'two ready replicas under the new leader');
    const s = await status(survivor);
    expect(new Set(s.replicas.map((r) => r.runner))).toEqual(new Set(['sl-a', 'sl-b']));
    expect((await streamed(survivor)).status).toBe(200);
  }, 120_000);
});

describe('sluice up --serverless', () => {
  it('starts runners with no engine and the simulated model at zero, and the first call starts one', async () => {
    const up = await startService(['up', '--serverless', '--port', '0', '--runners', '1', '--startup-delay-ms', '300', ...quiet], { env: operatorEnv() });
    started.push(up);
    const deployments = await getJson(`${up.url}/v1/deployments`, asOperator);
    expect(deployments.json.data).toMatchObject([{ model: 'sim-small', minReplicas: 0, maxReplicas: 1, profile: { kind: 'sim', args: ['--startup-delay-ms', '300'] } }]);
    await eventually(async () => (await getJson(`${up.url}/v1/runners`, asOperator)).json.data.length === 1, 30_000, 'the runner registered');
    expect((await getJson(`${up.url}/v1/deployments/sim-small`, asOperator)).json.status).toMatchObject({ ready: 0, starting: 0 });
    const res = await request(`${up.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'sim-small', messages: [{ role: 'user', content: 'hi' }] }) });
    expect(res.statusCode).toBe(200);
    await res.body.text();
    expect(Number(res.headers['sluice-cold-start'])).toBeGreaterThanOrEqual(300);
    expect((await getJson(`${up.url}/v1/deployments/sim-small`, asOperator)).json.status).toMatchObject({ ready: 1 });
  }, 60_000);
});
