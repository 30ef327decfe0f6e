/**
 * Fault: detached results fill the store (issue 10, item 8). Before, the in-memory store
 * evicted the oldest results to make room, so any client could flush everyone else's within
 * their TTL, and the Redis store had no byte bound at all. Real processes: a sim engine, a
 * runner, gateways with a small --max-stored-bytes, in memory and on one Redis.
 *
 * What must hold: results stay readable until their TTL; a new detached call is refused with
 * 503 GW_STORE_FULL (and Retry-After) while one more result would not fit, and never reaches
 * the engine; calls sent together are admitted only as far as room for their results can be
 * reserved, so no admitted result is refused at its end; room comes back as results expire;
 * gateways on one Redis share the bound; the refusals show in /metrics.
 */
import { request } from 'undici';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startService } from '../../gateway/cli/entry.ts';
import type { ChildService } from '../../placer/kernel/processes.ts';
import { chatBody, eventually, metrics, metricValue, operatorEnv, postJson, startFleet } from '../support/fleet.ts';
import type { Fleet } from '../support/fleet.ts';
import { startRedis } from '../support/redis.ts';
import type { RedisServer } from '../support/redis.ts';
import { commandLine } from '../support/command-line.ts';

const ASYNC = { prefer: 'respond-async' };
/** What the bound counts per finished call besides its body (RECORD_OVERHEAD_BYTES). */
const OVERHEAD = 1024;
const MAX_RESULT = 8 * 1024;
/** Room for the admission headroom (one result of MAX_RESULT) plus a few ~2 KiB results. */
const MAX_STORED = MAX_RESULT + OVERHEAD + 12 * 1024;
const body = () => chatBody({ ignore_eos: true, max_tokens: 200 });

let fleet: Fleet;
let redis: RedisServer;
const gateways: ChildService[] = [];

beforeAll(async () => {
  [fleet, redis] = await Promise.all([
    startFleet({
      nodes: 1,
      engineArgs: ['--ttft-ms', '0', '--itl-ms', '0.5', '--max-num-seqs', '16'],
      runnerArgs: ['--slots', '16'],
    }),
    startRedis(),
  ]);
});

afterEach(async () => {
  await Promise.all(gateways.splice(0).map((g) => g.stop('SIGTERM', 5000)));
});

afterAll(async () => {
  await fleet?.stop();
  await redis?.stop();
});

/** A gateway of its own over the fleet's runner, with a small store bound. */
async function gateway(extra: readonly string[] = []): Promise<string> {
  const values = {
    runners: fleet.nodes[0]!.runner.url,
    'log-level': 'warn',
    'max-result-bytes': MAX_RESULT,
    'max-stored-bytes': MAX_STORED,
  };
  const started = await startService(commandLine('gateway', values, extra), { env: operatorEnv() });
  gateways.push(started);
  return started.url;
}

async function get(url: string): Promise<{ status: number; json: any; text: string }> {
  const res = await request(url);
  const text = await res.body.text();
  return { status: res.statusCode, json: text.startsWith('{') ? JSON.parse(text) : undefined, text };
}

/** Posts detached calls one at a time, each to its end, until one is refused; returns both. */
async function fill(
  url: string,
): Promise<{ kept: Array<{ id: string; result: string }>; refusal: Awaited<ReturnType<typeof postJson>> }> {
  const kept: Array<{ id: string; result: string }> = [];
  for (let i = 0; i < 40; i++) {
    const answer = await postJson(`${url}/v1/chat/completions`, body(), ASYNC);
    if (answer.status !== 202) return { kept, refusal: answer };
    const id = answer.json.id as string;
    await eventually(
      async () => (await get(`${url}/v1/calls/${id}`)).json.status !== 'running',
      10_000,
      `call ${id} to end`,
    );
    expect((await get(`${url}/v1/calls/${id}`)).json.status).toBe('succeeded');
    kept.push({ id, result: (await get(`${url}/v1/calls/${id}/result`)).text });
  }
  throw new Error('the store never filled');
}

async function engineReceived(): Promise<number> {
  return metricValue(await metrics(fleet.nodes[0]!.engine), 'sluice_sim_requests_total');
}

