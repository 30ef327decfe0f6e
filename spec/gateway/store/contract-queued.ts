/**
 * The CallStore contract, part four: calls recorded `queued` before placement, and `start`, the
 * compare-and-set that moves one to `running` when a runner commits (see contract.ts).
 */
import { expect, it } from 'vitest';
import type { CallStart } from '../../../gateway/store/index.ts';
import { cancelled, json, queuedRecord, startAt, runningRecord, succeeded, withRecord } from './call-fixtures.ts';
import type { MakeStore } from './call-fixtures.ts';

/** Registers the queued-record and start tests. */
export function queuedTests(fixture: MakeStore): void {
  it('keeps a queued record as created, without a runner, and counts no bytes for it', async () => {
    const { store, now } = await fixture();
    const record = queuedRecord(now(), { callbackUrl: 'https://hooks.example/done', idempotencyKey: 'k-q' });
    await store.create(record);
    const read = await store.get(record.id);
    expect(read).toEqual(record);
    expect(read).not.toHaveProperty('runner');
    expect(await store.health()).toMatchObject({ ok: true, storedBytes: 0 });
  });

  it('moves a queued call to running with its runner, start time and delay, and returns true', async () => {
    const { store, t, record } = await withRecord(fixture, queuedRecord);
    expect(await store.start(record.id, startAt(t))).toBe(true);
    expect(await store.get(record.id)).toEqual({
      ...record,
      status: 'running',
      runner: 'runner-1',
      startedAt: t + 7,
      delayMs: 7,
    });
  });

  it('returns false and changes nothing when the call is running, final or unknown', async () => {
    const { store, now } = await fixture();
    const t = now();
    const running = runningRecord(t);
    await store.create(running);
    expect(await store.start(running.id, startAt(t, 'runner-2'))).toBe(false);
    expect(await store.get(running.id)).toEqual(running);

    const queued = queuedRecord(t);
    await store.create(queued);
    expect(await store.start(queued.id, startAt(t))).toBe(true);
    expect(await store.start(queued.id, startAt(t + 100, 'runner-2'))).toBe(false);
    expect(await store.get(queued.id)).toMatchObject({ status: 'running', runner: 'runner-1', startedAt: t + 7 });

    expect(await store.start('call-nope', startAt(t))).toBe(false);
    expect(await store.get('call-nope')).toBeUndefined();
  });

  it('finishes a queued call, after which a start returns false and the record stays final', async () => {
    const { store, t, record } = await withRecord(fixture, queuedRecord);
    const cancel = cancelled(t, 3);
    expect(await store.finish(record.id, cancel)).toBe(true);
    expect(await store.start(record.id, startAt(t))).toBe(false);
    expect(await store.get(record.id)).toEqual({
      ...record,
      status: 'cancelled',
      completedAt: t + 3,
      error: cancel.error,
    });
  });

  it('writes the start a finish carries, with the result, when the call is still queued', async () => {
    const { store, t, record } = await withRecord(fixture, queuedRecord);
    expect(await store.finish(record.id, { ...succeeded(t), start: startAt(t) }, json('{"ok":1}'))).toBe(true);
    expect(await store.get(record.id)).toEqual({
      ...record,
      status: 'succeeded',
      runner: 'runner-1',
      startedAt: t + 7,
      delayMs: 7,
      completedAt: t + 50,
      executionMs: 47,
    });
    expect(await store.getResult(record.id)).toEqual(json('{"ok":1}'));
  });

  // Half the attempts go through the peer: over Redis, two connections racing like two gateways.
  it('lets exactly one of many concurrent starts win', async () => {
    const { store, peer, t, record } = await withRecord(fixture, queuedRecord);
    const stores = [store, await peer()];
    const won = await Promise.all(
      Array.from({ length: 8 }, (_, i) => stores[i % 2]!.start(record.id, startAt(t, `runner-${i}`))),
    );
    expect(won.filter(Boolean)).toHaveLength(1);
    expect(await store.get(record.id)).toMatchObject({ status: 'running', runner: `runner-${won.indexOf(true)}` });
  });

  it('rejects a start without a runner or with a time that is not a number, changing nothing', async () => {
    const { store, t, record } = await withRecord(fixture, queuedRecord);
    const bad: unknown[] = [
      { ...startAt(t), runner: '' },
      { ...startAt(t), startedAt: Number.NaN },
      { runner: 'runner-1', startedAt: t },
    ];
    for (const start of bad) {
      await expect(store.start(record.id, start as CallStart)).rejects.toMatchObject({ code: 'STORE_INVALID_RECORD' });
    }
    expect(await store.get(record.id)).toEqual(record);
  });
}
