/**
 * The batch store contract: the files clients upload for OpenAI's Files API and the batches
 * that run them (gateway/batch/), kept beside the detached-call store and bounded with it.
 * Times are ms since the epoch; the shapes clients see are made from these records by the batch
 * room.
 */

/** What a file is for: a batch's input (uploaded) or a batch's output and errors (made by the gateway). */
export type FilePurpose = 'batch' | 'batch_output';

/** What the store keeps about one file; its bytes are kept beside it. */
export interface FileRecord {
  /** `file-` and a random id. */
  id: string;
  /** The id of the client key that owns it; absent for a file made without one. */
  client?: string;
  filename: string;
  purpose: FilePurpose;
  /** Size of its content. */
  bytes: number;
  createdAt: number;
  /** When the store forgets it. */
  expiresAt: number;
}

/** Where a batch stands, in OpenAI's words. */
export type BatchStatus =
  | 'validating'
  | 'failed'
  | 'in_progress'
  | 'finalizing'
  | 'completed'
  | 'expired'
  | 'cancelling'
  | 'cancelled';

/** Statuses a batch never leaves. */
export const FINAL_BATCH_STATUSES: ReadonlySet<BatchStatus> = new Set(['failed', 'completed', 'expired', 'cancelled']);

/** One problem an input file has, as OpenAI lists it in a failed batch's `errors`. */
export interface BatchLineError {
  code: string;
  message: string;
  /** The field at fault, when one is. */
  param?: string;
  /** The 1-based line of the input file, when the problem is on one line. */
  line?: number;
}

/** How many of a batch's lines there are, and how many ended each way. */
export interface RequestCounts {
  total: number;
  completed: number;
  failed: number;
}

/** What the store keeps about one batch. */
export interface BatchRecord {
  /** `batch_` and a random id. */
  id: string;
  client?: string;
  /** The gateway running it; only that gateway releases its lines. */
  owner: string;
  endpoint: string;
  inputFileId: string;
  completionWindow: string;
  status: BatchStatus;
  createdAt: number;
  /** End of the completion window: lines not run by then are not run. */
  expiresAt: number;
  inProgressAt?: number;
  finalizingAt?: number;
  completedAt?: number;
  failedAt?: number;
  expiredAt?: number;
  cancellingAt?: number;
  cancelledAt?: number;
  outputFileId?: string;
  errorFileId?: string;
  requestCounts: RequestCounts;
  metadata?: Record<string, string>;
  /** Why the batch failed: its input's problems, or the gateway's own reason. */
  errors?: BatchLineError[];
  /** Lines in each of its chunks, set when it is validated, so every gateway divides it alike. */
  chunkLines?: number;
  /**
   * Who its lines run as, as the batch room writes it (a client key's id, name, models and
   * limits, never a secret), so that any gateway can run them.
   */
  runAs?: Record<string, unknown>;
}

/** A line's result: the line of the output file (completed) or of the error file (failed). */
export interface LineResult {
  outcome: 'completed' | 'failed';
  /** The JSONL line, without its newline. */
  line: string;
}

/**
 * What claiming a line found: `claimed` (it is the claimer's to run now), `started` (another
 * holder claimed it and wrote no result: it may have run, so it is never run again) or `ended`
 * (its result is written).
 */
export type LineClaim = 'claimed' | 'started' | 'ended';

/** Why a batch stopped handing out chunks. */
export type BatchStop = 'cancelled' | 'expired';

/**
 * What taking work of a batch gave: a chunk of its lines to run (leased to the taker), the
 * finalize step (leased likewise: every chunk is done, or the batch stopped and no live lease
 * is left), or nothing for now.
 */
export type ChunkTake = { kind: 'chunk'; index: number } | { kind: 'finalize'; stop?: BatchStop } | { kind: 'none' };

/** A page of a listing, newest first, after the id given. */
export interface Page<T> {
  data: T[];
  hasMore: boolean;
}

