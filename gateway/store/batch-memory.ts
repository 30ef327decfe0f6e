/**
 * The in-memory BatchStore, for a single gateway: files with their content and batches in Maps
 * (insertion order is creation order, so listings walk them backwards). Files count their bytes
 * against maxStoredBytes until deleted or past their expiresAt; one that does not fit is refused,
 * never made room for. Batches are small records kept for the result TTL once final; their work
 * (chunks, leases, line results) is kept by {@link MemoryBatchWork} until they are. Nothing
 * survives the process: a restarted gateway knows none of its files and batches.
 */
import { checksFor, show } from '../../placer/kernel/index.ts';
import { StoreConfigError, StoreInvalidRecordError, StoreUnavailableError, storeFull } from './errors.ts';
import { storeDefaults } from './options.ts';
import type {
  BatchRecord,
  BatchStop,
  BatchStore,
  ChunkTake,
  FileRecord,
  LineClaim,
  LineResult,
  Owner,
  Page,
} from './batch-types.ts';
import { MemoryBatchWork } from './batch-work-memory.ts';
import { FINAL_BATCH_STATUSES } from './batch-types.ts';

/** Options of the in-memory batch store. */
export interface MemoryBatchStoreOptions {
  /** Bound on the bytes files hold. @default see storeDefaults */
  maxStoredBytes?: number;
  /** How long a final batch's record is kept, in ms. @default see storeDefaults */
  resultTtl?: number;
  /** The clock for expiry, ms since the epoch. @default see storeDefaults */
  now?: () => number;
}

interface StoredFile {
  record: FileRecord;
  content: Buffer;
}

/**
 * Makes an in-memory batch store.
 * @throws StoreConfigError naming a bad option.
 */
export function createMemoryBatchStore(options: MemoryBatchStoreOptions = {}): BatchStore {
  const {
    maxStoredBytes = storeDefaults.maxStoredBytes,
    resultTtl = storeDefaults.resultTtl,
    now = storeDefaults.now,
  } = options;
  check.integer('maxStoredBytes', maxStoredBytes, { min: 1 });
  check.ms('resultTtl', resultTtl, 1);
  if (typeof now !== 'function') throw check.fail(`now must be a function, got ${show(now)}`);
  return new MemoryBatchStore(maxStoredBytes, resultTtl, now);
}

class MemoryBatchStore implements BatchStore {
  readonly #files = new Map<string, StoredFile>();
  readonly #batches = new Map<string, BatchRecord>();
  readonly #work: MemoryBatchWork;
  readonly shared = false;
  readonly #maxStoredBytes: number;
  readonly #resultTtl: number;
  readonly #now: () => number;
  #bytes = 0;
  #closed = false;

  constructor(maxStoredBytes: number, resultTtl: number, now: () => number) {
    this.#maxStoredBytes = maxStoredBytes;
    this.#resultTtl = resultTtl;
    this.#now = now;
    this.#work = new MemoryBatchWork(now);
  }

