/**
 * The in-memory CallStore, for a single gateway. Live calls (queued and running) sit in a Map
 * (they are bounded by the gateway's own concurrency). Finished calls and their results sit in a second Map bounded
 * by bytes and kept until their TTL: a result that does not fit is refused, never made room for
 * by evicting another client's before its time. Every finished call gets the same TTL, so the
 * Map's insertion order is also expiry order and pruning only ever looks at its oldest entries.
 */
import { LRUCache } from 'lru-cache';
import { StoreUnavailableError, storeFull } from './errors.ts';
import { RECORD_OVERHEAD_BYTES, resolveMemoryStoreConfig } from './options.ts';
import type { MemoryStoreConfig, MemoryStoreOptions } from './options.ts';
import {
  checkClaimTtl,
  checkNewRecord,
  cloneRecord,
  copyResult,
  duplicateCall,
  finalRecord,
  startFields,
} from './records.ts';
import type { CallFinish, CallRecord, CallStart, CallStore, KeyClaim, StoreHealth, StoredResult } from './types.ts';

/** A finished call: its final record, its response when it produced one, and when it leaves. */
interface Finished {
  record: CallRecord;
  result?: StoredResult;
  /** What it counts against maxStoredBytes. */
  bytes: number;
  /** Store time after which it is gone. */
  expiresAt: number;
}

/** Longest gap between sweeps of abandoned live records, in ms of the store's clock. */
const MAX_SWEEP_INTERVAL = 60_000;

/**
 * Makes an in-memory store. Options are validated here.
 * @throws StoreConfigError naming a bad option.
 */
export function createMemoryStore(options: MemoryStoreOptions = {}): CallStore {
  return new MemoryStore(resolveMemoryStoreConfig(options));
}

class MemoryStore implements CallStore {
  readonly #config: MemoryStoreConfig;
  /** Queued and running calls. */
  readonly #live = new Map<string, CallRecord>();
  readonly #finished = new Map<string, Finished>();
  readonly #keys: LRUCache<string, KeyClaim>;
  readonly #handlers = new Map<string, (id: string) => void>();
  #storedBytes = 0;
  /** Rooms reserved for the results of live calls, by id, until the call's expiresAt (see CallStore.create). */
  readonly #reserved = new Map<string, { bytes: number; until: number }>();
  #reservedBytes = 0;
  /** The earliest `until` among the reservations, so lapsed ones are looked for only once one may have. */
  #nextLapse = Infinity;
  #closed = false;
  #nextSweep: number;

  constructor(config: MemoryStoreConfig) {
    this.#config = config;
    // The injected clock drives TTLs; ttlResolution 0 makes lru-cache read it on every check
    // instead of caching it for a real-time millisecond, which a fake clock would outrun.
    this.#keys = new LRUCache<string, KeyClaim>({ max: config.maxKeys, perf: { now: config.now }, ttlResolution: 0 });
    this.#nextSweep = config.now() + Math.min(config.resultTtl, MAX_SWEEP_INTERVAL);
  }

