import { describe, expect, it } from 'vitest';
import { SluiceError } from '../../../placer/kernel/index.ts';
import { RECORD_OVERHEAD_BYTES, createMemoryStore } from '../../../gateway/store/index.ts';
import type { MemoryStoreOptions } from '../../../gateway/store/index.ts';
import type { LogFields } from '../../../placer/kernel/index.ts';
import { warningRecorder } from '../../support/logger.ts';
import { runningRecord } from './call-fixtures.ts';
import { describeCallStore } from './contract.ts';

const T0 = 1_700_000_000_000;

/** A clock that moves only when told, shared by the store and the records it stamps. */
function fakeClock() {
  let t = T0;
  return { now: () => t, elapse: (ms: number) => void (t += ms) };
}

function memoryStore(options: MemoryStoreOptions = {}) {
  const clock = fakeClock();
  return { store: createMemoryStore({ now: clock.now, ...options }), ...clock };
}

// Two gateways cannot share a memory store, so the peer is the store itself: two owners on it.
describeCallStore('memory store', async (options) => {
  const { store, now, elapse } = memoryStore(options);
  return { store, now, elapse, peer: async () => store, close: () => store.close() };
});

const bytes = (n: number) => ({ status: 200, contentType: 'application/octet-stream', body: Buffer.alloc(n, 7) });
const done = { status: 'succeeded', completedAt: T0 + 1 } as const;

describe('createMemoryStore', () => {
  it('keeps a finished call until its result TTL has passed, and not a millisecond more', async () => {
    const { store, now, elapse } = memoryStore({ resultTtl: 1000 });
    const record = runningRecord(now());
    await store.create(record);
    await store.finish(record.id, done, bytes(10));
    elapse(1000);
    expect(await store.getResult(record.id)).toBeDefined();
    elapse(1);
    expect(await store.get(record.id)).toBeUndefined();
    expect(await store.getResult(record.id)).toBeUndefined();
  });

  it('keeps every result until its TTL when full, refusing the next one, and logs no eviction', async () => {
    const warnings: LogFields[] = [];
    const { store, now, elapse } = memoryStore({
      resultTtl: 1000,
      maxStoredBytes: 3 * (RECORD_OVERHEAD_BYTES + 1000),
      logger: warningRecorder(warnings),
    });
    const finished = [];
    for (let i = 0; i < 3; i++) {
      const record = runningRecord(now());
      await store.create(record);
      await store.finish(record.id, done, bytes(1000));
      finished.push(record.id);
      elapse(100);
    }
    const late = runningRecord(now());
    await store.create(late);
    await expect(store.finish(late.id, done, bytes(1000))).rejects.toMatchObject({ code: 'STORE_FULL' });
    elapse(700); // the first result is 1000 ms old: still kept
    await expect(store.finish(late.id, done, bytes(1000))).rejects.toMatchObject({ code: 'STORE_FULL' });
    expect(await Promise.all(finished.map(async (id) => (await store.getResult(id)) !== undefined))).toEqual([
      true,
      true,
      true,
    ]);
    elapse(1); // now it is past its TTL, and its bytes are free
    expect(await store.finish(late.id, done, bytes(1000))).toBe(true);
    expect(await store.getResult(finished[0]!)).toBeUndefined();
    expect(await store.health()).toEqual({
      ok: true,
      storedBytes: 3 * (RECORD_OVERHEAD_BYTES + 1000),
      maxStoredBytes: 3 * (RECORD_OVERHEAD_BYTES + 1000),
    });
    expect(warnings).toEqual([]);
  });

  it('rejects a result larger than the whole bound with STORE_FULL and leaves the call running', async () => {
    const { store, now } = memoryStore({ maxStoredBytes: 10_000 });
    const record = runningRecord(now());
    await store.create(record);
    await expect(store.finish(record.id, done, bytes(10_000))).rejects.toMatchObject({
      code: 'STORE_FULL',
      bytes: 10_000 + RECORD_OVERHEAD_BYTES,
      storedBytes: 0,
    });
    expect(await store.get(record.id)).toMatchObject({ status: 'running' });
    expect(await store.finish(record.id, { ...done, status: 'failed' })).toBe(true);
  });

  it('drops the oldest Idempotency-Keys beyond maxKeys', async () => {
    const { store } = memoryStore({ maxKeys: 2 });
    for (const key of ['a', 'b', 'c']) await store.claimKey(key, { callId: `call-${key}`, fingerprint: 'f' }, 60_000);
    expect(await store.claimKey('a', { callId: 'call-x', fingerprint: 'f' }, 60_000)).toBeUndefined();
    expect(await store.claimKey('c', { callId: 'call-x', fingerprint: 'f' }, 60_000)).toMatchObject({
      callId: 'call-c',
    });
  });

  it('logs a cancel handler that throws and still resolves the request', async () => {
    const warnings: LogFields[] = [];
    const { store } = memoryStore({ logger: warningRecorder(warnings) });
    let calls = 0;
    await store.onCancel('gateway-a', () => {
      calls++;
      throw new Error('handler bug');
    });
    await expect(store.requestCancel('call-1', 'gateway-a')).resolves.toBeUndefined();
    await Promise.resolve();
    expect(calls).toBe(1);
    expect(warnings).toMatchObject([{ msg: 'cancel handler failed', callId: 'call-1', owner: 'gateway-a' }]);
  });

  it.each([
    [{ resultTtl: 0 }, 'resultTtl must be a positive integer, got 0'],
    [{ resultTtl: 1.5 }, 'resultTtl must be a positive integer, got 1.5'],
    [{ resultTtl: '10' }, 'resultTtl must be a positive integer, got "10"'],
    [{ resultTtl: 2 ** 31 }, 'resultTtl must be at most 2147483647 ms, got 2147483648'],
    [{ maxStoredBytes: 0 }, 'maxStoredBytes must be a positive integer, got 0'],
    [{ maxStoredBytes: Infinity }, 'maxStoredBytes must be a positive integer, got Infinity'],
    [{ maxStoredBytes: Number.NaN }, 'maxStoredBytes must be a positive integer, got NaN'],
    [{ maxStoredBytes: 100 }, `maxStoredBytes must be at least ${RECORD_OVERHEAD_BYTES} (one empty record), got 100`],
    [{ maxKeys: 0 }, 'maxKeys must be a positive integer, got 0'],
    [{ maxKeys: Infinity }, 'maxKeys must be a positive integer, got Infinity'],
    [{ now: 5 }, 'now must be a function, got 5'],
    [{ logger: {} }, 'logger must have debug, info, warn and error methods, got {}'],
  ])('refuses %o with a message naming the option', (options, message) => {
    const attempt = () => createMemoryStore(options as MemoryStoreOptions);
    expect(attempt).toThrow(message);
    try {
      attempt();
    } catch (error) {
      expect(error).toBeInstanceOf(SluiceError);
      expect(error).toMatchObject({ code: 'STORE_INVALID_OPTION', name: 'StoreConfigError' });
    }
  });
});
