/**
 * Detached calls in-process, over real sockets: what happens when the store cannot keep a
 * result, does not answer, or answers late, and /invoke calls made detached.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { request } from 'undici';
import type { GatewayOptions } from '../../gateway/options.ts';
import { createGateway } from '../../gateway/server.ts';
import { StoreUnavailableError } from '../../gateway/store/errors.ts';
import { createMemoryStore } from '../../gateway/store/memory.ts';
import type { CallStore, StoreHealth } from '../../gateway/store/types.ts';
import type { LogFields, Logger } from '../../placer/log.ts';
import { createSimEngine } from '../../runner/engines/sim/server.ts';
import { createRunner } from '../../runner/server.ts';
import { chatBody, eventually, postJson } from '../support/fleet.ts';

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!().catch(() => {});
});

async function gatewayOverSim(options: Partial<GatewayOptions>) {
  const engine = createSimEngine({ ttftMs: 0, itlMs: 1, outputTokens: 400 });
  const { url: engineUrl } = await engine.listen();
  cleanups.push(() => engine.close());
  // A short accept window: these calls are meant to be still running at their 202.
  const runner = createRunner({ engine: engineUrl, engineKind: 'sim', acceptWindow: 20 });
  const { url: runnerUrl } = await runner.listen();
  cleanups.push(() => runner.close({ drainTimeout: 0 }));
  const gateway = createGateway({ runners: [runnerUrl], ...options });
  const { url } = await gateway.listen();
  cleanups.push(() => gateway.close());
  return url;
}

const status = async (url: string) => ((await (await request(url)).body.json()) as any);

/**
 * A memory store whose answers the test can spoil, as a stalled or flaky Redis spoils them:
 * writes that fail before reaching it, writes that land and whose answer is lost, and a health
 * check that fails.
 */
function faultyStore() {
  const inner = createMemoryStore();
  const faults = { finishFails: 0, finishLandsUnanswered: 0, createLandsUnanswered: false, health: undefined as StoreHealth | undefined };
  const lost = () => new StoreUnavailableError('redis store redis://127.0.0.1:6379/0 did not answer within 10000 ms');
  const store: CallStore = {
    create: async (record) => {
      await inner.create(record);
      if (faults.createLandsUnanswered) throw lost();
    },
    get: (id) => inner.get(id),
    finish: async (id, finish, result) => {
      if (faults.finishFails > 0 && faults.finishFails--) throw lost();
      const done = await inner.finish(id, finish, result);
      if (faults.finishLandsUnanswered > 0 && faults.finishLandsUnanswered--) throw lost();
      return done;
    },
    getResult: (id) => inner.getResult(id),
    claimKey: (key, claim, ttl) => inner.claimKey(key, claim, ttl),
    releaseKey: (key, id) => inner.releaseKey(key, id),
    requestCancel: (id, owner) => inner.requestCancel(id, owner),
    onCancel: (owner, handler) => inner.onCancel(owner, handler),
    health: async () => faults.health ?? inner.health(),
    close: () => inner.close(),
  };
  return { store, inner, faults };
}