  async create(record: CallRecord, reserve?: number): Promise<void> {
    this.#open();
    this.#sweep();
    checkNewRecord(record);
    if (this.#alive(record.id) || this.#done(record.id)) throw duplicateCall(record.id);
    if (reserve !== undefined && reserve > 0) {
      this.#lapse();
      const held = this.#storedBytes + this.#reservedBytes;
      const { maxStoredBytes } = this.#config;
      if (held + reserve > maxStoredBytes)
        throw storeFull(record.id, { bytes: reserve, storedBytes: held, maxStoredBytes });
      this.#reserved.set(record.id, { bytes: reserve, until: record.expiresAt });
      this.#reservedBytes += reserve;
      this.#nextLapse = Math.min(this.#nextLapse, record.expiresAt);
    }
    this.#live.set(record.id, cloneRecord(record));
  }

  async start(id: string, start: CallStart): Promise<boolean> {
    this.#open();
    const fields = startFields(id, start);
    const queued = this.#alive(id);
    if (queued?.status !== 'queued') return false;
    this.#live.set(id, { ...queued, ...fields, status: 'running' });
    return true;
  }

  async get(id: string): Promise<CallRecord | undefined> {
    this.#open();
    const record = this.#alive(id) ?? this.#done(id)?.record;
    return record && cloneRecord(record);
  }

  async finish(id: string, finish: CallFinish, result?: StoredResult): Promise<boolean> {
    this.#open();
    this.#sweep();
    const live = this.#alive(id);
    if (!live) return false;
    const record = finalRecord(live, finish);
    const bytes = RECORD_OVERHEAD_BYTES + (result?.body.length ?? 0);
    const { maxStoredBytes, now, resultTtl } = this.#config;
    // Only a result is refused: the reason a call failed must always be recordable. The call's
    // own reservation is room for it.
    const held = this.#storedBytes + this.#reservedBytes - (this.#reserved.get(id)?.bytes ?? 0);
    if (result && held + bytes > maxStoredBytes) {
      throw storeFull(id, { bytes, storedBytes: held, maxStoredBytes });
    }
    this.#live.delete(id);
    this.#unreserve(id);
    this.#finished.set(id, {
      record,
      ...(result ? { result: copyResult(result) } : {}),
      bytes,
      expiresAt: now() + resultTtl,
    });
    this.#storedBytes += bytes;
    return true;
  }

  async getResult(id: string): Promise<StoredResult | undefined> {
    this.#open();
    const result = this.#done(id)?.result;
    return result && copyResult(result);
  }

  async claimKey(key: string, claim: KeyClaim, ttlMs: number): Promise<KeyClaim | undefined> {
    this.#open();
    checkClaimTtl(ttlMs);
    this.#sweep();
    const existing = this.#keys.peek(key);
    if (existing) return { ...existing };
    this.#keys.set(key, { callId: claim.callId, fingerprint: claim.fingerprint }, { ttl: ttlMs });
    return undefined;
  }

  async releaseKey(key: string, callId: string): Promise<void> {
    this.#open();
    if (this.#keys.peek(key)?.callId === callId) this.#keys.delete(key);
  }

  async requestCancel(id: string, owner: string): Promise<void> {
    this.#open();
    const handler = this.#handlers.get(owner);
    if (!handler) return;
    // Delivered later, as over Redis, so no caller comes to rely on the handler having run.
    queueMicrotask(() => {
      try {
        handler(id);
      } catch (error) {
        this.#config.logger.warn('cancel handler failed', { callId: id, owner, error });
      }
    });
  }

  async onCancel(owner: string, handler: (id: string) => void): Promise<void> {
    this.#open();
    this.#handlers.set(owner, handler);
  }

  async health(): Promise<StoreHealth> {
    if (this.#closed) return { ok: false, reason: 'the memory store is closed' };
    this.#prune();
    this.#lapse();
    return {
      ok: true,
      storedBytes: this.#storedBytes + this.#reservedBytes,
      maxStoredBytes: this.#config.maxStoredBytes,
    };
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#handlers.clear();
    this.#live.clear();
    this.#finished.clear();
    this.#storedBytes = 0;
    this.#reserved.clear();
    this.#reservedBytes = 0;
    this.#nextLapse = Infinity;
    this.#keys.clear();
  }

  #open(): void {
    if (this.#closed) throw new StoreUnavailableError('the memory store is closed');
  }

  /**
   * The live record, unless it outlived its lifetime plus the result TTL: the same point at
   * which Redis lets a live record expire, so both stores forget abandoned calls alike.
   */
  #alive(id: string): CallRecord | undefined {
    const record = this.#live.get(id);
    if (record && this.#config.now() >= record.expiresAt + this.#config.resultTtl) {
      this.#live.delete(id);
      this.#unreserve(id);
      return undefined;
    }
    return record;
  }

  /** Gives back the room reserved for a live call's result. */
  #unreserve(id: string): void {
    const reserved = this.#reserved.get(id);
    if (reserved === undefined) return;
    this.#reserved.delete(id);
    this.#reservedBytes -= reserved.bytes;
  }

  /** Drops the reservations of calls past their expiresAt, which nobody finished. */
  #lapse(): void {
    const now = this.#config.now();
    if (now < this.#nextLapse) return;
    this.#nextLapse = Infinity;
    for (const [id, { until }] of this.#reserved) {
      if (until <= now) this.#unreserve(id);
      else this.#nextLapse = Math.min(this.#nextLapse, until);
    }
  }

  /** The finished call, unless its TTL has passed (then it is dropped, with all older ones). */
  #done(id: string): Finished | undefined {
    const finished = this.#finished.get(id);
    if (finished && this.#config.now() > finished.expiresAt) {
      this.#prune();
      return undefined;
    }
    return finished;
  }

  /** Drops finished calls past their TTL, oldest first, and gives their bytes back. */
  #prune(): void {
    const now = this.#config.now();
    for (const [id, finished] of this.#finished) {
      if (now <= finished.expiresAt) break;
      this.#finished.delete(id);
      this.#storedBytes -= finished.bytes;
    }
  }

  /** Prunes, and now and then drops abandoned live records and expired claims. */
  #sweep(): void {
    this.#prune();
    const now = this.#config.now();
    if (now < this.#nextSweep) return;
    this.#nextSweep = now + Math.min(this.#config.resultTtl, MAX_SWEEP_INTERVAL);
    for (const id of this.#live.keys()) this.#alive(id);
    this.#keys.purgeStale();
  }
}