/** Who a listing is for: one client's records (`client` undefined for those made without a key), or everyone's. */
export type Owner = { kind: 'client'; client: string | undefined } | { kind: 'all' };

/** Storage for files and batches. Every method but `storedBytes` may reject on a storage failure. */
export interface BatchStore {
  /**
   * Keeps a file and its content until its expiresAt. A content that does not fit beside what
   * the store holds in its byte bound is refused with StoreFullError (STORE_FULL), nothing
   * written. A store sharing the detached-call store's byte count counts the file in it.
   */
  putFile(record: FileRecord, content: Buffer): Promise<void>;
  /** The file's record, or undefined when unknown, deleted or expired. */
  getFile(id: string): Promise<FileRecord | undefined>;
  /** The file's content, or undefined. */
  fileContent(id: string): Promise<Buffer | undefined>;
  /** Files of `owner`, newest first, from the one after the file `after` (when given), at most `limit`. */
  listFiles(owner: Owner, after: string | undefined, limit: number): Promise<Page<FileRecord>>;
  /** Forgets a file and gives its bytes back; false when it was not there. */
  deleteFile(id: string): Promise<boolean>;
  /** Records a new batch. */
  putBatch(record: BatchRecord): Promise<void>;
  /**
   * The batch's record, or undefined. A batch not final counts `completed` and `failed` from the
   * line results written.
   */
  getBatch(id: string): Promise<BatchRecord | undefined>;
  /**
   * Writes `fields` over a batch not yet final: resolves with the new record, or undefined
   * (changing nothing) when it is gone or already final.
   */
  updateBatch(id: string, fields: Partial<BatchRecord>): Promise<BatchRecord | undefined>;
  /** Batches of `owner`, newest first, from the one after the batch `after` (when given), at most `limit`. */
  listBatches(owner: Owner, after: string | undefined, limit: number): Promise<Page<BatchRecord>>;
  /**
   * The bytes its files hold against maxStoredBytes that the detached-call store's `health`
   * does not count already: a store that keeps them in the call store's own count says 0.
   */
  separateBytes(): Promise<number>;
  /** True when other gateways read and write the same store (then they share its batches' work). */
  readonly shared: boolean;
  /** Ids of the batches not yet final. */
  runningBatches(): Promise<string[]>;
  /** Divides a batch's lines in `count` chunks, once: a later call changes nothing. */
  openChunks(id: string, count: number): Promise<void>;
  /** Leases a free chunk (or one whose lease expired), or the finalize step, to `holder` for `ttl` ms. */
  takeChunk(id: string, holder: string, ttl: number): Promise<ChunkTake>;
  /** Extends `holder`'s lease of a chunk (or of the finalize step, index -1); false when it is not `holder`'s any more. */
  renewChunk(id: string, index: number, holder: string, ttl: number): Promise<boolean>;
  /** Marks `holder`'s chunk done (every line of it ended); nothing when the lease is not `holder`'s. */
  endChunk(id: string, index: number, holder: string): Promise<void>;
  /** Gives `holder`'s chunk back unfinished, for any gateway to take at once. */
  releaseChunk(id: string, index: number, holder: string): Promise<void>;
  /** Stops handing out the batch's chunks; the first reason given is kept. */
  stopBatch(id: string, stop: BatchStop): Promise<void>;
  /** Marks a line started by `holder`, unless it has another's mark or a result already. */
  claimLine(id: string, customId: string, holder: string): Promise<LineClaim>;
  /** Takes `holder`'s started mark off a line that did not run (it was refused busy). */
  unclaimLine(id: string, customId: string, holder: string): Promise<void>;
  /**
   * Writes a line's result, once: false (nothing written) when the line has a result already.
   * The batch's request counts (getBatch) count it from then on.
   */
  putLineResult(id: string, customId: string, result: LineResult): Promise<boolean>;
  /** The results written of a batch's lines, by custom_id. */
  lineResults(id: string): Promise<Map<string, LineResult>>;
  /** Closes; idempotent. */
  close(): Promise<void>;
}
