/**
 * Detached calls over real processes: 202 on commit, status, result, cancel, wait=N,
 * Idempotency-Key, and bad input.
 */
import { describe, expect, it } from 'vitest';
import { chatBody, eventually, fleetForSuite, getJson, metrics, metricValue, postJson } from '../../support/fleet.ts';
import { finalRecord } from '../../support/faults.ts';
import { abortedCalls, cancelSeenByEngine } from './cancels.ts';

const ASYNC = { prefer: 'respond-async' };
/** Engines here produce up to 400 tokens, 30 ms apart; calls ask for fewer with max_tokens. */
const short = (extra: Record<string, unknown> = {}) => chatBody({ max_tokens: 10, ...extra });

describe('detached calls', () => {
  const suite = fleetForSuite({
    nodes: 1,
    engineArgs: ['--ttft-ms', '0', '--itl-ms', '30', '--output-tokens', '400'],
    runnerArgs: ['--slots', '1'],
    // Results up to 1000 bytes: a 100-token answer (about 700) fits, a 200-token one (about 1400) does not.
    gatewayArgs: ['--detached-placer-timeout', '3s', '--max-result-bytes', '1000'],
  });

  it('answers 202 with the status monitor once a runner commits, then keeps the result', async () => {
    // Far longer than the runner's accept window (500 ms): 3 s, so the call is still running at
    // its 202 and at the two reads below however slowly a busy machine makes them.
    const accepted = await postJson(`${suite.gw}/v1/chat/completions`, short({ max_tokens: 100 }), ASYNC);
    expect(accepted.status).toBe(202);
    const id = accepted.json.id as string;
    expect(accepted.headers.location).toBe(`/v1/calls/${id}`);
    expect(accepted.headers['preference-applied']).toBe('respond-async');
    expect(accepted.headers['sluice-call-id']).toBe(id);
    expect(accepted.json).toMatchObject({
      status: 'running',
      urls: { status: `/v1/calls/${id}`, result: `/v1/calls/${id}/result`, cancel: `/v1/calls/${id}/cancel` },
    });

    const running = await getJson(`${suite.gw}/v1/calls/${id}`);
    expect(running.json.status).toBe('running');
    expect(running.headers['retry-after']).toBe('1');
    const early = await getJson(`${suite.gw}/v1/calls/${id}/result`);
    expect(early.status).toBe(409);
    expect(early.json.error.code).toBe('GW_CALL_NOT_FINISHED');

    const done = await finalRecord(suite.gw, id, 20_000);
    expect(done).toMatchObject({ id, fn: 'sim-small', status: 'succeeded', runner: expect.any(String) });
    expect(Date.parse(done.completedAt)).toBeGreaterThanOrEqual(Date.parse(done.startedAt));
    expect(done.executionMs).toBeGreaterThanOrEqual(9 * 30 * 0.8);
    expect(done.delayMs).toBeGreaterThanOrEqual(0);
    const result = await getJson(`${suite.gw}/v1/calls/${id}/result`);
    expect(result.status).toBe(200);
    expect(result.json.object).toBe('chat.completion');
  }, 60_000);

  it('answers the 202 only after a busy runner frees a slot, and 503 when none frees in time', async () => {
    const engine = suite.fleet.nodes[0]!.engine;
    const completedBefore = metricValue(await metrics(engine), 'sluice_sim_requests_completed_total');
    const long = postJson(`${suite.gw}/v1/chat/completions`, short({ max_tokens: 40 }));
    await eventually(
      async () => metricValue(await metrics(engine), 'vllm:num_requests_running') === 1,
      10_000,
      'the long call',
    );
    const accepted = await postJson(`${suite.gw}/v1/chat/completions`, short(), ASYNC);
    // The only slot was busy for about 40 x 30 ms: the 202 waited for it. The runner frees it
    // only after the engine finished the long call, so by the 202 the engine has counted it.
    expect(accepted.status).toBe(202);
    expect(metricValue(await metrics(engine), 'sluice_sim_requests_completed_total')).toBeGreaterThanOrEqual(
      completedBefore + 1,
    );
    expect((await long).status).toBe(200);
    expect((await finalRecord(suite.gw, accepted.json.id)).status).toBe('succeeded');

    // 6 s, twice the 3 s detached placer deadline, however late the refused call arrives.
    const longer = postJson(`${suite.gw}/v1/chat/completions`, short({ max_tokens: 200 }));
    await eventually(
      async () => metricValue(await metrics(suite.fleet.nodes[0]!.engine), 'vllm:num_requests_running') === 1,
      10_000,
      'the longer call',
    );
    const refused = await postJson(`${suite.gw}/v1/chat/completions`, short(), ASYNC);
    expect(refused.status).toBe(503);
    expect(refused.json.error.code).toBe('PLACER_TIMEOUT');
    expect(refused.headers['retry-after']).toBeDefined();
    expect((await longer).status).toBe(200);
  }, 60_000);

  it('returns the whole result inline when it finishes within Prefer wait=N', async () => {
    const res = await postJson(`${suite.gw}/v1/chat/completions`, short(), { prefer: 'respond-async, wait=10' });
    expect(res.status).toBe(200);
    expect(res.headers['preference-applied']).toBe('wait=10');
    expect(res.json.object).toBe('chat.completion');
    expect(res.headers['sluice-call-id']).toMatch(/^[0-9a-f-]{36}$/);
  });

  it('cancels a running call: the engine sees the abort, the status says cancelled, cancel again is harmless', async () => {
    const engine = suite.fleet.nodes[0]!.engine;
    const before = await abortedCalls(engine);
    // 9 s of work: still running when the cancel comes, however slowly.
    const accepted = await postJson(`${suite.gw}/v1/chat/completions`, short({ max_tokens: 300 }), ASYNC);
    const id = accepted.json.id as string;
    await cancelSeenByEngine(`${suite.gw}/v1/calls/${id}`, engine, before, 15_000);
    const again = await postJson(`${suite.gw}/v1/calls/${id}/cancel`, '');
    expect(again.json.status).toBe('cancelled');
    const result = await getJson(`${suite.gw}/v1/calls/${id}/result`);
    expect(result.status).toBe(404);
    expect(result.json.error.code).toBe('GW_NO_RESULT');
  });

  it('returns the first call for a repeated Idempotency-Key and payload, and 422 for another payload', async () => {
    const key = `key-${Date.now()}`;
    const first = await postJson(`${suite.gw}/v1/chat/completions`, short(), { ...ASYNC, 'idempotency-key': key });
    expect(first.status).toBe(202);
    const replay = await postJson(`${suite.gw}/v1/chat/completions`, short(), { ...ASYNC, 'idempotency-key': key });
    expect(replay.status).toBe(202);
    expect(replay.json.id).toBe(first.json.id);
    const other = await postJson(`${suite.gw}/v1/chat/completions`, short({ max_tokens: 2 }), {
      ...ASYNC,
      'idempotency-key': key,
    });
    expect(other.status).toBe(422);
    expect(other.json.error.code).toBe('GW_IDEMPOTENCY_KEY_REUSED');
    const engineCalls = metricValue(await metrics(suite.fleet.nodes[0]!.engine), 'sluice_sim_requests_total');
    expect((await finalRecord(suite.gw, first.json.id)).status).toBe('succeeded');
    // The replay ran nothing.
    expect(metricValue(await metrics(suite.fleet.nodes[0]!.engine), 'sluice_sim_requests_total')).toBe(engineCalls);
  });

  describe('bad input', () => {
    it.each([
      [{ prefer: 'respond-async, wait=soon' }, 400, 'GW_INVALID_PREFER'],
      [{ prefer: 'respond-async, "broken' }, 400, 'GW_INVALID_PREFER'],
      [{ 'sluice-invoke-type': 'later' }, 400, 'GW_INVALID_PREFER'],
      [{ prefer: 'respond-async', 'sluice-callback-url': 'http://127.0.0.1:1/hook' }, 400, 'GW_CALLBACKS_DISABLED'],
      [{ prefer: 'respond-async', 'idempotency-key': '' }, 400, 'GW_INVALID_IDEMPOTENCY_KEY'],
    ])('refuses %j with %i %s', async (headers, status, code) => {
      const res = await postJson(`${suite.gw}/v1/chat/completions`, short(), headers as Record<string, string>);
      expect(res.status).toBe(status);
      expect(res.json.error.code).toBe(code);
    });

    it('answers 404 for an unknown call id on every call route', async () => {
      for (const path of ['', '/result']) {
        const res = await getJson(`${suite.gw}/v1/calls/nope${path}`);
        expect(res.status).toBe(404);
        expect(res.json.error.code).toBe('GW_CALL_NOT_FOUND');
      }
      expect((await postJson(`${suite.gw}/v1/calls/nope/cancel`, '')).status).toBe(404);
    });

    it('fails a call whose result is over maxResultBytes with that reason, and keeps serving', async () => {
      const accepted = await postJson(`${suite.gw}/v1/chat/completions`, short({ max_tokens: 200 }), ASYNC);
      const status = await finalRecord(suite.gw, accepted.json.id, 30_000);
      expect(status).toMatchObject({ status: 'failed', error: { code: 'GW_RESULT_TOO_LARGE' } });
      expect(status.error.message).toContain('1000');
      expect((await postJson(`${suite.gw}/v1/chat/completions`, short())).status).toBe(200);
    }, 60_000);
  });
});
