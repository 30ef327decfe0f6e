/**
 * Serverless on real processes, one spec per property that needs them: `sluice up --serverless`
 * (a gateway with the simulated model deployed at zero and runners with no engine) takes a cold
 * start end to end, from the first calls to an engine launched and serving, and scales back to
 * zero with the engine process gone; and a deployment changed through the API rolls with no
 * failed call, one replica at a time, over gateway and runner processes. The scaling rules
 * (a burst to the maximum, one replica down per pass, retries on the other runner, dead
 * letters) are the reconciler's plan, tested on a fake clock in plan.spec.ts and
 * reconciler.spec.ts; a leader's death mid scale-up is serverless.spec.ts's, in one process.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { afterEach, beforeAll, afterAll, describe, expect, it } from 'vitest';
import { startService } from '../../../gateway/cli/entry.ts';
import type { ChildService } from '../../../placer/kernel/processes.ts';
import { asOperator, eventually, getJson, metricValue, metrics, operatorEnv } from '../../support/fleet.ts';
import { alive } from '../../support/faults.ts';
import { commandLine } from '../../support/command-line.ts';

const MODEL = 'sim-serverless';
/** The model `sluice up --serverless` deploys. */
const UP_MODEL = 'sim-small';
const RUNNER_TOKEN = 'spec-runner-token-serverless-0123';
const quiet = ['--log-level', 'warn'];
/** Short windows and delays, so a whole cycle takes seconds; the rules are the defaults'. */
const FAST = ['--reconcile-period', '300ms', '--scale-stable-window', '1s', '--scale-panic-window', '500ms'];

let dir: string;
let started: ChildService[] = [];
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'sluice-serverless-spec-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));
afterEach(async () => {
  await Promise.all(started.map((s) => s.stop('SIGTERM', 10_000).catch(() => undefined)));
  started = [];
});

async function gateway(file: string): Promise<ChildService> {
  const values = { deployments: file, 'heartbeat-interval': '200ms', 'runner-networks': '127.0.0.0/8' };
  const gw = await startService(commandLine('gateway', values, [...FAST, ...quiet]), {
    env: { ...operatorEnv(), SLUICE_RUNNER_TOKEN: RUNNER_TOKEN },
  });
  started.push(gw);
  return gw;
}

