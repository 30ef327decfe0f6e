/**
 * Fault: the Redis behind the detached-call store stalls (SIGSTOP) or dies (SIGKILL) while a
 * gateway serves detached calls (issue 10, item 5). Real processes: a redis-server, a sim
 * engine, a runner with one slot, and a gateway on that Redis.
 *
 * What must hold: /readyz says the store is unavailable within a couple of seconds; new
 * detached calls are refused at once, not after a command timeout; a call that finished during
 * a long stall ends succeeded with its result, and no error line says it was not stored; after
 * a kill and restart the gateway recovers by itself. No call runs twice (the engine's
 * counters), and every call a client got a 202 for ends with its result. A stall that catches a
 * call's record being created or started is detached-record-first.spec.ts's fault.
 */
import { request } from 'undici';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { chatBody, eventually, metrics, metricValue, postJson } from '../support/fleet.ts';
import type { Fleet } from '../support/fleet.ts';
import { startRedis } from '../support/redis.ts';
import type { RedisServer } from '../support/redis.ts';
import { startStoreFleet } from '../support/store-fleet.ts';

const ASYNC = { prefer: 'respond-async' };
/**
 * The gateway's Redis command timeout: the least the store takes (a create's own 3 s bound), so
 * a write caught in a stall fails soon and the stall that catches one is short.
 */
const COMMAND_TIMEOUT = '3s';

let redis: RedisServer;
let fleet: Fleet;
let gw: string;

beforeAll(async () => {
  ({ redis, fleet, gw } = await startStoreFleet('gw-outage', '20s', ['--redis-command-timeout', COMMAND_TIMEOUT]));
});

afterAll(async () => {
  await fleet?.stop();
  await redis?.stop();
});

// Whatever a test did, the next one starts with Redis running.
afterEach(() => {
  try {
    process.kill(redis.pid, 'SIGCONT');
  } catch {
    // already gone: the kill test stops it on purpose
  }
});

async function readyz(): Promise<{ status: number; json: any }> {
  const res = await request(`${gw}/readyz`);
  return { status: res.statusCode, json: await res.body.json() };
}

async function callStatus(id: string): Promise<{ status: number; json: any }> {
  const res = await request(`${gw}/v1/calls/${id}`);
  return { status: res.statusCode, json: await res.body.json() };
}

/** The engine's lifetime counters: calls it was offered, and calls whose client went away. */
async function engineCounts(): Promise<{ received: number; aborted: number }> {
  const page = await metrics(fleet.nodes[0]!.engine);
  return {
    received: metricValue(page, 'sluice_sim_requests_total'),
    aborted: metricValue(page, 'sluice_sim_requests_aborted_total'),
  };
}

/** The gateway's log lines at error level (its output is captured, at --log-level warn). */
function errorLines(): string[] {
  return fleet.gateway
    .output()
    .split('\n')
    .filter((line) => line.includes('"level":"error"'));
}

/** Whether the gateway logged that its first write of call `id`'s end failed. */
function finishFailed(id: string): boolean {
  return new RegExp(`"msg":"store write failed, retrying".*"call":"${id}"`).test(fleet.gateway.output());
}

/**
 * A new detached call is refused with 503 GW_STORE_UNAVAILABLE, at admission on the health answer
 * rather than after a command timeout (a create that timed out, on its 3 s bound or the command
 * timeout, would say the store did not take the call).
 */
async function expectDetachedRefused(): Promise<void> {
  const started = Date.now();
  const refused = await postJson(`${gw}/v1/chat/completions`, chatBody({ ignore_eos: true, max_tokens: 5 }), ASYNC);
  expect(Date.now() - started).toBeLessThan(8_000);
  expect(refused.status).toBe(503);
  expect(refused.json.error).toMatchObject({
    code: 'GW_STORE_UNAVAILABLE',
    type: 'service_unavailable_error',
    message: 'the detached-call store is not answering; retry later',
  });
  expect(refused.headers['retry-after']).toBe('1');
}