/** A logger keeping every line at every level. */
function recorder(): { logger: Logger; lines: LogFields[] } {
  const lines: LogFields[] = [];
  const at = (level: string) => (msg: string, fields?: LogFields) => void lines.push({ level, msg, ...fields });
  const logger: Logger = { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error'), child: (fields) => childOf(fields) };
  const childOf = (base: LogFields): Logger => ({
    debug: (m, f) => logger.debug(m, { ...base, ...f }),
    info: (m, f) => logger.info(m, { ...base, ...f }),
    warn: (m, f) => logger.warn(m, { ...base, ...f }),
    error: (m, f) => logger.error(m, { ...base, ...f }),
    child: (more) => childOf({ ...base, ...more }),
  });
  return { logger, lines };
}

describe('detached calls in-process', () => {
  it('fails the call with GW_STORE_FULL when its result no longer fits, keeping the results already stored', async () => {
    const store = createMemoryStore({ maxStoredBytes: 64 * 1024 });
    const url = await gatewayOverSim({ store, maxResultBytes: 16 * 1024 });
    const accepted = await postJson(`${url}/v1/chat/completions`, chatBody({ max_tokens: 300 }), { prefer: 'respond-async' });
    expect(accepted.status).toBe(202);
    // Admitted with room to spare; the store fills while the call runs (another client's result).
    const filler = { id: 'call-filler', fn: 'sim-small', status: 'running' as const, createdAt: Date.now(), owner: 'gw-other', expiresAt: Date.now() + 60_000 };
    await store.create(filler);
    await store.finish(filler.id, { status: 'succeeded', completedAt: Date.now() }, { status: 200, contentType: 'text/plain', body: Buffer.alloc(62 * 1024) });
    const monitor = `${url}/v1/calls/${accepted.json.id}`;
    await eventually(async () => (await status(monitor)).status !== 'running', 10_000, 'the call to end');
    expect(await status(monitor)).toMatchObject({ status: 'failed', error: { code: 'GW_STORE_FULL' } });
    expect((await store.getResult(filler.id))?.body.length).toBe(62 * 1024);
    const refused = await postJson(`${url}/v1/chat/completions`, chatBody(), { prefer: 'respond-async' });
    expect(refused.status).toBe(503);
    expect(refused.json.error.code).toBe('GW_STORE_FULL');
    expect(refused.headers['retry-after']).toBe('1');
  });

  it('retries a finish the store did not answer and logs that it was stored, not lost', async () => {
    const { store, faults } = faultyStore();
    const { logger, lines } = recorder();
    const url = await gatewayOverSim({ store, logger });
    faults.finishFails = 2;
    const accepted = await postJson(`${url}/v1/chat/completions`, chatBody({ max_tokens: 20 }), { prefer: 'respond-async' });
    expect(accepted.status).toBe(202);
    const monitor = `${url}/v1/calls/${accepted.json.id}`;
    await eventually(async () => (await status(monitor)).status !== 'running', 10_000, 'the call to end');
    expect(await status(monitor)).toMatchObject({ status: 'succeeded' });
    expect((await request(`${monitor}/result`)).statusCode).toBe(200);
    const mine = lines.filter((l) => l.call === accepted.json.id);
    expect(mine.map((l) => [l.level, l.msg])).toEqual([
      ['warn', 'store write failed, retrying'],
      ['info', 'detached result stored after retrying'],
    ]);
    expect(mine[1]).toMatchObject({ attempts: 3, status: 'succeeded' });
  });

  it('counts a finish that landed though its answer was lost as stored, and says so', async () => {
    const { store, faults } = faultyStore();
    const { logger, lines } = recorder();
    const url = await gatewayOverSim({ store, logger });
    faults.finishLandsUnanswered = 1;
    const accepted = await postJson(`${url}/v1/chat/completions`, chatBody({ max_tokens: 20 }), { prefer: 'respond-async' });
    const monitor = `${url}/v1/calls/${accepted.json.id}`;
    await eventually(async () => (await status(monitor)).status !== 'running', 10_000, 'the call to end');
    expect(await status(monitor)).toMatchObject({ status: 'succeeded' });
    expect((await request(`${monitor}/result`)).statusCode).toBe(200);
    await eventually(() => lines.some((l) => l.msg === 'detached result stored by an earlier attempt that timed out'), 5000, 'the log line');
    expect(lines.filter((l) => l.level === 'error')).toEqual([]);
  });

  it('fails the record of a call refused with 503 whose create landed after all', async () => {
    const { store, inner, faults } = faultyStore();
    const { logger, lines } = recorder();
    const url = await gatewayOverSim({ store, logger });
    faults.createLandsUnanswered = true;
    const refused = await postJson(`${url}/v1/chat/completions`, chatBody(), { prefer: 'respond-async' });
    expect(refused.status).toBe(503);
    expect(refused.json.error.code).toBe('STORE_UNAVAILABLE');
    const id = String(refused.headers['sluice-call-id']);
    await eventually(async () => (await inner.get(id))?.status === 'failed', 5000, 'the ghost record to be failed');
    expect(await inner.get(id)).toMatchObject({ status: 'failed', error: { code: 'GW_STORE_UNAVAILABLE' } });
    expect(lines).toContainEqual(expect.objectContaining({ level: 'warn', msg: 'detached record written after its call was refused, now failed', call: id }));
  });

  it('refuses detached calls at once with 503 GW_STORE_UNAVAILABLE while the store does not answer, and /readyz says why', async () => {
    const { store, faults } = faultyStore();
    const url = await gatewayOverSim({ store });
    faults.health = { ok: false, reason: 'redis store redis://127.0.0.1:6379/0 did not answer a health check within 1000 ms' };
    const refused = await postJson(`${url}/v1/chat/completions`, chatBody(), { prefer: 'respond-async', 'idempotency-key': 'k-1' });
    expect(refused.status).toBe(503);
    expect(refused.json.error).toMatchObject({ code: 'GW_STORE_UNAVAILABLE', type: 'service_unavailable_error' });
    expect(refused.json.error.message).not.toContain('redis://');
    expect(refused.headers['retry-after']).toBe('1');
    expect((await postJson(`${url}/v1/chat/completions`, chatBody())).status).toBe(200);
    const ready = await request(`${url}/readyz`);
    expect(ready.statusCode).toBe(503);
    expect(await ready.body.json()).toMatchObject({ ready: false, closing: false, reasons: ['store_unavailable'] });
    faults.health = undefined;
    expect((await request(`${url}/readyz`)).statusCode).toBe(200);
    expect((await postJson(`${url}/v1/chat/completions`, chatBody(), { prefer: 'respond-async', 'idempotency-key': 'k-1' })).status).toBe(202);
  });

  it('runs an /invoke call detached and keeps its result with its content type', async () => {
    const url = await gatewayOverSim({});
    const accepted = await postJson(`${url}/invoke/resize`, '{"w":1}', { prefer: 'respond-async', 'sluice-callback-url': '' });
    // An empty callback URL is not a URL: refused before anything runs.
    expect(accepted.status).toBe(400);
    const ok = await postJson(`${url}/invoke/resize`, '{"w":1}', { 'sluice-invoke-type': 'detached' });
    expect(ok.status).toBe(202);
    await eventually(async () => (await status(`${url}/v1/calls/${ok.json.id}`)).status === 'succeeded', 10_000, 'the call');
    const result = await request(`${url}/v1/calls/${ok.json.id}/result`);
    expect(result.statusCode).toBe(200);
    expect(result.headers['content-type']).toContain('application/json');
    expect(await result.body.json()).toMatchObject({ fn: 'resize', bytes: 7 });
  });
});
