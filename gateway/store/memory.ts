/**
 * The in-memory CallStore, for a single gateway. Running calls sit in a Map (they are bounded by
 * the gateway's own concurrency); finished calls and their results sit in an lru-cache bounded
 * by a TTL and by bytes, so a burst of large results evicts old ones instead of exhausting memory.
 */
import { LRUCache } from 'lru-cache';
import { StoreResultTooLargeError, StoreUnavailableError } from './errors.ts';
import { RECORD_OVERHEAD_BYTES, resolveMemoryStoreConfig } from './options.ts';
import type { MemoryStoreConfig, MemoryStoreOptions } from './options.ts';
import { checkClaimTtl, checkNewRecord, cloneRecord, copyResult, duplicateCall, finalRecord } from './records.ts';
import type { CallFinish, CallRecord, CallStore, KeyClaim, StoredResult } from './types.ts';

/** A finished call: its final record and, when the call produced one, its response. */
interface Finished {
  record: CallRecord;
  result?: StoredResult;
}

/** Longest gap between sweeps of expired entries, in ms of the store's clock. */
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
  readonly #running = new Map<string, CallRecord>();
  readonly #finished: LRUCache<string, Finished>;
  readonly #keys: LRUCache<string, KeyClaim>;
  readonly #handlers = new Map<string, (id: string) => void>();
  #closed = false;
  #nextSweep: number;

  constructor(config: MemoryStoreConfig) {
    this.#config = config;
    const { logger, maxBytes, maxKeys, resultTtl } = config;
    // The injected clock drives TTLs; ttlResolution 0 makes lru-cache read it on every check
    // instead of caching it for a real-time millisecond, which a fake clock would outrun.
    const perf = { now: config.now };
    this.#finished = new LRUCache<string, Finished>({
      ttl: resultTtl,
      maxSize: maxBytes,
      sizeCalculation: sizeOf,
      perf,
      ttlResolution: 0,
      dispose: (_value, id, reason) => {
        // A client polling for this result will now get 404 before its TTL: worth an operator's eye.
        if (reason === 'evict') logger.warn('finished call evicted before its ttl', { callId: id, maxBytes });
      },
    });
    this.#keys = new LRUCache<string, KeyClaim>({ max: maxKeys, perf, ttlResolution: 0 });
    this.#nextSweep = config.now() + Math.min(resultTtl, MAX_SWEEP_INTERVAL);
  }

  async create(record: CallRecord): Promise<void> {
    this.#open();
    this.#sweep();
    checkNewRecord(record);
    if (this.#live(record.id) || this.#finished.has(record.id)) throw duplicateCall(record.id);
    this.#running.set(record.id, cloneRecord(record));
  }

  async get(id: string): Promise<CallRecord | undefined> {
    this.#open();
    // peek, not get: reads must not refresh recency, so eviction goes by age of finishing.
    const record = this.#live(id) ?? this.#finished.peek(id)?.record;
    return record && cloneRecord(record);
  }

  async finish(id: string, finish: CallFinish, result?: StoredResult): Promise<boolean> {
    this.#open();
    this.#sweep();
    const running = this.#live(id);
    if (!running) return false;
    const entry: Finished = { record: finalRecord(running, finish), ...(result ? { result: copyResult(result) } : {}) };
    const size = sizeOf(entry);
    // lru-cache silently drops an entry larger than its whole bound, which would lose the call.
    if (size > this.#config.maxBytes) {
      throw new StoreResultTooLargeError(
        `the result of call ${id} takes ${size} bytes; the memory store holds at most maxBytes=${this.#config.maxBytes}`,
        size,
      );
    }
    this.#running.delete(id);
    this.#finished.set(id, entry);
    return true;
  }

  async getResult(id: string): Promise<StoredResult | undefined> {
    this.#open();
    const result = this.#finished.peek(id)?.result;
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

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#handlers.clear();
    this.#running.clear();
    this.#finished.clear();
    this.#keys.clear();
  }

  #open(): void {
    if (this.#closed) throw new StoreUnavailableError('the memory store is closed');
  }

  /**
   * The running record, unless it outlived its lifetime plus the result TTL: the same point at
   * which Redis lets a running record expire, so both stores forget abandoned calls alike.
   */
  #live(id: string): CallRecord | undefined {
    const record = this.#running.get(id);
    if (record && this.#config.now() >= record.expiresAt + this.#config.resultTtl) {
      this.#running.delete(id);
      return undefined;
    }
    return record;
  }

  /** Drops expired entries now and then; reads alone skip them but would not free their memory. */
  #sweep(): void {
    const now = this.#config.now();
    if (now < this.#nextSweep) return;
    this.#nextSweep = now + Math.min(this.#config.resultTtl, MAX_SWEEP_INTERVAL);
    for (const id of this.#running.keys()) this.#live(id);
    this.#finished.purgeStale();
    this.#keys.purgeStale();
  }
}

function sizeOf(entry: Finished): number {
  return RECORD_OVERHEAD_BYTES + (entry.result?.body.length ?? 0);
}
