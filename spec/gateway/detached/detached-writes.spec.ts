/**
 * EndWriter against a store whose answers each test scripts, on a clock whose sleeps move time
 * on at once: the backoff, the wait for a passing health check, giving up at the call's lifetime
 * or at shutdown, and what is logged for each.
 */
import type { Counter } from '@opentelemetry/api';
import { describe, expect, it, vi } from 'vitest';
import { EndWriter } from '../../../gateway/detached/detached-writes.ts';
import { StoreFullError, StoreUnavailableError } from '../../../gateway/store/errors.ts';
import { createMemoryStore } from '../../../gateway/store/memory.ts';
import type { CallRecord, CallStore, StoreHealth } from '../../../gateway/store/types.ts';
import type { LogFields, Logger } from '../../../placer/kernel/index.ts';
import type { Clock } from '../../../placer/kernel/index.ts';

const T0 = 1_700_000_000_000;

/** A clock whose sleeps return at once, having moved time on by what they were asked. */
function warpClock(): Clock & { slept: number[] } {
  let t = T0;
  const slept: number[] = [];
  return {
    slept,
    now: () => t,
    sleep: async (ms, signal) => {
      if (signal?.aborted) throw signal.reason;
      slept.push(ms);
      t += ms;
    },
  };
}

/** A logger keeping every line at every level, with its child loggers' fields. */
function recorder(): { logger: Logger; lines: LogFields[] } {
  const lines: LogFields[] = [];
  const make = (base: LogFields): Logger => ({
    debug: (msg, fields) => void lines.push({ level: 'debug', msg, ...base, ...fields }),
    info: (msg, fields) => void lines.push({ level: 'info', msg, ...base, ...fields }),
    warn: (msg, fields) => void lines.push({ level: 'warn', msg, ...base, ...fields }),
    error: (msg, fields) => void lines.push({ level: 'error', msg, ...base, ...fields }),
    child: (fields) => make({ ...base, ...fields }),
  });
  return { logger: make({}), lines };
}

const lost = () => new StoreUnavailableError('redis store redis://127.0.0.1:6379/0 did not answer within 10000 ms');
const record = (): CallRecord => ({
  id: 'call-1',
  fn: 'sim-small',
  status: 'running',
  createdAt: T0,
  owner: 'gw-a',
  expiresAt: T0 + 60_000,
});
const done = { status: 'succeeded' as const, completedAt: T0, executionMs: 5 };
const result = { status: 200, contentType: 'text/plain', body: Buffer.from('hello') };

/** A memory store with some of its methods replaced by the test's. */
function storeWith(overrides: Partial<CallStore>): CallStore {
  const inner = createMemoryStore({ now: () => T0 });
  return {
    create: (r) => inner.create(r),
    start: (id, s) => inner.start(id, s),
    get: (id) => inner.get(id),
    finish: (id, f, r) => inner.finish(id, f, r),
    getResult: (id) => inner.getResult(id),
    claimKey: (key, claim, ttl) => inner.claimKey(key, claim, ttl),
    releaseKey: (key, id) => inner.releaseKey(key, id),
    requestCancel: (id, owner) => inner.requestCancel(id, owner),
    onCancel: (owner, handler) => inner.onCancel(owner, handler),
    health: () => inner.health(),
    close: () => inner.close(),
    ...overrides,
  };
}

function writer(store: CallStore, stopping = new AbortController().signal) {
  const clock = warpClock();
  const { logger, lines } = recorder();
  const refused = { add: vi.fn() } as unknown as Counter & { add: ReturnType<typeof vi.fn> };
  return {
    writer: new EndWriter({ store, clock, logger, metrics: { resultsRefused: refused }, stopping }),
    clock,
    lines,
    refused,
  };
}

