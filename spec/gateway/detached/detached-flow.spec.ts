/**
 * gateway/detached/detached-flow.ts at unit level: the checks before placement and what each refuses,
 * the `queued` record, Idempotency-Key replays, the end of a call no runner took (cancelled,
 * client gone, failed), the 202, the detached signal, and the outcome a finished call counts as.
 * A real DetachedCalls on an in-memory store; the client's response is a recording fake.
 */
import type { ServerResponse } from 'node:http';
import { describe, expect, it } from 'vitest';
import type { GatewayCall } from '../../../gateway/http/call.ts';
import { DetachedCalls } from '../../../gateway/detached/detached.ts';
import type { CallbackDelivery } from '../../../gateway/callbacks/index.ts';
import { DetachedFlow, DetachedSignal, detachedResult } from '../../../gateway/detached/detached-flow.ts';
import type { DetachedReply } from '../../../gateway/detached/detached-flow.ts';
import { PlacerTimeoutError } from '../../../placer/errors.ts';
import { RecordedError } from '../../../gateway/errors.ts';
import { createMemoryStore } from '../../../gateway/store/memory.ts';
import type { CallRecord, CallStore } from '../../../gateway/store/types.ts';
import { silentLogger, systemClock } from '../../../placer/kernel/index.ts';
import { eventually } from '../../support/fleet.ts';
import { gatewayCall } from '../../support/gateway-call.ts';

/** A detached call for model m with `body`, 1 s to be placed and 60 s to run. */
function call(body = '{"model":"m"}', signal = new AbortController().signal, client?: string): GatewayCall {
  const now = Date.now();
  return gatewayCall(now, {
    fn: 'm',
    key: 'm',
    type: 'detached',
    body: Buffer.from(body),
    placerDeadline: now + 1000,
    timeout: 60_000,
    signal,
    ...(client === undefined ? {} : { client }),
  });
}

function setup(options: { store?: CallStore; callbacks?: CallbackDelivery } = {}) {
  const store = options.store ?? createMemoryStore();
  const calls = new DetachedCalls({
    store,
    gatewayId: 'g1',
    resultTtl: 60_000,
    maxResultBytes: 1024,
    executionHeadroom: 1000,
    detachedPlacerTimeout: 1000,
    callbacks: options.callbacks,
    logger: silentLogger,
    clock: systemClock,
  });
  const flow = new DetachedFlow({
    calls,
    store,
    callbacks: options.callbacks,
    clock: systemClock,
    resultTtl: 60_000,
    retryAfter: 7,
  });
  return { store, calls, flow };
}

/** A client response that records what it was answered. */
function reply(
  waitSeconds?: number,
): DetachedReply & { answered: () => { status: number; headers: Record<string, string>; body: string } | undefined } {
  let answer: { status: number; headers: Record<string, string>; body: string } | undefined;
  const out = {
    headersSent: false,
    destroyed: false,
    writeHead(status: number, headers: Record<string, string>) {
      answer = { status, headers, body: '' };
      this.headersSent = true;
    },
    end(body: string | Buffer) {
      answer!.body = String(body);
    },
  };
  return {
    out: out as unknown as ServerResponse,
    headers: { 'sluice-call-id': 'x' },
    preference: { detached: true, waitSeconds },
    answered: () => answer,
  };
}

