import { describe, expect, it } from 'vitest';
import { SluiceError } from '../../../placer/errors.ts';
import { RECORD_OVERHEAD_BYTES, createMemoryStore } from '../../../gateway/store/index.ts';
import type { MemoryStoreOptions } from '../../../gateway/store/index.ts';
import type { LogFields } from '../../../placer/log.ts';
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

  it('evicts the oldest finished calls, never running ones, when over maxBytes', async () => {
    const entry = RECORD_OVERHEAD_BYTES + 1000;
    const warnings: LogFields[] = [];
    const { store, now } = memoryStore({ maxBytes: 3 * entry, logger: warningRecorder(warnings) });
    const running = runningRecord(now());
    await store.create(running);
    const finished = [];
    for (let i = 0; i < 5; i++) {
      const record = runningRecord(now());
      await store.create(record);
      await store.finish(record.id, done, bytes(1000));
      finished.push(record.id);
      // Reading the oldest must not save it: eviction goes by when calls finished.
      await store.getResult(finished[0]!);
    }
    const kept = await Promise.all(finished.map(async (id) => (await store.getResult(id)) !== undefined));
    expect(kept).toEqual([false, false, true, true, true]);
    expect(await store.get(finished[0]!)).toBeUndefined();
    expect(await store.get(running.id)).toMatchObject({ status: 'running' });
    expect(warnings.map((w) => w.callId)).toEqual(finished.slice(0, 2));
  });

  it('rejects a result larger than maxBytes with STORE_RESULT_TOO_LARGE and leaves the call running', async () => {
    const { store, now } = memoryStore({ maxBytes: 10_000 });
    const record = runningRecord(now());
    await store.create(record);
    await expect(store.finish(record.id, done, bytes(10_000))).rejects.toMatchObject({ code: 'STORE_RESULT_TOO_LARGE', bytes: 10_000 + RECORD_OVERHEAD_BYTES });
    expect(await store.get(record.id)).toMatchObject({ status: 'running' });
    expect(await store.finish(record.id, { ...done, status: 'failed' })).toBe(true);
  });

  it('drops the oldest Idempotency-Keys beyond maxKeys', async () => {
    const { store } = memoryStore({ maxKeys: 2 });
    for (const key of ['a', 'b', 'c']) await store.claimKey(key, { callId: `call-${key}`, fingerprint: 'f' }, 60_000);
    expect(await store.claimKey('a', { callId: 'call-x', fingerprint: 'f' }, 60_000)).toBeUndefined();
    expect(await store.claimKey('c', { callId: 'call-x', fingerprint: 'f' }, 60_000)).toMatchObject({ callId: 'call-c' });
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
    [{ maxBytes: 0 }, 'maxBytes must be a positive integer, got 0'],
    [{ maxBytes: Infinity }, 'maxBytes must be a positive integer, got Infinity'],
    [{ maxBytes: Number.NaN }, 'maxBytes must be a positive integer, got NaN'],
    [{ maxBytes: 100 }, `maxBytes must be at least ${RECORD_OVERHEAD_BYTES} (one empty record), got 100`],
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