describe('EndWriter', () => {
  it('backs off 250 ms doubling, retrying only once a health check passes, and logs the retry and the success', async () => {
    let healthChecks = 0;
    let failures = 1;
    const inner = createMemoryStore({ now: () => T0 });
    await inner.create(record());
    const store = storeWith({
      finish: async (id, f, r) => {
        if (failures-- > 0) throw lost();
        return inner.finish(id, f, r);
      },
      get: (id) => inner.get(id),
      health: async (): Promise<StoreHealth> =>
        ++healthChecks > 3 ? inner.health() : { ok: false, reason: 'stalled' },
    });
    const { writer: w, clock, lines } = writer(store);
    const written = await w.settle(record(), { finish: done, result });
    expect(written).toMatchObject({ kind: 'stored', attempts: 2, late: false });
    expect(clock.slept).toEqual([250, 500, 1000, 2000]);
    expect(healthChecks).toBe(4);
    expect(lines.map((l) => [l.level, l.msg])).toEqual([
      ['warn', 'store write failed, retrying'],
      ['info', 'detached result stored after retrying'],
    ]);
  });

  it("gives up when the call's lifetime ends, logging at error that the result was not stored", async () => {
    let attempts = 0;
    const store = storeWith({
      finish: async () => {
        attempts++;
        throw lost();
      },
      health: async () => ({ ok: false, reason: 'stalled' }),
    });
    const { writer: w, clock, lines } = writer(store);
    const written = await w.settle(record(), { finish: done, result });
    expect(written).toMatchObject({ kind: 'gave-up', attempts: 2 });
    expect(attempts).toBe(2);
    expect(clock.now()).toBe(T0 + 60_000);
    expect(Math.max(...clock.slept)).toBe(5000);
    expect(lines.at(-1)).toMatchObject({
      level: 'error',
      msg: 'detached result not stored',
      call: 'call-1',
      attempts: 2,
    });
  });

  it('gives up at once when the gateway stops, with one last attempt', async () => {
    const stopping = new AbortController();
    let attempts = 0;
    const store = storeWith({
      finish: async () => {
        attempts++;
        throw lost();
      },
      health: async () => {
        stopping.abort();
        return { ok: false, reason: 'stalled' };
      },
    });
    const { writer: w, clock } = writer(store, stopping.signal);
    expect(await w.settle(record(), { finish: done, result })).toMatchObject({ kind: 'gave-up', attempts: 2 });
    expect(attempts).toBe(2);
    expect(clock.now()).toBe(T0 + 250);
  });

  it('replaces a result the store has no room for by GW_STORE_FULL, counts it and warns', async () => {
    const inner = createMemoryStore({ now: () => T0 });
    await inner.create(record());
    const store = storeWith({
      finish: async (id, f, r) => {
        if (r) throw new StoreFullError('no room', { bytes: 1029, storedBytes: 5000, maxStoredBytes: 5120 });
        return inner.finish(id, f, r);
      },
      get: (id) => inner.get(id),
    });
    const { writer: w, lines, refused } = writer(store);
    const written = await w.settle(record(), { finish: done, result });
    expect(written).toMatchObject({
      kind: 'stored',
      finish: { status: 'failed', executionMs: 5, error: { code: 'GW_STORE_FULL' } },
    });
    expect((written as { result?: unknown }).result).toBeUndefined();
    expect(refused.add).toHaveBeenCalledWith(1);
    expect(lines).toEqual([
      expect.objectContaining({
        level: 'warn',
        msg: 'detached result refused, store full',
        bytes: 1029,
        storedBytes: 5000,
        maxStoredBytes: 5120,
      }),
    ]);
    expect(await inner.get('call-1')).toMatchObject({ status: 'failed', error: { code: 'GW_STORE_FULL' } });
  });

  it('repairs a record that landed although its create failed, and finds nothing to do when it did not', async () => {
    const inner = createMemoryStore({ now: () => T0 });
    await inner.create(record());
    const { writer: w, lines } = writer(
      storeWith({ finish: (id, f, r) => inner.finish(id, f, r), get: (id) => inner.get(id) }),
    );
    await w.repair(record(), lost());
    expect(await inner.get('call-1')).toMatchObject({ status: 'failed', error: { code: 'GW_STORE_UNAVAILABLE' } });
    expect(lines).toEqual([
      expect.objectContaining({
        level: 'warn',
        msg: 'detached record written after its call was refused, now failed',
        call: 'call-1',
      }),
    ]);
    await w.repair({ ...record(), id: 'call-never-written' }, lost());
    expect(await inner.get('call-never-written')).toBeUndefined();
    expect(lines).toHaveLength(1);
  });
});