describe('DetachedFlow.prepare', () => {
  it('records a new call queued, with its Idempotency-Key and callback URL, before any placement', async () => {
    const callbacks: CallbackDelivery = { check: async () => undefined, send: async () => undefined };
    const { flow, store } = setup({ callbacks });
    const c = call();
    const prepared = await flow.prepare(
      c,
      { 'idempotency-key': 'k1', 'sluice-callback-url': 'https://hooks.example/x' },
      new DetachedSignal(new AbortController().signal),
    );
    expect(prepared.kind).toBe('queued');
    // The key is kept in the namespace of calls without a client key.
    expect(await store.get(c.id)).toMatchObject({
      id: c.id,
      status: 'queued',
      owner: 'g1',
      idempotencyKey: '-/k1',
      callbackUrl: 'https://hooks.example/x',
    });
    expect((await store.get(c.id))?.client).toBeUndefined();
  });

  it("keeps each client key's Idempotency-Keys apart: the same key string from two clients makes two calls", async () => {
    const { flow, store } = setup();
    const signal = new DetachedSignal(new AbortController().signal);
    const body = '{"model":"m","n":1}';
    const [a, b, none] = [call(body, undefined, 'key-a'), call(body, undefined, 'key-b'), call(body)];
    for (const c of [a, b, none])
      expect((await flow.prepare(c, { 'idempotency-key': 'same' }, signal)).kind).toBe('queued');
    expect(await store.get(a.id)).toMatchObject({ client: 'key-a', idempotencyKey: 'key-a/same' });
    expect(await store.get(b.id)).toMatchObject({ client: 'key-b', idempotencyKey: 'key-b/same' });
    expect(await store.get(none.id)).toMatchObject({ idempotencyKey: '-/same' });
    // Within one client the key still holds: a second call with it is the first one's.
    const again = await flow.prepare(call(body, undefined, 'key-a'), { 'idempotency-key': 'same' }, signal);
    expect(again).toMatchObject({ kind: 'refused', error: { code: 'GW_IDEMPOTENCY_IN_PROGRESS' } });
  });

  it('refuses a callback URL when callbacks are off, and a malformed Idempotency-Key, recording nothing', async () => {
    const { flow, store } = setup();
    const signal = new DetachedSignal(new AbortController().signal);
    const c1 = call();
    const callback = await flow.prepare(c1, { 'sluice-callback-url': 'https://hooks.example/x' }, signal);
    expect(callback).toMatchObject({ kind: 'refused', error: { code: 'GW_CALLBACKS_DISABLED', status: 400 } });
    const c2 = call();
    const key = await flow.prepare(c2, { 'idempotency-key': 'has space' }, signal);
    expect(key).toMatchObject({ kind: 'refused', error: { code: 'GW_INVALID_IDEMPOTENCY_KEY', status: 400 } });
    expect(await store.get(c1.id)).toBeUndefined();
    expect(await store.get(c2.id)).toBeUndefined();
  });

  it('refuses at once with GW_STORE_UNAVAILABLE and Retry-After while the store health check fails', async () => {
    const base = createMemoryStore();
    const store: CallStore = Object.assign(Object.create(base) as CallStore, {
      health: async () => ({ ok: false as const, reason: 'down' }),
    });
    const { flow } = setup({ store });
    const prepared = await flow.prepare(call(), {}, new DetachedSignal(new AbortController().signal));
    expect(prepared.kind).toBe('refused');
    if (prepared.kind !== 'refused') return;
    expect(prepared.error).toMatchObject({
      code: 'GW_STORE_UNAVAILABLE',
      status: 503,
      headers: { 'retry-after': '7' },
    });
  });

  it('answers an Idempotency-Key replay, in progress while queued, and refuses its reuse for another body', async () => {
    const { flow, store } = setup();
    const signal = new DetachedSignal(new AbortController().signal);
    const first = call('{"model":"m","n":1}');
    expect((await flow.prepare(first, { 'idempotency-key': 'k' }, signal)).kind).toBe('queued');

    const again = await flow.prepare(call('{"model":"m","n":1}'), { 'idempotency-key': 'k' }, signal);
    expect(again).toMatchObject({
      kind: 'refused',
      error: { code: 'GW_IDEMPOTENCY_IN_PROGRESS', status: 409, headers: { 'retry-after': '1' } },
    });

    const other = await flow.prepare(call('{"model":"m","n":2}'), { 'idempotency-key': 'k' }, signal);
    expect(other).toMatchObject({ kind: 'refused', error: { code: 'GW_IDEMPOTENCY_KEY_REUSED', status: 422 } });

    await store.start(first.id, { runner: 'r1', startedAt: Date.now(), delayMs: 1 });
    const replay = await flow.prepare(call('{"model":"m","n":1}'), { 'idempotency-key': 'k' }, signal);
    expect(replay).toMatchObject({ kind: 'replay', record: { id: first.id, status: 'running' } });
  });
});

