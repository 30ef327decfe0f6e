/**
 * Writing a detached call's end to a store that may not answer, and saying truly what became of
 * it. A write that failed or timed out is tried again (backoff, each retry only once the store's
 * health check passes, until the call's lifetime ends); since a write that timed out may still
 * have landed, an answer that the call is already final is checked against our own earlier
 * attempts. A result the store has no room for is replaced by the reason. A record whose create
 * failed is repaired: failed if it is there after all and still live.
 */
import type { Logger, Clock } from '../../placer/kernel/index.ts';
import { recordError } from './detached-reasons.ts';
import { DetachedStoreFullError, DetachedStoreUnavailableError, ResultNotStoredError } from '../errors.ts';
import type { StoreMetrics } from '../observe/index.ts';
import { StoreFullError, StoreInvalidRecordError } from '../store/index.ts';
import type { CallError, CallFinish, CallRecord, CallStore, StoredResult } from '../store/index.ts';

/** First pause before a store write that failed is tried again; doubled each time up to the cap. */
const WRITE_RETRY_BASE_MS = 250;
const WRITE_RETRY_CAP_MS = 5000;
/** A call that finishes near the end of its lifetime still gets this long to have its end written. */
const MIN_WRITE_WINDOW_MS = 30_000;

/** One way of ending a call: what is written, with the result when there is one. */
export interface Ending {
  finish: CallFinish;
  result?: StoredResult | undefined;
}

/** What became of writing a call's end. */
export type Written =
  /** The store holds it; `late` when an earlier attempt that timed out had landed after all. */
  | (Ending & { kind: 'stored'; attempts: number; late: boolean })
  /** The call was already final (a cancel won, another gateway failed it) or is gone from the store. */
  | { kind: 'taken'; record: CallRecord | undefined }
  /** The store answered no: the result does not fit, or the record is not one it takes. */
  | { kind: 'refused'; error: StoreFullError | StoreInvalidRecordError }
  /** The store did not answer within the call's lifetime, or the gateway is shutting down. */
  | { kind: 'gave-up'; error: unknown; attempts: number };

/** What {@link EndWriter} works with. */
export interface EndWriterSettings {
  store: CallStore;
  clock: Clock;
  logger: Logger;
  metrics: StoreMetrics;
  /** Aborted when the gateway drains: writes still retrying give up after one last attempt. */
  stopping: AbortSignal;
}

/** Writes detached calls' ends for one gateway. */
export class EndWriter {
  readonly #settings: EndWriterSettings;

  constructor(settings: EndWriterSettings) {
    this.#settings = settings;
  }

  /**
   * Writes how a call ended and logs what really became of it. A result the store refuses (no
   * room) is replaced by the reason, so the call still ends with one; a write the store did not
   * answer is retried until the call's lifetime ends (see #write).
   */
  async settle(record: CallRecord, ending: Ending): Promise<Written> {
    const log = this.#settings.logger.child({ call: record.id });
    const deadline = Math.max(record.expiresAt, ending.finish.completedAt + MIN_WRITE_WINDOW_MS);
    const uncertain: Ending[] = [];
    let written = await this.#write(record.id, ending, deadline, uncertain);
    if (written.kind === 'refused') {
      const { error } = written;
      let reason: CallError;
      if (error instanceof StoreFullError) {
        this.#settings.metrics.resultsRefused.add(1);
        log.warn('detached result refused, store full', {
          bytes: error.bytes,
          storedBytes: error.storedBytes,
          maxStoredBytes: error.maxStoredBytes,
        });
        reason = recordError(
          new DetachedStoreFullError(
            `the call finished but its result (${error.bytes} bytes with its record) did not fit in the detached-call store (${error.storedBytes} of maxStoredBytes ${error.maxStoredBytes} in use until results expire); it was not kept`,
          ),
        );
      } else {
        log.error('detached result refused by the store', { error });
        reason = recordError(new ResultNotStoredError(`the store refused the result: ${error.message}`));
      }
      const { executionMs, completedAt } = ending.finish;
      const failed: CallFinish = {
        status: 'failed',
        completedAt,
        ...(executionMs === undefined ? {} : { executionMs }),
        error: reason,
      };
      written = await this.#write(record.id, { finish: failed }, deadline, uncertain);
    }
    if (written.kind === 'stored' && written.late)
      log.info('detached result stored by an earlier attempt that timed out', { status: written.finish.status });
    else if (written.kind === 'stored' && written.attempts > 1)
      log.info('detached result stored after retrying', { status: written.finish.status, attempts: written.attempts });
    else if (written.kind === 'taken' && !written.record)
      log.warn('detached call gone from the store, its end not recorded', { status: ending.finish.status });
    else if (written.kind === 'refused' || written.kind === 'gave-up') {
      log.error('detached result not stored', {
        status: ending.finish.status,
        error: written.error as Error,
        ...(written.kind === 'gave-up' ? { attempts: written.attempts } : {}),
      });
    }
    return written;
  }

