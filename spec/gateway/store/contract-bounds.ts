/**
 * The CallStore contract, part three: the byte bound (results refused, never evicted early) and
 * the health check (see contract.ts).
 */
import { expect, it, vi } from 'vitest';
import { RECORD_OVERHEAD_BYTES } from '../../../gateway/store/index.ts';
import type { CallStore, StoredResult } from '../../../gateway/store/index.ts';
import { EXPIRY, SHORT_TTL, queuedRecord, runningRecord, succeeded } from './call-fixtures.ts';
import type { MakeStore } from './call-fixtures.ts';

/** What one result of `n` body bytes counts against the bound. */
const entry = (n: number) => RECORD_OVERHEAD_BYTES + n;
const body = (n: number): StoredResult => ({
  status: 200,
  contentType: 'application/octet-stream',
  body: Buffer.alloc(n, 7),
});

/** Creates a running call and finishes it with an `n`-byte result; resolves with its id. */
async function stored(store: CallStore, t: number, n: number): Promise<string> {
  const record = runningRecord(t);
  await store.create(record);
  expect(await store.finish(record.id, succeeded(t), body(n))).toBe(true);
  return record.id;
}

/** Registers the bound and health tests. */
export function boundTests(fixture: MakeStore): void {
  it('answers a health check with the bytes its finished calls keep and its bound', async () => {
    const { store, now } = await fixture({ maxStoredBytes: 10 * entry(1000) });
    expect(await store.health()).toEqual({ ok: true, storedBytes: 0, maxStoredBytes: 10 * entry(1000) });
    await stored(store, now(), 1000);
    const failed = runningRecord(now());
    await store.create(failed);
    await store.finish(failed.id, { status: 'failed', completedAt: now(), error: { code: 'X', message: 'no result' } });
    // A store may repeat a health answer for about a second.
    await vi.waitFor(
      async () => expect(await store.health()).toMatchObject({ ok: true, storedBytes: entry(1000) + entry(0) }),
      EXPIRY,
    );
  });

  it('refuses a result that does not fit with STORE_FULL, keeping every earlier one and the call running', async () => {
    const { store, now } = await fixture({ maxStoredBytes: 3 * entry(1000) });
    const t = now();
    const kept = [await stored(store, t, 1000), await stored(store, t, 1000), await stored(store, t, 1000)];
    const record = runningRecord(t);
    await store.create(record);
    const refusal = await store.finish(record.id, succeeded(t), body(1000)).catch((error: unknown) => error);
    expect(refusal).toMatchObject({
      code: 'STORE_FULL',
      status: 503,
      bytes: entry(1000),
      storedBytes: 3 * entry(1000),
      maxStoredBytes: 3 * entry(1000),
    });
    expect((refusal as Error).message).toContain('maxStoredBytes=');
    for (const id of kept) expect((await store.getResult(id))?.body.length).toBe(1000);
    expect(await store.get(record.id)).toMatchObject({ status: 'running' });
    expect(await store.getResult(record.id)).toBeUndefined();
  });

  it('never refuses a finish without a result, even past the bound, and counts it', async () => {
    const { store, now } = await fixture({ maxStoredBytes: 2 * entry(0) });
    const t = now();
    await stored(store, t, RECORD_OVERHEAD_BYTES - 1);
    await expect(stored(store, t, 1)).rejects.toMatchObject({ code: 'STORE_FULL' });
    for (let i = 0; i < 3; i++) {
      const record = runningRecord(t);
      await store.create(record);
      expect(
        await store.finish(record.id, {
          status: 'failed',
          completedAt: t,
          error: { code: 'GW_STORE_FULL', message: 'no room' },
        }),
      ).toBe(true);
    }
    await vi.waitFor(
      async () =>
        expect(await store.health()).toMatchObject({ storedBytes: entry(RECORD_OVERHEAD_BYTES - 1) + 3 * entry(0) }),
      EXPIRY,
    );
  });

  it('gives the bytes back when results expire, and only then takes a result that did not fit', async () => {
    const { store, now, elapse } = await fixture({ resultTtl: SHORT_TTL, maxStoredBytes: 2 * entry(1000) });
    const t = now();
    const first = await stored(store, t, 1000);
    await stored(store, t, 1000);
    const record = runningRecord(t, { expiresAt: t + 60_000 });
    await store.create(record);
    await expect(store.finish(record.id, succeeded(t), body(1000))).rejects.toMatchObject({ code: 'STORE_FULL' });
    elapse(SHORT_TTL + 1);
    await vi.waitFor(async () => expect(await store.getResult(first)).toBeUndefined(), EXPIRY);
    await vi.waitFor(async () => expect(await store.finish(record.id, succeeded(t), body(1000))).toBe(true), EXPIRY);
    expect((await store.getResult(record.id))?.body.length).toBe(1000);
  });

  // Over Redis the peer is a second connection, as a second gateway has: the bound is shared.
  it('lets exactly as many concurrent results in as fit, across stores over the same data', async () => {
    const { store, peer, now } = await fixture({ maxStoredBytes: 5 * entry(100) });
    const stores = [store, await peer()];
    const t = now();
    const records = Array.from({ length: 12 }, () => runningRecord(t));
    for (const record of records) await store.create(record);
    const answers = await Promise.all(
      records.map((record, i) =>
        stores[i % 2]!.finish(record.id, succeeded(t), body(100)).catch((error: { code?: string }) => error.code),
      ),
    );
    expect(answers.filter((a) => a === true)).toHaveLength(5);
    expect(answers.filter((a) => a === 'STORE_FULL')).toHaveLength(7);
    await vi.waitFor(
      async () => expect(await stores[1]!.health()).toMatchObject({ storedBytes: 5 * entry(100) }),
      EXPIRY,
    );
  });

  it('reserves room for a result at create: of creates in parallel only as many as fit are written, across stores', async () => {
    const { store, peer, now } = await fixture({ maxStoredBytes: 3 * entry(1000) });
    const stores = [store, await peer()];
    const t = now();
    const records = Array.from({ length: 10 }, () => queuedRecord(t, { expiresAt: t + 60_000 }));
    const answers = await Promise.all(
      records.map((record, i) =>
        stores[i % 2]!.create(record, entry(1000)).then(
          () => true,
          (error: { code?: string }) => error.code,
        ),
      ),
    );
    expect(answers.filter((a) => a === true)).toHaveLength(3);
    expect(answers.filter((a) => a === 'STORE_FULL')).toHaveLength(7);
    // A refused create wrote nothing; the reservations count in the health check.
    for (const [i, record] of records.entries())
      if (answers[i] !== true) expect(await store.get(record.id)).toBeUndefined();
    await vi.waitFor(
      async () => expect(await stores[1]!.health()).toMatchObject({ storedBytes: 3 * entry(1000) }),
      EXPIRY,
    );
  });

  it("takes a result into its own call's reservation, and gives the rest back at finish", async () => {
    const { store, now } = await fixture({ maxStoredBytes: 2 * entry(1000) });
    const t = now();
    const a = queuedRecord(t, { expiresAt: t + 60_000 });
    const b = queuedRecord(t, { expiresAt: t + 60_000 });
    await store.create(a, entry(1000));
    await store.create(b, entry(1000));
    await expect(store.create(queuedRecord(t, { expiresAt: t + 60_000 }), entry(1000))).rejects.toMatchObject({
      code: 'STORE_FULL',
      bytes: entry(1000),
    });
    // Each result fits in its own room although the bound is all reserved.
    expect(await store.finish(a.id, succeeded(t), body(1000))).toBe(true);
    expect(
      await store.finish(b.id, { status: 'failed', completedAt: t, error: { code: 'X', message: 'no result' } }),
    ).toBe(true);
    await vi.waitFor(
      async () => expect(await store.health()).toMatchObject({ storedBytes: entry(1000) + entry(0) }),
      EXPIRY,
    );
    await store.create(queuedRecord(t, { expiresAt: t + 60_000 }), 1000 - RECORD_OVERHEAD_BYTES + 1000);
  });

  it('lets the reservation of a call nobody finished lapse at its expiresAt', async () => {
    const { store, now, elapse } = await fixture({ maxStoredBytes: entry(1000) });
    const t = now();
    await store.create(queuedRecord(t, { expiresAt: t + SHORT_TTL }), entry(1000));
    await expect(store.create(queuedRecord(t, { expiresAt: t + 60_000 }), entry(1000))).rejects.toMatchObject({
      code: 'STORE_FULL',
    });
    elapse(SHORT_TTL);
    await vi.waitFor(() => store.create(queuedRecord(now(), { expiresAt: now() + 60_000 }), entry(1000)), EXPIRY);
  });

  it('answers a health check after close with ok false and a reason, without rejecting', async () => {
    const { store } = await fixture();
    await store.close();
    const health = await store.health();
    expect(health.ok).toBe(false);
    expect(health).toMatchObject({ reason: expect.stringContaining('closed') });
  });

  it('refuses a maxStoredBytes below one empty record', async () => {
    await expect(fixture({ maxStoredBytes: RECORD_OVERHEAD_BYTES - 1 })).rejects.toThrow(
      `maxStoredBytes must be at least ${RECORD_OVERHEAD_BYTES} (one empty record), got ${RECORD_OVERHEAD_BYTES - 1}`,
    );
  });
}