describe('DetachedFlow.unplaced', () => {
  async function queued(flow: DetachedFlow, run: DetachedSignal, key?: string): Promise<CallRecord> {
    const prepared = await flow.prepare(call(), key ? { 'idempotency-key': key } : {}, run);
    if (prepared.kind !== 'queued') throw new Error(`not queued: ${prepared.kind}`);
    return prepared.record;
  }

  it('ends a call a cancel stopped as cancelled, and answers its waiting client with the record', async () => {
    const { flow, calls, store } = setup();
    const run = new DetachedSignal(new AbortController().signal);
    const record = await queued(flow, run);
    await calls.cancel(record.id);
    expect(run.signal.aborted).toBe(true);
    const client = reply();
    await flow.unplaced(record, run, undefined, client);
    expect(client.answered()).toMatchObject({ status: 202, headers: { location: `/v1/calls/${record.id}` } });
    expect(JSON.parse(client.answered()!.body)).toMatchObject({ id: record.id, status: 'cancelled' });
    expect((await store.get(record.id))?.error?.code).toBe('GW_CALL_CANCELLED');
  });

  it('ends a call whose client left as cancelled with PLACER_ABORTED, answers nobody, and frees its key', async () => {
    const { flow, store } = setup();
    const client = new AbortController();
    const run = new DetachedSignal(client.signal);
    const record = await queued(flow, run, 'k-left');
    client.abort(new Error('client closed the connection'));
    const answer = reply();
    await flow.unplaced(record, run, undefined, answer);
    expect(answer.answered()).toBeUndefined();
    await eventually(async () => (await store.get(record.id))?.status === 'cancelled', 10_000, 'the record ended');
    expect((await store.get(record.id))?.error?.code).toBe('PLACER_ABORTED');
    expect(await store.claimKey('k-left', { callId: 'other', fingerprint: 'f' }, 60_000)).toBeUndefined();
  });

  it('ends a call no runner took in time as failed with the placement code', async () => {
    const { flow, store } = setup();
    const run = new DetachedSignal(new AbortController().signal);
    const record = await queued(flow, run);
    await flow.unplaced(record, run, new PlacerTimeoutError('no runner', 3), reply());
    await eventually(async () => (await store.get(record.id))?.status === 'failed', 10_000, 'the record ended');
    expect((await store.get(record.id))?.error).toEqual({ code: 'PLACER_TIMEOUT', message: 'no runner' });
  });
});

describe('DetachedFlow.answer', () => {
  it('answers 202 with the status monitor, and the stored result itself for wait=N once the call is final', async () => {
    const { flow, store } = setup();
    const record: CallRecord = {
      id: 'done-1',
      fn: 'm',
      status: 'queued',
      createdAt: Date.now(),
      owner: 'g1',
      expiresAt: Date.now() + 60_000,
    };
    const accepted = reply();
    await flow.answer(record, accepted);
    expect(accepted.answered()).toMatchObject({
      status: 202,
      headers: { 'preference-applied': 'respond-async', location: '/v1/calls/done-1', 'sluice-call-id': 'x' },
    });
    expect(JSON.parse(accepted.answered()!.body).urls).toEqual({
      status: '/v1/calls/done-1',
      result: '/v1/calls/done-1/result',
      cancel: '/v1/calls/done-1/cancel',
    });

    await store.create(record);
    await store.start(record.id, { runner: 'r1', startedAt: Date.now(), delayMs: 0 });
    await store.finish(
      record.id,
      { status: 'succeeded', completedAt: Date.now() },
      { status: 200, contentType: 'application/json', body: Buffer.from('{"ok":true}') },
    );
    const final = (await store.get(record.id))!;
    const waited = reply(5);
    await flow.answer(final, waited);
    expect(waited.answered()).toMatchObject({
      status: 200,
      body: '{"ok":true}',
      headers: { 'preference-applied': 'wait=5' },
    });
  });
});

describe('DetachedSignal', () => {
  it('is aborted by its client leaving before commit, and not after', () => {
    const before = new AbortController();
    const early = new DetachedSignal(before.signal);
    before.abort(new Error('gone'));
    expect(early.signal.aborted).toBe(true);

    const after = new AbortController();
    const late = new DetachedSignal(after.signal);
    late.commit();
    after.abort(new Error('gone'));
    expect(late.signal.aborted).toBe(false);
  });
});

describe('detachedResult', () => {
  it('counts a finished call by its final status, with the record error as a RecordedError', () => {
    const base: CallRecord = { id: 'i', fn: 'm', status: 'succeeded', createdAt: 0, owner: 'g1', expiresAt: 1 };
    expect(detachedResult({ record: base, totalMs: 50, execMs: 30 }, 'r1')).toEqual({
      outcome: 'completed',
      status: 202,
      runner: 'r1',
      totalMs: 50,
      latencyMs: 20,
      execMs: 30,
    });
    const cancelled = detachedResult(
      {
        record: {
          ...base,
          status: 'cancelled',
          error: { code: 'GW_CALL_CANCELLED', message: 'the call was cancelled' },
        },
        totalMs: 5,
        execMs: undefined,
      },
      'r1',
    );
    expect(cancelled.outcome).toBe('cancelled');
    expect(cancelled.error).toBeInstanceOf(RecordedError);
    expect(cancelled.error).toMatchObject({ code: 'GW_CALL_CANCELLED', status: 502 });
    expect(
      detachedResult({ record: { ...base, status: 'expired' }, totalMs: 5, execMs: undefined }, 'r1').outcome,
    ).toBe('timeouts');
    expect(detachedResult({ record: { ...base, status: 'failed' }, totalMs: 5, execMs: undefined }, 'r1').outcome).toBe(
      'errors',
    );
  });
});
