/**
 * Files as the batch room keeps them: each one's bytes held against its client key's
 * storedBytes (as a reservation until the file expires, given back when it is deleted) and
 * against the store's byte bound, which the detached-call store's results and the batch
 * store's files share: a file is taken only while both together stay within maxStoredBytes.
 */
import { randomBytes } from 'node:crypto';
import type { Clock } from '../../placer/kernel/index.ts';
import type { Caller, Limiter } from '../access/index.ts';
import { StoreFullError } from '../store/index.ts';
import type { BatchStore, CallStore, FilePurpose, FileRecord } from '../store/index.ts';
import { FileStoreFullError } from './errors.ts';

/** What the keeper works with. */
export interface FileKeeperSettings {
  store: BatchStore;
  /** The detached-call store, whose held bytes count against the same bound. */
  calls: Pick<CallStore, 'health'>;
  limiter: Pick<Limiter, 'reserveStored' | 'releaseStored'>;
  clock: Pick<Clock, 'now'>;
  /** How long a file is kept, in ms. */
  fileTtl: number;
}

/** A file to keep: who owns it, what it is called and for what. */
export interface NewFile {
  readonly caller: Caller;
  readonly filename: string;
  readonly purpose: FilePurpose;
  readonly content: Buffer;
}

/** A random id with OpenAI's prefix. */
export function newObjectId(prefix: 'file' | 'batch' | 'batch_req'): string {
  return `${prefix}${prefix === 'file' ? '-' : '_'}${randomBytes(12).toString('base64url')}`;
}

/** Keeps and deletes files within the key's and the store's bounds. */
export class FileKeeper {
  readonly #settings: FileKeeperSettings;

  constructor(settings: FileKeeperSettings) {
    this.#settings = settings;
  }

  /**
   * Keeps a file, or refuses it with FileStoreFullError (nothing kept) when its bytes do not fit
   * in its key's storedBytes or in the store's bound.
   */
  async keep(file: NewFile): Promise<FileRecord> {
    const { store, calls, clock, fileTtl } = this.#settings;
    const createdAt = clock.now();
    const { caller, content } = file;
    const record: FileRecord = {
      id: newObjectId('file'),
      ...(caller.kind === 'client' ? { client: caller.key.id } : {}),
      filename: file.filename,
      purpose: file.purpose,
      bytes: content.length,
      createdAt,
      expiresAt: createdAt + fileTtl,
    };
    const health = await calls.health();
    const held = health.ok ? health.storedBytes + (await store.separateBytes()) : 0;
    if (health.ok && held + content.length > health.maxStoredBytes) {
      throw new FileStoreFullError(
        `the file takes ${content.length} bytes and the store holds ${held} of maxStoredBytes=${health.maxStoredBytes}; delete files or wait for results to expire`,
      );
    }
    await this.#reserve(caller, record);
    try {
      await store.putFile(record, content);
    } catch (error) {
      await this.#release(record);
      if (error instanceof StoreFullError)
        throw new FileStoreFullError(`the file does not fit in the store: ${error.message}`, { cause: error });
      throw error;
    }
    return record;
  }

  /** Deletes a file and gives its bytes back to its key; false when it was not there. */
  async delete(record: FileRecord): Promise<boolean> {
    const deleted = await this.#settings.store.deleteFile(record.id);
    if (deleted) await this.#release(record);
    return deleted;
  }

  /** Holds the file's bytes against its key's storedBytes until it expires. */
  async #reserve(caller: Caller, record: FileRecord): Promise<void> {
    if (caller.kind !== 'client' || caller.key.limits.storedBytes === undefined) return;
    const { key } = caller;
    const admission = await this.#settings.limiter.reserveStored(key.id, key.limits, {
      callId: record.id,
      cap: record.bytes,
      until: record.expiresAt,
    });
    if (admission.kind === 'admitted' && admission.reserved >= record.bytes) return;
    if (admission.kind === 'admitted') await this.#release(record);
    throw new FileStoreFullError(
      `the file takes ${record.bytes} bytes, more than remains of the key's storedBytes (${key.limits.storedBytes}); delete files or wait for results to expire`,
    );
  }

  /** Gives a file's reservation back to its key; harmless for a key that held none (it is by file id). */
  async #release(record: FileRecord): Promise<void> {
    if (record.client === undefined) return;
    await this.#settings.limiter.releaseStored(record.client, record.id, record.bytes);
  }
}
