/**
 * The CallStore contract, part one: records, finishing and results (see contract.ts).
 */
import { randomBytes } from 'node:crypto';
import { expect, it } from 'vitest';
import { cancelled, json, runningRecord, succeeded, withRecord } from './call-fixtures.ts';
import type { MakeStore } from './call-fixtures.ts';

/** Registers the record, finish and result tests; `fixture` makes a store closed after the test. */
export function callTests(fixture: MakeStore): void {
  it('returns the record as created when asked by id', async () => {
    const { store, record } = await withRecord(fixture, (t) =>
      runningRecord(t, { callbackUrl: 'https://hooks.example/done', idempotencyKey: 'k-1' }),
    );
    expect(await store.get(record.id)).toEqual(record);
  });

  it('returns undefined when the id is unknown', async () => {
    const { store } = await fixture();
    expect(await store.get('call-nope')).toBeUndefined();
    expect(await store.getResult('call-nope')).toBeUndefined();
  });

  it('returns copies, so changing one changes nothing stored', async () => {
    const { store, record } = await withRecord(fixture, runningRecord);
    record.fn = 'changed';
    const read = (await store.get(record.id))!;
    read.status = 'failed';
    expect(await store.get(record.id)).toMatchObject({ fn: 'sim-small', status: 'running' });
  });

  it('rejects a record that is not queued or running, or whose id is taken, keeping the first', async () => {
    const { store, t, record } = await withRecord(fixture, runningRecord);
    await expect(store.create({ ...record, fn: 'other' })).rejects.toMatchObject({ code: 'STORE_INVALID_RECORD' });
    await expect(store.create(runningRecord(t, { status: 'succeeded' }))).rejects.toMatchObject({
      code: 'STORE_INVALID_RECORD',
    });
    await expect(store.create({ ...record, status: 'queued' })).rejects.toMatchObject({ code: 'STORE_INVALID_RECORD' });
    expect(await store.get(record.id)).toEqual(record);
  });

  it('returns true and stores the final record and result when a running call finishes', async () => {
    const { store, t, record } = await withRecord(fixture, runningRecord);
    expect(await store.getResult(record.id)).toBeUndefined();
    expect(await store.finish(record.id, succeeded(t), json('{"ok":true}'))).toBe(true);
    expect(await store.get(record.id)).toEqual({
      ...record,
      status: 'succeeded',
      completedAt: t + 50,
      executionMs: 47,
    });
    expect(await store.getResult(record.id)).toEqual(json('{"ok":true}'));
  });

  it('returns false and changes nothing when a finished call is finished again', async () => {
    const { store, t, record } = await withRecord(fixture, runningRecord);
    await store.finish(record.id, succeeded(t), json('first'));
    const before = await store.get(record.id);
    const error = { code: 'GW_CALL_TIMEOUT', message: 'late' };
    expect(await store.finish(record.id, { status: 'failed', completedAt: t + 99, error }, json('second'))).toBe(false);
    expect(await store.get(record.id)).toEqual(before);
    expect(await store.getResult(record.id)).toEqual(json('first'));
  });

  it('returns false when finishing an unknown id, and stores nothing for it', async () => {
    const { store, now } = await fixture();
    const t = now();
    expect(await store.finish('call-nope', succeeded(t), json('x'))).toBe(false);
    expect(await store.get('call-nope')).toBeUndefined();
    expect(await store.getResult('call-nope')).toBeUndefined();
  });

  it('keeps a cancel that won the race: the late success returns false and stores no result', async () => {
    const { store, t, record } = await withRecord(fixture, runningRecord);
    const cancel = cancelled(t, 10);
    expect(await store.finish(record.id, cancel)).toBe(true);
    expect(await store.finish(record.id, succeeded(t), json('too late'))).toBe(false);
    expect(await store.get(record.id)).toMatchObject({ status: 'cancelled', error: cancel.error, completedAt: t + 10 });
    expect(await store.getResult(record.id)).toBeUndefined();
  });

  // Half the attempts go through the peer: over Redis, two connections racing like two gateways.
  it('lets exactly one of many concurrent finishes win', async () => {
    const { store, peer, t, record } = await withRecord(fixture, runningRecord);
    const stores = [store, await peer()];
    const statuses = ['succeeded', 'failed', 'cancelled', 'expired'] as const;
    const attempts = Array.from({ length: 12 }, (_, i) => statuses[i % 4]!);
    const won = await Promise.all(
      attempts.map((status, i) => stores[i % 2]!.finish(record.id, { status, completedAt: t + i }, json(String(i)))),
    );
    expect(won.filter(Boolean)).toHaveLength(1);
    const winner = won.indexOf(true);
    expect(await store.get(record.id)).toMatchObject({ status: attempts[winner], completedAt: t + winner });
    expect((await store.getResult(record.id))?.body.toString()).toBe(String(winner));
  });

  it('returns result bytes exactly as stored, whatever they are', async () => {
    const { store, now } = await fixture();
    const t = now();
    const bodies = [randomBytes(64 * 1024), Buffer.from([0, 0xff, 0xfe, 0, 0x80, 0x0d, 0x0a]), Buffer.alloc(0)];
    for (const body of bodies) {
      const record = runningRecord(t);
      await store.create(record);
      const result = { status: 207, contentType: 'application/octet-stream; x="y"', body };
      await store.finish(record.id, succeeded(t), result);
      const read = (await store.getResult(record.id))!;
      expect(read.status).toBe(207);
      expect(read.contentType).toBe(result.contentType);
      expect(Buffer.isBuffer(read.body)).toBe(true);
      expect(read.body.equals(body)).toBe(true);
    }
  });

  it('stores no result when a call finishes without one', async () => {
    const { store, t, record } = await withRecord(fixture, runningRecord);
    const error = { code: 'GW_RUNNER_FAILED_AFTER_COMMIT', message: 'runner went away' };
    expect(await store.finish(record.id, { status: 'failed', completedAt: t + 5, error })).toBe(true);
    expect(await store.get(record.id)).toMatchObject({ status: 'failed', error });
    expect(await store.getResult(record.id)).toBeUndefined();
  });
}
