/**
 * Detached calls in-process, over real sockets: what happens when the store cannot keep a
 * result, does not answer, or answers late; calls recorded `queued` while they wait for a
 * runner (cancelled, abandoned, orphaned); and /invoke calls made detached.
 */
import { describe, expect, it } from 'vitest';
import { request } from 'undici';
import type { GatewayOptions } from '../../../gateway/options.ts';
import { createGateway } from '../../../gateway/server.ts';
import { StoreUnavailableError } from '../../../gateway/store/errors.ts';
import { createMemoryStore } from '../../../gateway/store/memory.ts';
import type { CallStore, StoreHealth } from '../../../gateway/store/types.ts';
import type { LogFields, Logger } from '../../../placer/kernel/index.ts';
import type { RunnerOptions } from '../../../runner/options.ts';
import { chatBody, eventually, metricValue, postJson } from '../../support/fleet.ts';
import { serversForEach } from '../../support/servers.ts';
import { startSimRunner } from '../../support/sim-runner.ts';
import type { SimRunner } from '../../support/sim-runner.ts';

const { cleanups } = serversForEach();

/** A sim engine making 400 tokens `itlMs` apart and a runner over it, both closed after the test. */
function simRunner(itlMs: number, runnerOptions: Partial<RunnerOptions>): Promise<SimRunner> {
  return startSimRunner(cleanups, runnerOptions, { ttftMs: 0, itlMs, outputTokens: 400 });
}

async function gatewayOverSim(options: Partial<GatewayOptions>) {
  // A short accept window: these calls are meant to be still running at their 202.
  const { runnerUrl } = await simRunner(1, { acceptWindow: 20 });
  const gateway = createGateway({ runners: [runnerUrl], ...options });
  const { url } = await gateway.listen();
  cleanups.push(() => gateway.close());
  return url;
}

const status = async (url: string) => (await (await request(url)).body.json()) as any;

/**
 * A memory store whose answers the test can spoil, as a stalled or flaky Redis spoils them:
 * writes that fail before reaching it, writes that land and whose answer is lost, and a health
 * check that fails. `created` lists the ids of the records it was asked to create.
 */