async function runner(id: string, gateways: readonly ChildService[]): Promise<ChildService> {
  const values = { id, slots: 8, gateway: gateways.map((g) => g.url).join(','), 'drain-timeout': '5s' };
  const r = await startService(commandLine('runner', values, quiet), {
    env: { ...process.env, SLUICE_RUNNER_TOKEN: RUNNER_TOKEN },
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
  events: { from: number; to: number; reason: string }[];
}

async function status(gw: ChildService, model = MODEL): Promise<Status> {
  const res = await getJson(`${gw.url}/v1/deployments/${model}`, asOperator);
  expect(res.status).toBe(200);
  return res.json.status as Status;
}

/** PUTs `deployment` to `gw` as the operator, and checks it was taken. */
async function putDeployment(gw: ChildService, deployment: { model: string } & Record<string, unknown>): Promise<void> {
  const res = await request(`${gw.url}/v1/deployments/${deployment.model}`, {
    method: 'PUT',
    headers: { ...asOperator, 'content-type': 'application/json' },
    body: JSON.stringify(deployment),
  });
  await res.body.dump();
  expect(res.statusCode).toBeLessThan(300);
}

/** The registered runners' URLs, once there are `count`. */
async function registered(gw: ChildService, count: number): Promise<string[]> {
  const urls = async (): Promise<string[]> =>
    ((await getJson(`${gw.url}/v1/runners`, asOperator)).json.data as { url: string }[]).map((r) => r.url);
  await eventually(async () => (await urls()).length === count, 30_000, `${count} runners registered`);
  return urls();
}

const chat = (model: string, extra: Record<string, unknown> = {}) =>
  JSON.stringify({ model, messages: [{ role: 'user', content: 'hello' }], max_tokens: 20, ...extra });

/** A streamed call, read to its end: the status, the cold-start header, and whether the stream ended well. */
async function streamed(
  gw: ChildService,
  model: string,
): Promise<{ status: number; coldStart?: string; ended: boolean }> {
  const res = await request(`${gw.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: chat(model, { stream: true }),
  });
  const text = await res.body.text();
  const cold = res.headers['sluice-cold-start'];
  return {
    status: res.statusCode,
    ...(typeof cold === 'string' ? { coldStart: cold } : {}),
    ended: text.includes('data: [DONE]') && !text.includes('"error"'),
  };
}

/** The engine pids the runners at `urls` show in /status. */
async function enginePids(urls: readonly string[]): Promise<number[]> {
  const pids: number[] = [];
  for (const url of urls) {
    const s = (await getJson(`${url}/status`)).json as { engines: { supervised?: { pid?: number } }[] };
    for (const e of s.engines) if (e.supervised?.pid) pids.push(e.supervised.pid);
  }
  return pids;
}

describe('sluice up --serverless', () => {
  it('deploys the simulated model at zero; the first calls wait while an engine starts and succeed; warm, a call does not wait; idle, it is back at zero with the engine gone', async () => {
    const up = await startService(
      ['up', '--serverless', '--port', '0', '--runners', '1', '--startup-delay-ms', '300', ...FAST, ...quiet],
      { env: operatorEnv() },
    );
    started.push(up);
    const deployments = await getJson(`${up.url}/v1/deployments`, asOperator);
    expect(deployments.json.data).toMatchObject([
      {
        model: UP_MODEL,
        minReplicas: 0,
        maxReplicas: 1,
        profile: { kind: 'sim', args: ['--startup-delay-ms', '300'] },
      },
    ]);
    const runners = await registered(up, 1);
    expect(await status(up, UP_MODEL)).toMatchObject({ reconciler: 'leading', wanted: 0, ready: 0, starting: 0 });
    expect(await enginePids(runners)).toEqual([]);
    // Listed while no runner serves it: a client that checks the list first finds it.
    expect((await getJson(`${up.url}/v1/models`)).json.data.map((m: { id: string }) => m.id)).toContain(UP_MODEL);
    expect((await getJson(`${up.url}/v1/models/${UP_MODEL}`)).status).toBe(200);

    // Two calls at once from zero: both wait for the engine's start (300 ms of loading at least), neither fails.
    const first = await Promise.all([streamed(up, UP_MODEL), streamed(up, UP_MODEL)]);
    expect(first.map((a) => [a.status, a.ended])).toEqual([
      [200, true],
      [200, true],
    ]);
    for (const a of first) expect(Number(a.coldStart)).toBeGreaterThanOrEqual(300);
    const after = await status(up, UP_MODEL);
    expect(after).toMatchObject({ wanted: 1, ready: 1 });
    // Why, in words: the waiting call itself, or its concurrency once a sample has counted it.
    expect(after.events[0], JSON.stringify(after.events)).toMatchObject({
      from: 0,
      to: 1,
      reason: expect.stringMatching(/^(a call is waiting with no replica|(panic: )?[\d.]+ calls over)/),
    });
    // A warm call after it does not wait.
    expect((await streamed(up, UP_MODEL)).coldStart).toBeUndefined();
    const page = await metrics(up);
    expect(metricValue(page, 'sluice_deployment_cold_starts_total', { model: UP_MODEL })).toBe(1);
    expect(metricValue(page, 'sluice_deployment_replicas', { model: UP_MODEL, state: 'ready' })).toBe(1);
    const pids = await enginePids(runners);
    expect(pids).toHaveLength(1);
    expect(pids.every(alive)).toBe(true);

    // Idle past a scale-down delay made short through the API (the profile, and so the replica, unchanged).
    await putDeployment(up, {
      model: UP_MODEL,
      profile: { kind: 'sim', args: ['--startup-delay-ms', '300'] },
      minReplicas: 0,
      maxReplicas: 1,
      targetConcurrency: 4,
      scaleDownDelay: 300,
    });
    await eventually(
      async () => {
        const s = await status(up, UP_MODEL);
        return s.wanted === 0 && s.ready + s.starting + s.draining === 0;
      },
      30_000,
      'scale to zero',
    );
    await eventually(() => pids.every((pid) => !alive(pid)), 15_000, 'the engine process gone');
    const downs = (await status(up, UP_MODEL)).events.filter((e) => e.to < e.from);
    expect(downs.map((e) => e.from - e.to)).toEqual(downs.map(() => 1));
    expect(downs.at(-1)).toMatchObject({ to: 0 });
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
    const put = (tokens: number) =>
      putDeployment(gw, {
        model: MODEL,
        profile: { kind: 'sim', args: ['--startup-delay-ms', '150', '--output-tokens', String(tokens)] },
        minReplicas: 2,
        maxReplicas: 2,
      });
    const call = async (): Promise<{ status: number; tokens?: number }> => {
      const res = await request(`${gw.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: chat(MODEL, { max_tokens: undefined }),
      });
      const json = (await res.body.json().catch(() => ({}))) as { usage?: { completion_tokens?: number } };
      return {
        status: res.statusCode,
        ...(json.usage?.completion_tokens === undefined ? {} : { tokens: json.usage.completion_tokens }),
      };
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
      rolled =
        s.ready === 2 &&
        s.starting === 0 &&
        s.draining === 0 &&
        s.outdated === 0 &&
        s.replicas.every((r) => !first.includes(r.replica));
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
    expect(JSON.stringify((await getJson(`${gw.url}/v1/deployments/${MODEL}`, asOperator)).json)).not.toMatch(
      /revision/,
    );
  }, 90_000);
});