describe('fault: detached results fill the store', () => {
  it('keeps every result until its TTL and refuses the next call up front with 503 GW_STORE_FULL (memory store)', async () => {
    const url = await gateway(['--result-ttl', '10s']);
    const received = await engineReceived();
    const { kept, refusal } = await fill(url);
    expect(kept.length).toBeGreaterThanOrEqual(3);
    expect(refusal.status).toBe(503);
    expect(refusal.json.error).toMatchObject({ code: 'GW_STORE_FULL', type: 'service_unavailable_error' });
    expect(refusal.json.error.message).toContain(`maxStoredBytes ${MAX_STORED}`);
    expect(refusal.headers['retry-after']).toBe('1');
    // Nothing was pushed out to make room: the first result reads as it did.
    for (const { id, result } of kept) expect((await get(`${url}/v1/calls/${id}/result`)).text).toBe(result);
    // The refused call never reached the engine.
    expect(await engineReceived()).toBe(received + kept.length);
    const page = await metrics({ url });
    expect(metricValue(page, 'sluice_calls_rejected_total', { code: 'GW_STORE_FULL' })).toBe(1);
    const stored = metricValue(page, 'sluice_store_bytes');
    expect(stored).toBeGreaterThan(MAX_STORED - MAX_RESULT - OVERHEAD);
    expect(stored).toBeLessThanOrEqual(MAX_STORED);
    expect(metricValue(page, 'sluice_store_max_bytes')).toBe(MAX_STORED);

    // Room comes back only as results reach their TTL.
    await eventually(
      async () => (await postJson(`${url}/v1/chat/completions`, body(), ASYNC)).status === 202,
      20_000,
      'a call to be admitted after the TTL',
    );
    expect((await get(`${url}/v1/calls/${kept[0]!.id}/result`)).status).toBe(404);
  }, 60_000);

  it('admits together only as many detached calls as the store has room for, and keeps every admitted result (memory store)', async () => {
    const url = await gateway();
    const received = await engineReceived();
    // Sent together while the store is empty: each admitted call reserves room for the largest
    // result until its end, so at least as many as that fits get 202 (more when an early one
    // ends and frees the rest of its room first), and the rest are refused up front.
    const fits = Math.floor(MAX_STORED / (MAX_RESULT + OVERHEAD));
    const answers = await Promise.all(
      Array.from({ length: 12 }, () => postJson(`${url}/v1/chat/completions`, body(), ASYNC)),
    );
    const accepted = answers.filter((a) => a.status === 202);
    expect(accepted.length).toBeGreaterThanOrEqual(fits);
    expect(accepted.length).toBeLessThan(12);
    for (const refused of answers.filter((a) => a.status !== 202)) {
      expect(refused.status).toBe(503);
      expect(refused.json.error.code).toBe('GW_STORE_FULL');
    }
    const ids = accepted.map((a) => a.json.id as string);
    await eventually(
      async () =>
        (await Promise.all(ids.map(async (id) => (await get(`${url}/v1/calls/${id}`)).json.status))).every(
          (s) => s !== 'running',
        ),
      15_000,
      'every call to end',
    );
    for (const id of ids) {
      expect((await get(`${url}/v1/calls/${id}`)).json.status).toBe('succeeded');
      expect((await get(`${url}/v1/calls/${id}/result`)).status).toBe(200);
    }
    // Only the admitted calls ran, and no result was refused at its end.
    expect(await engineReceived()).toBe(received + accepted.length);
    expect(metricValue(await metrics({ url }), 'sluice_store_results_refused_total')).toBe(0);
  }, 60_000);

  it('shares one bound between gateways on one Redis, counted in Redis', async () => {
    const [a, b] = await Promise.all([
      gateway(['--store', redis.url, '--gateway-id', 'gw-full-a']),
      gateway(['--store', redis.url, '--gateway-id', 'gw-full-b']),
    ]);
    const { kept, refusal } = await fill(a);
    expect(kept.length).toBeGreaterThanOrEqual(3);
    expect(refusal.json.error.code).toBe('GW_STORE_FULL');
    // The other gateway sees the same bytes (its health check is at most a second old).
    await eventually(
      async () => (await postJson(`${b}/v1/chat/completions`, body(), ASYNC)).status === 503,
      5_000,
      'the other gateway to refuse',
    );
    const other = await postJson(`${b}/v1/chat/completions`, body(), ASYNC);
    expect(other.json.error.code).toBe('GW_STORE_FULL');
    for (const { id, result } of kept) expect((await get(`${b}/v1/calls/${id}/result`)).text).toBe(result);
    expect(metricValue(await metrics({ url: b }), 'sluice_store_bytes')).toBe(
      metricValue(await metrics({ url: a }), 'sluice_store_bytes'),
    );
  }, 60_000);
});