  async putFile(record: FileRecord, content: Buffer): Promise<void> {
    this.#open();
    this.#expire();
    if (this.#files.has(record.id)) throw new StoreInvalidRecordError(`file ${record.id} already exists`);
    if (this.#bytes + content.length > this.#maxStoredBytes) {
      throw storeFull(record.id, {
        bytes: content.length,
        storedBytes: this.#bytes,
        maxStoredBytes: this.#maxStoredBytes,
      });
    }
    this.#files.set(record.id, { record: { ...record }, content: Buffer.from(content) });
    this.#bytes += content.length;
  }

  async getFile(id: string): Promise<FileRecord | undefined> {
    this.#open();
    const file = this.#file(id);
    return file && { ...file.record };
  }

  async fileContent(id: string): Promise<Buffer | undefined> {
    this.#open();
    return this.#file(id)?.content;
  }

  async listFiles(owner: Owner, after: string | undefined, limit: number): Promise<Page<FileRecord>> {
    this.#open();
    this.#expire();
    return page(
      [...this.#files.values()].map((f) => f.record),
      owner,
      after,
      limit,
    );
  }

  async deleteFile(id: string): Promise<boolean> {
    this.#open();
    const file = this.#file(id);
    if (!file) return false;
    this.#drop(id, file);
    return true;
  }

  async putBatch(record: BatchRecord): Promise<void> {
    this.#open();
    if (this.#batches.has(record.id)) throw new StoreInvalidRecordError(`batch ${record.id} already exists`);
    this.#batches.set(record.id, structuredClone(record));
  }

  async getBatch(id: string): Promise<BatchRecord | undefined> {
    this.#open();
    const batch = this.#batch(id);
    return batch && this.#counted(structuredClone(batch));
  }

  async updateBatch(id: string, fields: Partial<BatchRecord>): Promise<BatchRecord | undefined> {
    this.#open();
    const batch = this.#batch(id);
    if (!batch || FINAL_BATCH_STATUSES.has(batch.status)) return undefined;
    const next = { ...batch, ...structuredClone(fields), id };
    this.#batches.set(id, next);
    if (FINAL_BATCH_STATUSES.has(next.status)) this.#work.forget(id);
    return this.#counted(structuredClone(next));
  }

  async listBatches(owner: Owner, after: string | undefined, limit: number): Promise<Page<BatchRecord>> {
    this.#open();
    for (const id of [...this.#batches.keys()]) this.#batch(id);
    return page(
      [...this.#batches.values()].map((b) => this.#counted(structuredClone(b))),
      owner,
      after,
      limit,
    );
  }

  async runningBatches(): Promise<string[]> {
    this.#open();
    return [...this.#batches.values()].filter((b) => !FINAL_BATCH_STATUSES.has(b.status)).map((b) => b.id);
  }

  async openChunks(id: string, count: number): Promise<void> {
    this.#openWork().open(id, count);
  }

  async takeChunk(id: string, holder: string, ttl: number): Promise<ChunkTake> {
    return this.#openWork().take(id, holder, ttl);
  }

  async renewChunk(id: string, index: number, holder: string, ttl: number): Promise<boolean> {
    return this.#openWork().renew(id, index, holder, ttl);
  }

  async endChunk(id: string, index: number, holder: string): Promise<void> {
    this.#openWork().end(id, index, holder);
  }

  async releaseChunk(id: string, index: number, holder: string): Promise<void> {
    this.#openWork().release(id, index, holder);
  }

  async stopBatch(id: string, stop: BatchStop): Promise<void> {
    this.#openWork().stop(id, stop);
  }

  async claimLine(id: string, customId: string, holder: string): Promise<LineClaim> {
    return this.#openWork().claim(id, customId, holder);
  }

  async unclaimLine(id: string, customId: string, holder: string): Promise<void> {
    this.#openWork().unclaim(id, customId, holder);
  }

  async putLineResult(id: string, customId: string, result: LineResult): Promise<boolean> {
    return this.#openWork().put(id, customId, result);
  }

  async lineResults(id: string): Promise<Map<string, LineResult>> {
    return this.#openWork().results(id);
  }

  async separateBytes(): Promise<number> {
    this.#expire();
    return this.#bytes;
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#files.clear();
    this.#batches.clear();
    this.#bytes = 0;
  }

  /** A batch not final with its counts of lines ended, from the results written. */
  #counted(batch: BatchRecord): BatchRecord {
    if (FINAL_BATCH_STATUSES.has(batch.status)) return batch;
    batch.requestCounts = { ...batch.requestCounts, ...this.#work.counts(batch.id) };
    return batch;
  }

  #open(): void {
    if (this.#closed) throw new StoreUnavailableError('the memory batch store is closed');
  }

  /** The keeper of the batches' work, once the store is known to be open. */
  #openWork(): MemoryBatchWork {
    this.#open();
    return this.#work;
  }

  #file(id: string): StoredFile | undefined {
    const file = this.#files.get(id);
    if (file && this.#now() >= file.record.expiresAt) {
      this.#drop(id, file);
      return undefined;
    }
    return file;
  }

  /** The batch, unless it ended more than the result TTL ago (then it is forgotten). */
  #batch(id: string): BatchRecord | undefined {
    const batch = this.#batches.get(id);
    if (batch && FINAL_BATCH_STATUSES.has(batch.status) && this.#now() >= endOf(batch) + this.#resultTtl) {
      this.#batches.delete(id);
      return undefined;
    }
    return batch;
  }

  #drop(id: string, file: StoredFile): void {
    this.#files.delete(id);
    this.#bytes -= file.content.length;
  }

  #expire(): void {
    for (const id of [...this.#files.keys()]) this.#file(id);
  }
}

/** When a final batch ended. */
function endOf(batch: BatchRecord): number {
  return batch.completedAt ?? batch.failedAt ?? batch.expiredAt ?? batch.cancelledAt ?? batch.createdAt;
}

/** The page of `records` (oldest first) `owner` sees: newest first, from the one after `after`. */
function page<T extends { id: string; client?: string }>(
  records: T[],
  owner: Owner,
  after: string | undefined,
  limit: number,
): Page<T> {
  const mine = records.filter((r) => owner.kind === 'all' || r.client === owner.client).reverse();
  const start = after === undefined ? 0 : mine.findIndex((r) => r.id === after) + 1;
  const data = start === 0 && after !== undefined ? [] : mine.slice(start, start + limit);
  return { data, hasMore: start + limit < mine.length && data.length > 0 };
}

const check = checksFor(StoreConfigError);
