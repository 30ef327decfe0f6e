/**
 * The CallStore contract, part two: what gateways share through a store (Idempotency-Keys,
 * cancels, each other's calls) and how long the store keeps things (see contract.ts).
 */
import { randomUUID } from 'node:crypto';
import { expect, it, vi } from 'vitest';
import type { CallStore } from '../../../gateway/store/index.ts';
import {
  EXPIRY,
  SHORT_TTL,
  json,
  queuedRecord,
  runningRecord,
  startAt,
  succeeded,
  withRecord,
} from './call-fixtures.ts';
import type { MakeStore } from './call-fixtures.ts';

/** Registers the key, cancel, sharing, expiry and close tests. */
export function sharingTests(fixture: MakeStore): void {
  it('gives a key to the first claim and returns that claim to later ones', async () => {
    const { store } = await fixture();
    const key = `key-${randomUUID()}`;
    const first = { callId: 'call-1', fingerprint: 'f1' };
    expect(await store.claimKey(key, first, 60_000)).toBeUndefined();
    expect(await store.claimKey(key, { callId: 'call-2', fingerprint: 'f2' }, 60_000)).toEqual(first);
    expect(await store.claimKey(key, { callId: 'call-3', fingerprint: 'f1' }, 60_000)).toEqual(first);
  });

  it('gives a key to exactly one of many concurrent claims', async () => {
    const { store, peer } = await fixture();
    const stores = [store, await peer()];
    const key = `key-${randomUUID()}`;
    const claims = Array.from({ length: 10 }, (_, i) => ({ callId: `call-${i}`, fingerprint: `f${i}` }));
    const answers = await Promise.all(claims.map((claim, i) => stores[i % 2]!.claimKey(key, claim, 60_000)));
    const winner = answers.indexOf(undefined);
    expect(answers.filter((a) => a === undefined)).toHaveLength(1);
    for (const answer of answers) if (answer) expect(answer).toEqual(claims[winner]);
  });

  it('frees a key on release only for the call that holds it', async () => {
    const { store } = await fixture();
    const key = `key-${randomUUID()}`;
    const first = { callId: 'call-1', fingerprint: 'f1' };
    await store.claimKey(key, first, 60_000);
    await store.releaseKey(key, 'call-2');
    expect(await store.claimKey(key, { callId: 'call-2', fingerprint: 'f1' }, 60_000)).toEqual(first);
    await store.releaseKey(key, 'call-1');
    expect(await store.claimKey(key, { callId: 'call-3', fingerprint: 'f1' }, 60_000)).toBeUndefined();
    await store.releaseKey(`key-${randomUUID()}`, 'call-3');
  });

  it('frees a key once its own TTL has passed', async () => {
    const { store, elapse } = await fixture();
    const key = `key-${randomUUID()}`;
    await store.claimKey(key, { callId: 'call-1', fingerprint: 'f1' }, SHORT_TTL);
    elapse(SHORT_TTL + 1);
    const next = { callId: 'call-2', fingerprint: 'f1' };
    await vi.waitFor(async () => expect(await store.claimKey(key, next, 60_000)).toBeUndefined(), EXPIRY);
  });

  it('rejects a claim TTL that is not a positive integer', async () => {
    const { store } = await fixture();
    for (const ttl of [0, -1, 1.5, Number.NaN]) {
      await expect(store.claimKey('k', { callId: 'c', fingerprint: 'f' }, ttl)).rejects.toMatchObject({
        code: 'STORE_INVALID_OPTION',
      });
    }
  });

  it("delivers a cancel to its owner's handler and to no other owner's", async () => {
    const { store, peer } = await fixture();
    const other = await peer();
    const seen = { a: [] as string[], b: [] as string[] };
    await store.onCancel('gateway-a', (id) => seen.a.push(id));
    await other.onCancel('gateway-b', (id) => seen.b.push(id));
    await other.requestCancel('call-1', 'gateway-a');
    await store.requestCancel('call-2', 'gateway-b');
    // A last cancel to each owner: once it arrives, anything misrouted before it would have too.
    await store.requestCancel('call-3', 'gateway-a');
    await other.requestCancel('call-4', 'gateway-b');
    await vi.waitFor(() => expect(seen.a.length + seen.b.length).toBeGreaterThanOrEqual(4), EXPIRY);
    expect(seen).toEqual({ a: ['call-1', 'call-3'], b: ['call-2', 'call-4'] });
  });

  it('resolves a cancel addressed to an owner nobody listens for', async () => {
    const { store } = await fixture();
    await expect(store.requestCancel('call-1', `gone-${randomUUID()}`)).resolves.toBeUndefined();
  });

  it('shows one store the calls, finishes and results another made', async () => {
    const { store, peer, now } = await fixture();
    const t = now();
    const other = await peer();
    const record = runningRecord(t);
    await store.create(record);
    expect(await other.get(record.id)).toEqual(record);
    expect(await other.finish(record.id, succeeded(t), json('done'))).toBe(true);
    expect(await store.finish(record.id, { status: 'cancelled', completedAt: t })).toBe(false);
    expect(await store.getResult(record.id)).toEqual(json('done'));
  });

  it('forgets a finished call and its result once the result TTL has passed', async () => {
    const { store, elapse, t, record } = await withRecord(fixture, runningRecord, { resultTtl: SHORT_TTL });
    await store.finish(record.id, succeeded(t), json('soon gone'));
    elapse(SHORT_TTL + 1);
    await vi.waitFor(async () => {
      expect(await store.get(record.id)).toBeUndefined();
      expect(await store.getResult(record.id)).toBeUndefined();
    }, EXPIRY);
    expect(await store.finish(record.id, succeeded(t))).toBe(false);
  });

  // A forgotten call can be neither started nor finished: what would move it on next returns false.
  it.each([
    ['queued', queuedRecord, (store: CallStore, id: string, t: number) => store.start(id, startAt(t))],
    ['running', runningRecord, (store: CallStore, id: string, t: number) => store.finish(id, succeeded(t))],
  ] as const)('forgets a %s call once its lifetime and the result TTL have passed', async (_state, make, next) => {
    const { store, elapse, t, record } = await withRecord(fixture, (t) => make(t, { expiresAt: t + 100 }), {
      resultTtl: SHORT_TTL,
    });
    elapse(100 + SHORT_TTL);
    await vi.waitFor(async () => expect(await store.get(record.id)).toBeUndefined(), EXPIRY);
    expect(await next(store, record.id, t)).toBe(false);
  });

  it('rejects every call with STORE_UNAVAILABLE after close, which is idempotent', async () => {
    const { store } = await fixture();
    await store.close();
    await store.close();
    await expect(store.get('call-1')).rejects.toMatchObject({ code: 'STORE_UNAVAILABLE', status: 503 });
    await expect(store.claimKey('k', { callId: 'c', fingerprint: 'f' }, 1000)).rejects.toMatchObject({
      code: 'STORE_UNAVAILABLE',
    });
    await expect(store.onCancel('gateway-a', () => {})).rejects.toMatchObject({ code: 'STORE_UNAVAILABLE' });
  });
}