  /**
   * Fails the record of a call whose create failed, in case it is there all the same: its answer
   * was lost, or it reached the store after we gave up on it. Once the store answers again the
   * compare-and-set finish changes a record only while it is still live (`queued` or `running`),
   * and finds nothing when the write never landed, which is the usual case.
   */
  async repair(record: CallRecord, cause: unknown): Promise<void> {
    const finish: CallFinish = {
      status: 'failed',
      completedAt: this.#settings.clock.now(),
      error: recordError(
        new DetachedStoreUnavailableError(
          `the store did not confirm this call's record in time (${(cause as Error).message}); the client was answered 503 and the call was not placed`,
        ),
      ),
    };
    const deadline = Math.max(record.expiresAt, finish.completedAt + MIN_WRITE_WINDOW_MS);
    const written = await this.#write(record.id, { finish }, deadline, []);
    const log = this.#settings.logger.child({ call: record.id });
    if (written.kind === 'stored') log.warn('detached record written after its call was refused, now failed', {});
    else if (written.kind !== 'taken') log.warn('detached record not repaired', { error: written.error as Error });
  }

  /**
   * Writes a call's end. A store that does not answer is asked again, with backoff and only
   * once its health check passes (another write would only queue behind the last), until
   * `deadline` or shutdown. An attempt that failed may still have landed, so a later "already
   * final" is checked against `uncertain`: it may be our own write.
   */
  async #write(id: string, ending: Ending, deadline: number, uncertain: Ending[]): Promise<Written> {
    const { clock, store } = this.#settings;
    for (let attempts = 1; ; attempts++) {
      try {
        if (await store.finish(id, ending.finish, ending.result))
          return { kind: 'stored', ...ending, attempts, late: false };
        const current = await store.get(id);
        const landed = current && uncertain.find(({ finish }) => sameEnd(current, finish));
        return landed ? { kind: 'stored', ...landed, attempts, late: true } : { kind: 'taken', record: current };
      } catch (error) {
        if (error instanceof StoreFullError || error instanceof StoreInvalidRecordError)
          return { kind: 'refused', error };
        if (!uncertain.includes(ending)) uncertain.push(ending);
        if (attempts === 1)
          this.#settings.logger.warn('store write failed, retrying', {
            call: id,
            status: ending.finish.status,
            error: error as Error,
          });
        if (this.#settings.stopping.aborted || clock.now() >= deadline) return { kind: 'gave-up', error, attempts };
        await this.#pause(attempts, deadline);
      }
    }
  }

  /** Backs off after failed attempt `attempt`, then waits for the store to pass a health check. */
  async #pause(attempt: number, deadline: number): Promise<void> {
    const { clock, store } = this.#settings;
    for (let i = attempt; ; i++) {
      const pause = Math.min(
        WRITE_RETRY_BASE_MS * 2 ** Math.min(i - 1, 16),
        WRITE_RETRY_CAP_MS,
        Math.max(0, deadline - clock.now()),
      );
      try {
        await clock.sleep(pause, this.#settings.stopping);
      } catch {
        return; // shutting down: one last attempt, then give up
      }
      // A custom store whose health() breaks its contract and rejects does not hold writes up.
      if (clock.now() >= deadline || (await store.health().catch(() => ({ ok: true }))).ok) return;
    }
  }
}

/** Whether `record` ended as `finish` says: the same status, time and reason. */
function sameEnd(record: CallRecord, finish: CallFinish): boolean {
  return (
    record.status === finish.status &&
    record.completedAt === finish.completedAt &&
    record.error?.code === finish.error?.code
  );
}
