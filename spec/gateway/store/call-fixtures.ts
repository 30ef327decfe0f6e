/**
 * What the CallStore contract suite and the store specs share: the fixture shape each store's
 * spec provides, and records and results to feed a store.
 */
import { randomUUID } from 'node:crypto';
import type { CallFinish, CallRecord, CallStart, CallStore, StoredResult } from '../../../gateway/store/index.ts';

/** A store under test, with what the suite needs around it. */
export interface StoreFixture {
  store: CallStore;
  /** Another store over the same data, as a second gateway has one (memory: the same store). */
  peer(): Promise<CallStore>;
  /** Lets `ms` pass for the store's TTLs: moves a fake clock, or nothing where time is real. */
  elapse(ms: number): void;
  /** The clock the store reads, to stamp records with. */
  now(): number;
  /** Closes every store the fixture made. */
  close(): Promise<void>;
}

/** Makes a fixture; `resultTtl` is short only in the tests that wait for expiry, `maxStoredBytes` small only in the bound's. */
export type MakeStore = (options?: { resultTtl?: number; maxStoredBytes?: number }) => Promise<StoreFixture>;

/** TTL used where a test waits for expiry: short for real clocks, exact for fake ones. */
export const SHORT_TTL = 200;
/** Real-clock expiry is polled; this only bounds how long a broken store hangs a test. */
export const EXPIRY = { timeout: 10_000, interval: 20 };

/** A running record; ids are unique so tests never see each other's calls. */
export function runningRecord(now: number, overrides: Partial<CallRecord> = {}): CallRecord {
  return {
    id: `call-${randomUUID()}`,
    fn: 'sim-small',
    status: 'running',
    createdAt: now,
    startedAt: now + 3,
    runner: 'runner-1',
    delayMs: 3,
    owner: 'gateway-a',
    expiresAt: now + 60_000,
    ...overrides,
  };
}

/** A queued record, as the gateway writes it before placement: no runner yet. */
export function queuedRecord(now: number, overrides: Partial<CallRecord> = {}): CallRecord {
  const { startedAt: _startedAt, runner: _runner, delayMs: _delayMs, ...rest } = runningRecord(now);
  return { ...rest, status: 'queued', ...overrides };
}

/** A start on `runner` 7 ms after `now`. */
export const startAt = (now: number, runner = 'runner-1'): CallStart => ({ runner, startedAt: now + 7, delayMs: 7 });

/** A success 50 ms after `now`. */
export const succeeded = (now: number): CallFinish => ({ status: 'succeeded', completedAt: now + 50, executionMs: 47 });

/** A cancel `ms` after `now`, as the gateway writes it when a client cancels. */
export const cancelled = (now: number, ms: number): CallFinish => ({
  status: 'cancelled',
  completedAt: now + ms,
  error: { code: 'GW_CALL_CANCELLED', message: 'the call was cancelled' },
});

/** A JSON result with `text` as its body. */
export const json = (text: string): StoredResult => ({
  status: 200,
  contentType: 'application/json',
  body: Buffer.from(text),
});

/** A fixture whose store already holds one record, made by `make` at the store's clock `t`. */
export async function withRecord(
  fixture: MakeStore,
  make: (now: number) => CallRecord,
  options?: Parameters<MakeStore>[0],
): Promise<StoreFixture & { t: number; record: CallRecord }> {
  const f = await fixture(options);
  const t = f.now();
  const record = make(t);
  await f.store.create(record);
  return Object.assign(f, { t, record });
}
