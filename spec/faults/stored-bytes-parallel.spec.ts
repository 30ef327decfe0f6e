/**
 * Fault: detached calls sent in parallel went past storedBytes and the store's bound. Admission
 * only looked at what was already stored, so ten detached calls sent together under a 1,000-byte
 * key limit all got 202 and each stored a result of some 2.5 KB, and a key could fill the
 * shared store for every other key. Real processes: a sim engine slow enough that no call ends
 * before the others are admitted, a runner, and a gateway with a keys file and a small store.
 *
 * What must hold: a detached call reserves room for its result at admission, per key and in the
 * store, so of calls sent together only as many as fit get 202; the rest get the existing
 * refusals (429 GW_RATE_LIMITED for the key, 503 GW_STORE_FULL for the store), never reach the
 * engine, and every admitted call keeps its result.
 */
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import { newKeyToken } from '../../gateway/access/keys.ts';
import { bearer, chatBody, eventually, metrics, metricValue, postJson } from '../support/fleet.ts';
import { keyedFleetForSuite } from '../support/keyed-fleet.ts';

const SMALL = newKeyToken();
const OPEN = newKeyToken();
/** What the store counts per result besides its body (RECORD_OVERHEAD_BYTES). */
const OVERHEAD = 1024;
const MAX_RESULT = 8 * 1024;
/** Room for three results of the largest size, and not four. */
const MAX_STORED = 3 * (MAX_RESULT + OVERHEAD) + 512;
/** 100 tokens at 10 ms each: every call of a burst is admitted long before the first ends. */
const body = () => chatBody({ max_tokens: 100, ignore_eos: true });
const detached = (token: string) => ({ prefer: 'respond-async', ...bearer(token) });

const suite = keyedFleetForSuite(
  [
    { name: 'small', token: SMALL, limits: { storedBytes: 1000 } },
    { name: 'open', token: OPEN },
  ],
  {
    nodes: 1,
    engineArgs: ['--ttft-ms', '0', '--itl-ms', '10', '--max-num-seqs', '16'],
    runnerArgs: ['--slots', '16'],
    gatewayArgs: ['--max-result-bytes', String(MAX_RESULT), '--max-stored-bytes', String(MAX_STORED)],
  },
);

async function engineReceived(): Promise<number> {
  const page = await (await request(`${suite.fleet.nodes[0]!.engine.url}/metrics`)).body.text();
  return metricValue(page, 'sluice_sim_requests_total');
}

async function record(id: string): Promise<any> {
  return (await (await request(`${suite.gw}/v1/calls/${id}`, { headers: bearer(OPEN) })).body.json()) as any;
}

/** Waits for each call to end and says how each ended. */
async function ends(ids: string[], token: string): Promise<string[]> {
  const read = async (id: string) =>
    (await (await request(`${suite.gw}/v1/calls/${id}`, { headers: bearer(token) })).body.json()) as any;
  await eventually(
    async () => (await Promise.all(ids.map(read))).every((r) => r.status !== 'queued' && r.status !== 'running'),
    20_000,
    'every call to end',
  );
  return (await Promise.all(ids.map(read))).map((r) => r.status as string);
}

describe('fault: parallel detached calls against storedBytes and the store bound', () => {
  it('admits of ten parallel calls under a 1,000-byte key limit only the one its room fits, and refuses the rest with 429', async () => {
    const received = await engineReceived();
    const answers = await Promise.all(
      Array.from({ length: 10 }, () => postJson(`${suite.gw}/v1/chat/completions`, body(), detached(SMALL))),
    );
    const accepted = answers.filter((a) => a.status === 202);
    expect(accepted).toHaveLength(1);
    for (const refused of answers.filter((a) => a.status !== 202)) {
      expect(refused.status).toBe(429);
      expect(refused.json.error.code).toBe('GW_RATE_LIMITED');
      expect(refused.json.error.message).toContain('storedBytes (1000)');
    }
    expect(
      await ends(
        accepted.map((a) => a.json.id as string),
        SMALL,
      ),
    ).toEqual(['succeeded']);
    expect(await engineReceived()).toBe(received + 1);
    // Its result is over the limit by itself: the key stays refused until it expires.
    expect((await postJson(`${suite.gw}/v1/chat/completions`, body(), detached(SMALL))).status).toBe(429);
  }, 60_000);

  it('admits of ten parallel calls only as many as the store has room for, keeps each result, and refuses the rest with 503', async () => {
    const received = await engineReceived();
    // What the first test's result holds leaves room for fewer than three of the largest results.
    const held = metricValue(await metrics({ url: suite.gw }), 'sluice_store_bytes');
    const fits = Math.floor((MAX_STORED - held) / (MAX_RESULT + OVERHEAD));
    expect(fits).toBeGreaterThanOrEqual(2);
    const answers = await Promise.all(
      Array.from({ length: 10 }, () => postJson(`${suite.gw}/v1/chat/completions`, body(), detached(OPEN))),
    );
    const accepted = answers.filter((a) => a.status === 202);
    expect(accepted).toHaveLength(fits);
    for (const refused of answers.filter((a) => a.status !== 202)) {
      expect(refused.status).toBe(503);
      expect(refused.json.error.code).toBe('GW_STORE_FULL');
    }
    const ids = accepted.map((a) => a.json.id as string);
    expect(await ends(ids, OPEN)).toEqual(Array<string>(fits).fill('succeeded'));
    for (const id of ids) expect((await record(id)).error).toBeUndefined();
    expect(await engineReceived()).toBe(received + fits);
    expect(metricValue(await metrics({ url: suite.gw }), 'sluice_store_results_refused_total')).toBe(0);
  }, 60_000);
});