function faultyStore() {
  const inner = createMemoryStore();
  const faults = {
    finishFails: 0,
    finishLandsUnanswered: 0,
    createLandsUnanswered: false,
    startFails: 0,
    cancelledBeforeStart: false,
    health: undefined as StoreHealth | undefined,
  };
  const created: string[] = [];
  const lost = () => new StoreUnavailableError('redis store redis://127.0.0.1:6379/0 did not answer within 10000 ms');
  const store: CallStore = {
    create: async (record) => {
      created.push(record.id);
      await inner.create(record);
      if (faults.createLandsUnanswered) throw lost();
    },
    start: async (id, start) => {
      if (faults.startFails > 0 && faults.startFails--) throw lost();
      // A cancel from another gateway that ended the record as the runner committed, its routed abort lost.
      if (faults.cancelledBeforeStart)
        await inner.finish(id, {
          status: 'cancelled',
          completedAt: Date.now(),
          error: { code: 'GW_CALL_CANCELLED', message: 'the call was cancelled' },
        });
      return inner.start(id, start);
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
  return { store, inner, faults, created };
}

/** A logger keeping every line at every level. */
function recorder(): { logger: Logger; lines: LogFields[] } {
  const lines: LogFields[] = [];
  const at = (level: string) => (msg: string, fields?: LogFields) => void lines.push({ level, msg, ...fields });
  const logger: Logger = {
    debug: at('debug'),
    info: at('info'),
    warn: at('warn'),
    error: at('error'),
    child: (fields) => childOf(fields),
  };
  const childOf = (base: LogFields): Logger => ({
    debug: (m, f) => logger.debug(m, { ...base, ...f }),
    info: (m, f) => logger.info(m, { ...base, ...f }),
    warn: (m, f) => logger.warn(m, { ...base, ...f }),
    error: (m, f) => logger.error(m, { ...base, ...f }),
    child: (more) => childOf({ ...base, ...more }),
  });
  return { logger, lines };
}

/**
 * A one-slot runner over an engine making 50 tokens a second, and two gateways over it sharing
 * one store (memory, so the second reaches the first's calls as over Redis: by routed cancels).
 */
async function busyPair() {
  const { engineUrl, runnerUrl } = await simRunner(20, { slots: 1 });
  const faulty = faultyStore();
  const urls: string[] = [];
  for (const gatewayId of ['gw-a', 'gw-b']) {
    const gateway = createGateway({
      runners: [runnerUrl],
      store: faulty.store,
      gatewayId,
      detachedPlacerTimeout: 20_000,
    });
    urls.push((await gateway.listen()).url);
    cleanups.push(() => gateway.close());
  }
  /** Calls the engine was offered so far. */
  const offered = async () =>
    metricValue(await (await request(`${engineUrl}/metrics`)).body.text(), 'sluice_sim_requests_total');
  /** Holds the one slot with a sync call until the returned function is called. */
  const occupy = async () => {
    const controller = new AbortController();
    const before = await offered();
    const held = request(`${urls[0]}/v1/chat/completions`, {
      method: 'POST',
      body: chatBody({ max_tokens: 400, ignore_eos: true }),
      headers: { 'content-type': 'application/json' },
      signal: controller.signal,
    });
    held
      .then(
        (res) => res.body.dump(),
        () => {},
      )
      .catch(() => {});
    await eventually(async () => (await offered()) === before + 1, 5000, 'the slot to be taken');
    return () => controller.abort();
  };
  return { a: urls[0]!, b: urls[1]!, ...faulty, offered, occupy };
}

/** A gateway over the sim runner on a {@link faultyStore}, logging to a recorder. */
async function faultyGateway() {
  const faulty = faultyStore();
  const { logger, lines } = recorder();
  const url = await gatewayOverSim({ store: faulty.store, logger });
  return { url, lines, ...faulty };
}

/** Sends `url` a detached chat call of `maxTokens`: its answer, and the URL of its record. */
async function detach(url: string, maxTokens: number) {
  const accepted = await postJson(`${url}/v1/chat/completions`, chatBody({ max_tokens: maxTokens }), {
    prefer: 'respond-async',
  });
  return { accepted, monitor: `${url}/v1/calls/${accepted.json.id}` };
}

/** Waits for the record at `monitor` to end, and checks that it succeeded and its result is kept. */
async function expectSucceeded(monitor: string): Promise<void> {
  await eventually(async () => (await status(monitor)).status !== 'running', 10_000, 'the call to end');
  expect(await status(monitor)).toMatchObject({ status: 'succeeded' });
  expect((await request(`${monitor}/result`)).statusCode).toBe(200);
}

describe('detached calls in-process', () => {
  it("keeps the room reserved for a running call's result: another result cannot take it, and the call's result is stored", async () => {
    const store = createMemoryStore({ maxStoredBytes: 64 * 1024 });
    const url = await gatewayOverSim({ store, maxResultBytes: 16 * 1024 });
    const { accepted, monitor } = await detach(url, 300);
    expect(accepted.status).toBe(202);
    // Another gateway's result of 62 KiB would fit the bytes stored, not the room this call reserved.
    const filler = {
      id: 'call-filler',
      fn: 'sim-small',
      status: 'running' as const,
      createdAt: Date.now(),
      owner: 'gw-other',
      expiresAt: Date.now() + 60_000,
    };
    await store.create(filler);
    await expect(
      store.finish(
        filler.id,
        { status: 'succeeded', completedAt: Date.now() },
        { status: 200, contentType: 'text/plain', body: Buffer.alloc(62 * 1024) },
      ),
    ).rejects.toMatchObject({ code: 'STORE_FULL' });
    await expectSucceeded(monitor);
  });

  it('retries a finish the store did not answer and logs that it was stored, not lost', async () => {
    const { url, lines, faults } = await faultyGateway();
    faults.finishFails = 2;
    const { accepted, monitor } = await detach(url, 20);
    expect(accepted.status).toBe(202);
    await expectSucceeded(monitor);
    const mine = lines.filter((l) => l.call === accepted.json.id);
    expect(mine.map((l) => [l.level, l.msg])).toEqual([
      ['warn', 'store write failed, retrying'],
      ['info', 'detached result stored after retrying'],
    ]);
    expect(mine[1]).toMatchObject({ attempts: 3, status: 'succeeded' });
  });

  it('counts a finish that landed though its answer was lost as stored, and says so', async () => {
    const { url, lines, faults } = await faultyGateway();
    faults.finishLandsUnanswered = 1;
    const { monitor } = await detach(url, 20);
    await expectSucceeded(monitor);
    await eventually(
      () => lines.some((l) => l.msg === 'detached result stored by an earlier attempt that timed out'),
      5000,
      'the log line',
    );
    expect(lines.filter((l) => l.level === 'error')).toEqual([]);
  });

  it('refuses a call whose record the store did not confirm before placing it, and fails the record that landed after all', async () => {
    const { url, lines, inner, faults } = await faultyGateway();
    faults.createLandsUnanswered = true;
    const refused = await postJson(`${url}/v1/chat/completions`, chatBody(), { prefer: 'respond-async' });
    expect(refused.status).toBe(503);
    expect(refused.json.error).toMatchObject({
      code: 'GW_STORE_UNAVAILABLE',
      message: expect.stringContaining('nothing ran'),
    });
    expect(refused.json.error.message).not.toContain('redis://');
    expect(refused.headers['retry-after']).toBe('1');
    const id = String(refused.headers['sluice-call-id']);
    await eventually(async () => (await inner.get(id))?.status === 'failed', 5000, 'the ghost record to be failed');
    // Never placed: no runner ever had it.
    const record = await inner.get(id);
    expect(record).toMatchObject({
      status: 'failed',
      error: { code: 'GW_STORE_UNAVAILABLE', message: expect.stringContaining('was not placed') },
    });
    expect(record).not.toHaveProperty('runner');
    expect(lines).toContainEqual(
      expect.objectContaining({
        level: 'warn',
        msg: 'detached record written after its call was refused, now failed',
        call: id,
      }),
    );
  });

  it('runs a call on when the store does not take its start, and records the start with its end', async () => {
    const { url, lines, faults } = await faultyGateway();
    faults.startFails = 1;
    const { accepted, monitor } = await detach(url, 200);
    expect(accepted.status).toBe(202);
    expect(accepted.json.status).toBe('running');
    // The store still says queued; the gateway running it knows better.
    expect(await status(monitor)).toMatchObject({ status: 'running', runner: expect.any(String) });
    await eventually(async () => (await status(monitor)).status !== 'running', 10_000, 'the call to end');
    expect(await status(monitor)).toMatchObject({
      status: 'succeeded',
      runner: expect.any(String),
      startedAt: expect.any(String),
      delayMs: expect.any(Number),
    });
    expect((await request(`${monitor}/result`)).statusCode).toBe(200);
    expect(lines.filter((l) => l.call === accepted.json.id).map((l) => [l.level, l.msg])).toEqual([
      ['warn', 'detached call start not recorded, running on'],
    ]);
  });

  it('stops a call whose start finds it cancelled, and shows its client the cancelled record', async () => {
    const { url, faults } = await faultyGateway();
    faults.cancelledBeforeStart = true;
    const { accepted: answered, monitor } = await detach(url, 200);
    expect(answered.status).toBe(202);
    expect(answered.json).toMatchObject({ status: 'cancelled' });
    expect(await status(monitor)).toMatchObject({ status: 'cancelled', error: { code: 'GW_CALL_CANCELLED' } });
    expect((await request(`${monitor}/result`)).statusCode).toBe(404);
  });

  it('fails a queued call whose owner vanished past its lifetime, saying it was being placed', async () => {
    const store = createMemoryStore();
    const url = await gatewayOverSim({ store });
    const now = Date.now();
    await store.create({
      id: 'call-orphan',
      fn: 'sim-small',
      status: 'queued',
      createdAt: now - 60_000,
      owner: 'gw-gone',
      expiresAt: now - 10_000,
    });
    expect(await status(`${url}/v1/calls/call-orphan`)).toMatchObject({
      status: 'failed',
      error: { code: 'GW_OWNER_LOST', message: expect.stringContaining('gateway gw-gone was placing this call') },
    });
  });

  it('refuses detached calls at once with 503 GW_STORE_UNAVAILABLE while the store does not answer, and /readyz says why', async () => {
    const { url, faults } = await faultyGateway();
    faults.health = {
      ok: false,
      reason: 'redis store redis://127.0.0.1:6379/0 did not answer a health check within 1000 ms',
    };
    const refused = await postJson(`${url}/v1/chat/completions`, chatBody(), {
      prefer: 'respond-async',
      'idempotency-key': 'k-1',
    });
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
    expect(
      (await postJson(`${url}/v1/chat/completions`, chatBody(), { prefer: 'respond-async', 'idempotency-key': 'k-1' }))
        .status,
    ).toBe(202);
  });

  it('runs an /invoke call detached and keeps its result with its content type', async () => {
    const url = await gatewayOverSim({});
    const accepted = await postJson(`${url}/invoke/resize`, '{"w":1}', {
      prefer: 'respond-async',
      'sluice-callback-url': '',
    });
    // An empty callback URL is not a URL: refused before anything runs.
    expect(accepted.status).toBe(400);
    const ok = await postJson(`${url}/invoke/resize`, '{"w":1}', { 'sluice-invoke-type': 'detached' });
    expect(ok.status).toBe(202);
    await eventually(
      async () => (await status(`${url}/v1/calls/${ok.json.id}`)).status === 'succeeded',
      10_000,
      'the call',
    );
    const result = await request(`${url}/v1/calls/${ok.json.id}/result`);
    expect(result.statusCode).toBe(200);
    expect(result.headers['content-type']).toContain('application/json');
    expect(await result.body.json()).toMatchObject({ fn: 'resize', bytes: 7 });
  });
  it('shows a call waiting for a runner as queued, and a cancel from another gateway stops its placement before any runner sees it', async () => {
    const { a, b, created, offered, occupy } = await busyPair();
    const release = await occupy();
    const before = await offered();
    const waiting = postJson(`${a}/v1/chat/completions`, chatBody({ max_tokens: 5 }), {
      prefer: 'respond-async',
      'idempotency-key': 'q-1',
    });
    await eventually(() => created.length === 1, 5000, 'the record');
    const id = created[0]!;
    const queued = await request(`${b}/v1/calls/${id}`);
    expect(queued.statusCode).toBe(200);
    expect(queued.headers['retry-after']).toBe('1');
    const view = (await queued.body.json()) as Record<string, unknown>;
    expect(view).toMatchObject({ id, status: 'queued', createdAt: expect.any(String) });
    expect(view.runner).toBeUndefined();
    expect(view.startedAt).toBeUndefined();
    const early = await request(`${b}/v1/calls/${id}/result`);
    expect(early.statusCode).toBe(409);
    expect(((await early.body.json()) as any).error.code).toBe('GW_CALL_NOT_FINISHED');
    const replay = await postJson(`${b}/v1/chat/completions`, chatBody({ max_tokens: 5 }), {
      prefer: 'respond-async',
      'idempotency-key': 'q-1',
    });
    expect(replay.status).toBe(409);
    expect(replay.json.error.code).toBe('GW_IDEMPOTENCY_IN_PROGRESS');

    const cancel = await postJson(`${b}/v1/calls/${id}/cancel`, '');
    expect(cancel.status).toBe(200);
    expect(cancel.json).toMatchObject({ id, status: 'cancelled', error: { code: 'GW_CALL_CANCELLED' } });
    // The client still waiting on gw-a hears at once, with the record as it ended.
    const answered = await waiting;
    expect(answered.status).toBe(202);
    expect(answered.json).toMatchObject({ id, status: 'cancelled' });
    release();
    // The slot is free now and nothing takes it for the cancelled call.
    const after = await postJson(`${a}/v1/chat/completions`, chatBody({ max_tokens: 1 }));
    expect(after.status).toBe(200);
    expect(await offered()).toBe(before + 1);
    expect(await status(`${a}/v1/calls/${id}`)).toMatchObject({
      status: 'cancelled',
      error: { code: 'GW_CALL_CANCELLED' },
    });
  });

  it('ends the record of a call whose client left while it waited for a runner as cancelled, PLACER_ABORTED', async () => {
    const { a, created, offered, occupy } = await busyPair();
    const release = await occupy();
    const before = await offered();
    const client = new AbortController();
    const waiting = request(`${a}/v1/chat/completions`, {
      method: 'POST',
      body: chatBody({ max_tokens: 5 }),
      headers: { 'content-type': 'application/json', prefer: 'respond-async' },
      signal: client.signal,
    });
    waiting.catch(() => {});
    await eventually(() => created.length === 1, 5000, 'the record');
    const id = created[0]!;
    expect(await status(`${a}/v1/calls/${id}`)).toMatchObject({ status: 'queued' });
    client.abort();
    await eventually(async () => (await status(`${a}/v1/calls/${id}`)).status !== 'queued', 5000, 'the record to end');
    expect(await status(`${a}/v1/calls/${id}`)).toMatchObject({
      status: 'cancelled',
      error: { code: 'PLACER_ABORTED' },
    });
    release();
    expect(await offered()).toBe(before);
  });
});