describe('fault: redis stalls or dies under a gateway with detached calls', () => {
  it('says not ready within a couple of seconds of a stall and refuses new detached calls at once, sync calls unaffected', async () => {
    expect((await readyz()).status).toBe(200);
    const before = await engineCounts();
    process.kill(redis.pid, 'SIGSTOP');
    // The store's health check (a 1 s ping, cached a second) finds the stall: nothing else is
    // sent to Redis meanwhile; 8 s leaves a busy machine room.
    await eventually(async () => (await readyz()).status === 503, 8_000, '/readyz to answer 503');
    expect((await readyz()).json).toMatchObject({ ready: false, closing: false, reasons: ['store_unavailable'] });

    await expectDetachedRefused();
    const sync = await postJson(`${gw}/v1/chat/completions`, chatBody({ ignore_eos: true, max_tokens: 5 }));
    expect(sync.status).toBe(200);

    process.kill(redis.pid, 'SIGCONT');
    await eventually(async () => (await readyz()).status === 200, 15_000, '/readyz to answer 200 again');
    // The refused call never reached the engine; the sync call ran once.
    expect(await engineCounts()).toEqual({ received: before.received + 1, aborted: before.aborted });
  }, 60_000);

  it('ends a call that finished during a long stall succeeded, with its result, and logs no error about it', async () => {
    const before = await engineCounts();
    const errorsBefore = errorLines().length;
    const accepted = await postJson(
      `${gw}/v1/chat/completions`,
      chatBody({ ignore_eos: true, max_tokens: 100 }),
      ASYNC,
    );
    expect(accepted.status).toBe(202);
    const id = accepted.json.id as string;
    process.kill(redis.pid, 'SIGSTOP');
    // The call ends after 1 s and its finish goes into the stall; the stall lasts until that
    // write has failed (timed out after the command timeout, or refused once the health check
    // found the stall), so it is retried once Redis resumes.
    await eventually(async () => (await engineCounts()).received === before.received + 1, 10_000, 'the call to run');
    await eventually(() => finishFailed(id), 20_000, "the first write of the call's end to fail");
    process.kill(redis.pid, 'SIGCONT');

    await eventually(
      async () => (await callStatus(id)).json.status === 'succeeded',
      15_000,
      'the call to read succeeded',
    );
    const result = await request(`${gw}/v1/calls/${id}/result`);
    expect(result.statusCode).toBe(200);
    expect(((await result.body.json()) as any).choices[0].message.content.length).toBeGreaterThan(0);
    const errors = errorLines().slice(errorsBefore);
    expect(errors).toEqual([]);
    // The stall did catch the finish: its first write failed, and that is all the log says.
    expect(finishFailed(id)).toBe(true);
    expect(fleet.gateway.output()).not.toContain('detached result not stored"');
    expect(await engineCounts()).toMatchObject({ received: before.received + 1, aborted: before.aborted });
  }, 60_000);

  it('recovers by itself when redis is killed and started again on its port', async () => {
    const { port } = redis;
    process.kill(redis.pid, 'SIGKILL');
    await redis.stop();
    await eventually(async () => (await readyz()).status === 503, 8_000, '/readyz to answer 503');
    expect((await readyz()).json.reasons).toEqual(['store_unavailable']);
    await expectDetachedRefused();
    expect((await postJson(`${gw}/v1/chat/completions`, chatBody({ ignore_eos: true, max_tokens: 5 }))).status).toBe(
      200,
    );

    redis = await startRedis({ port });
    await eventually(async () => (await readyz()).status === 200, 15_000, '/readyz to answer 200 again');
    const accepted = await postJson(`${gw}/v1/chat/completions`, chatBody({ ignore_eos: true, max_tokens: 5 }), ASYNC);
    expect(accepted.status).toBe(202);
    await eventually(
      async () => (await callStatus(accepted.json.id)).json.status === 'succeeded',
      15_000,
      'the call to succeed',
    );
    expect((await request(`${gw}/v1/calls/${accepted.json.id}/result`)).statusCode).toBe(200);
  }, 60_000);
});
