/**
 * Runs batches: validating → in_progress → finalizing → completed (or failed, expired,
 * cancelling → cancelled). The gateway that creates a batch validates it and divides its lines
 * in chunks; then any gateway on the store takes the work a chunk at a time, on a lease it
 * renews while it runs the chunk (a dead gateway's chunks are taken over when their lease
 * expires), and whoever finds every chunk done takes the finalize step (finalize.ts). With a
 * shared store (Redis) every gateway looks for the batches running there and joins them, so
 * the work is shared and a restarted gateway resumes it; with the memory store the gateway that
 * created a batch is the only one, and its stop fails the batch.
 *
 * Each line is one call through the gateway's own call path in the `batch` priority class
 * ({@link LineCalls}), released by the window (window.ts) and, among the keys with lines to
 * run, a line per key in turn (line-release.ts). A line runs at most once: before its call it is
 * claimed in the store (a started mark), its result is written once when it ends, and a line
 * found started by another holder with no result (its gateway died while it ran) is never run
 * again but ended `line_interrupted` in the error file. A line whose answer says nothing ran (a
 * busy refusal, RETRY_CODES in batch-state.ts) is unclaimed and released again after its delay.
 * Its call carries `x-request-id: <batch id>:<custom_id>`, which the runner and engine log.
 */
import { metrics } from '@opentelemetry/api';
import type { MeterProvider } from '@opentelemetry/api';
import type { Caller } from '../access/index.ts';
import { FINAL_BATCH_STATUSES } from '../store/index.ts';
import type { BatchLineError, BatchRecord, BatchStatus, BatchStop } from '../store/index.ts';
import type { FileKeeper } from './files.ts';
import { Active, callerOf, readInput } from './batch-state.ts';
import type { Stop } from './batch-state.ts';
import { finalizeBatch } from './finalize.ts';
import { LineRelease } from './line-release.ts';
import type { LineReleaseSettings } from './line-release.ts';
import { createBatchMetrics, LineRate } from './metrics.ts';
import type { BatchMetrics, BatchStats, LineOutcome } from './metrics.ts';

export type { FleetView } from './window.ts';

/** What the runner works with. */
export interface BatchRunnerSettings extends LineReleaseSettings {
  files: FileKeeper;
  /** This gateway's id: the owner of the batches it creates. */
  gatewayId: string;
  meterProvider?: MeterProvider;
}

/** How often the runner reads its batches' records (a cancel made elsewhere, an end) and looks for batches to join, in ms. */
const POLL_MS = 1000;
/** Most chunks of one batch a gateway holds at once. */
const MAX_CHUNKS_HELD = 2;

/** Runs batches; see the file comment. */
export class BatchRunner {
  readonly #settings: BatchRunnerSettings;
  readonly #active = new Map<string, Active>();
  readonly #ended: Partial<Record<BatchStatus, number>> = {};
  readonly #rate: LineRate;
  readonly #metrics: BatchMetrics;
  readonly #lines: LineRelease;
  /** Batches this gateway could not join, their input gone: not tried again. */
  readonly #unreadable = new Set<string>();
  #ticking: AbortController | undefined;
  #closed = false;
  #polling = false;
  /** The last look for batches to join failed (the store did not answer). */
  #unread = false;

  constructor(settings: BatchRunnerSettings) {
    this.#settings = settings;
    this.#rate = new LineRate(() => settings.clock.now());
    this.#metrics = createBatchMetrics(settings.meterProvider ?? metrics.getMeterProvider(), () => this.stats());
    this.#lines = new LineRelease(settings, {
      counted: (outcome) => this.#count(outcome),
      chunkEnded: (batch) => void this.#feed(batch),
      lineEnded: (batch) => void this.#lineEnded(batch),
      batches: () => this.#active.values(),
    });
  }

  /** Starts a batch just recorded `validating`: its input is checked, then its lines run. */
  start(record: BatchRecord, caller: Caller): void {
    const batch = this.#adopt(record, caller);
    this.#validate(batch).catch((error: unknown) => this.#fail(batch, 'validation_failed', error));
  }

  /**
   * Cancels a batch: no chunk of it is handed out from now on, and its record says `cancelling`;
   * a gateway running it here stops releasing its lines at once, the others when they next read
   * its record (within a second), and whoever finalizes it when every line in flight has ended
   * writes `cancelled`. A batch of a gateway's own memory store that it does not run (it ran
   * before a restart) ends `cancelled` at once. Resolves with the record after, undefined when
   * unknown.
   */
  async cancel(id: string): Promise<BatchRecord | undefined> {
    const { store, clock, gatewayId } = this.#settings;
    const record = await store.getBatch(id);
    if (!record) return undefined;
    await store.stopBatch(id, 'cancelled');
    const batch = this.#active.get(id);
    const orphan = !batch && !store.shared && record.owner === gatewayId;
    const fields: Partial<BatchRecord> = orphan
      ? { status: 'cancelled', cancelledAt: clock.now() }
      : { status: 'cancelling', cancellingAt: record.cancellingAt ?? clock.now() };
    const after = await store.updateBatch(id, fields);
    if (batch) this.#stop(batch, 'cancelled');
    return after ?? store.getBatch(id);
  }

  /**
   * The batch as a reader should see it. On a memory store, one this gateway owns but does not
   * run (it was running when the gateway restarted) is ended `failed` (`gateway_restarted`)
   * first, since nothing will run its lines again; on a shared store the gateways resume it.
   */
  async settled(record: BatchRecord): Promise<BatchRecord> {
    const { store, clock, gatewayId } = this.#settings;
    if (store.shared || FINAL_BATCH_STATUSES.has(record.status) || record.owner !== gatewayId) return record;
    if (this.#active.has(record.id)) return record;
    const message = 'the gateway running this batch restarted; its lines are not run again';
    const errors: BatchLineError[] = [{ code: 'gateway_restarted', message }];
    return (await store.updateBatch(record.id, { status: 'failed', failedAt: clock.now(), errors })) ?? record;
  }

  /** Looks for the batches running in a shared store and joins them; the gateway calls it once started. */
  resume(): void {
    if (this.#settings.store.shared) void this.#poll();
  }

  /** The snapshot GET /v1/stats shows, and the metrics read. */
  stats(): BatchStats {
    const batches: Partial<Record<BatchStatus, number>> = { ...this.#ended };
    let linesWaiting = 0;
    for (const batch of this.#active.values()) {
      const status = batch.stop === 'cancelled' ? 'cancelling' : batch.validated ? 'in_progress' : 'validating';
      batches[status] = (batches[status] ?? 0) + 1;
      linesWaiting += batch.pending.length;
    }
    return {
      batches,
      linesWaiting,
      linesInFlight: this.#lines.inFlight,
      linesPerSecond: this.#rate.perSecond(),
    };
  }

  /**
   * Stops releasing lines and waits up to `timeout` ms for those in flight. On a shared store the
   * chunks it holds are given back for the other gateways (or this one restarted) to go on with;
   * on the memory store every batch still running is failed (`gateway_stopped`), since the store
   * goes with the gateway.
   */
  async close(timeout: number): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#lines.close();
    this.#ticking?.abort();
    await this.#lines.idle(timeout);
    const { store, holder } = this.#settings;
    const batches = [...this.#active.values()];
    if (!store.shared) {
      const reason = new Error('the gateway stopped before the batch finished');
      await Promise.all(batches.map((batch) => this.#fail(batch, 'gateway_stopped', reason)));
      return;
    }
    for (const batch of batches) {
      this.#drop(batch);
      for (const index of batch.chunks.keys()) await store.releaseChunk(batch.id, index, holder).catch(() => {});
    }
  }

  /** Holds a batch here, with its expiry timer. */
  #adopt(record: BatchRecord, caller: Caller): Active {
    const batch = new Active(record, caller);
    this.#active.set(record.id, batch);
    const { clock } = this.#settings;
    clock.sleep(Math.max(0, record.expiresAt - clock.now()), batch.expiry.signal).then(
      () => this.#stop(batch, 'expired'),
      () => {},
    );
    return batch;
  }

  async #validate(batch: Active): Promise<void> {
    const { store, config, clock } = this.#settings;
    const input = await readInput(store, batch.record, config.maxLines);
    // A cancel made on another gateway while the file was read (a shared store) is kept.
    if ((await store.getBatch(batch.id))?.status === 'cancelling') batch.stop ??= 'cancelled';
    if (batch.stop !== undefined) return this.#end(batch, { status: 'cancelled', cancelledAt: clock.now() });
    if (input.kind === 'invalid')
      return this.#end(batch, { status: 'failed', failedAt: clock.now(), errors: input.errors });
    batch.lines = input.lines;
    batch.chunkLines = config.chunkLines;
    await store.openChunks(batch.id, Math.ceil(input.lines.length / config.chunkLines));
    await store.updateBatch(batch.id, {
      status: 'in_progress',
      inProgressAt: clock.now(),
      chunkLines: config.chunkLines,
      requestCounts: { total: input.lines.length, completed: 0, failed: 0 },
    });
    batch.validated = true;
    await this.#feed(batch);
  }

  /** Joins a batch running in the shared store: its input is read, then its chunks are taken like any. */
  async #join(record: BatchRecord): Promise<void> {
    const { store, config } = this.#settings;
    const batch = this.#adopt(record, callerOf(record));
    const input = await readInput(store, record, config.maxLines).catch(() => undefined);
    if (!input || input.kind === 'invalid') {
      // Its input was deleted while it ran: only the gateways that read it before can run it. A
      // store that did not answer is tried again at the next look.
      if (input) this.#unreadable.add(record.id);
      this.#drop(batch);
      return;
    }
    batch.lines = input.lines;
    batch.chunkLines = record.chunkLines ?? config.chunkLines;
    batch.validated = true;
    if (record.status === 'cancelling') this.#stop(batch, 'cancelled');
    await this.#feed(batch);
  }

  /**
   * Asks the store for work when the batch wants some: a chunk while it holds few lines and is
   * not stopped, the finalize step once it holds nothing.
   */
  async #feed(batch: Active): Promise<void> {
    const { store, clock, config, holder } = this.#settings;
    const held = batch.chunks.size;
    const wants =
      batch.stop === undefined
        ? held < MAX_CHUNKS_HELD && batch.pending.length < batch.chunkLines
        : held === 0 && batch.inFlight === 0;
    if (this.#closed || !batch.validated || batch.taking || !wants || clock.now() < batch.idleUntil) return;
    batch.taking = true;
    try {
      const took = await store.takeChunk(batch.id, holder, config.leaseTtl);
      if (took.kind === 'chunk') this.#hold(batch, took.index);
      else if (took.kind === 'finalize') await this.#finalize(batch, took.stop ?? batch.stop);
      else batch.idleUntil = clock.now() + Math.min(POLL_MS, config.leaseTtl / 4);
    } catch (error) {
      this.#settings.logger.warn('batch work not taken', { batch: batch.id, error: error as Error });
      batch.idleUntil = clock.now() + POLL_MS;
    } finally {
      batch.taking = false;
    }
    this.#tick();
    this.#lines.release();
  }

  /** Holds chunk `index` of a batch: its lines are pending here. */
  #hold(batch: Active, index: number): void {
    const { holder, store } = this.#settings;
    if (batch.stop !== undefined || !this.#active.has(batch.id)) {
      void store.releaseChunk(batch.id, index, holder).catch(() => {});
      return;
    }
    // Its lease ran out while it was held here (a store outage), and it came back to this holder.
    if (batch.chunks.has(index)) return;
    const lines = batch.lines.slice(index * batch.chunkLines, (index + 1) * batch.chunkLines);
    batch.chunks.set(index, { left: lines.length });
    for (const line of lines) batch.pending.push({ line, chunk: index });
    batch.idleUntil = 0;
  }

  /** After a line ended: a batch with nothing left here asks for more, or for its end. */
  async #lineEnded(batch: Active): Promise<void> {
    if (batch.inFlight === 0 && batch.chunks.size === 0) batch.idleUntil = 0;
    await this.#feed(batch);
  }

  /** Looks at the window and the store every tick while any batch is held. */
  #tick(): void {
    if (this.#ticking || this.#closed) return;
    const ticking = new AbortController();
    this.#ticking = ticking;
    const { clock, config } = this.#settings;
    let polled = clock.now();
    let renewed = clock.now();
    const loop = (): void => {
      if (this.#ticking !== ticking) return;
      if (this.#active.size === 0 && !this.#settings.store.shared) {
        this.#ticking = undefined;
        return;
      }
      const now = clock.now();
      if (now - polled >= POLL_MS) {
        polled = now;
        void this.#poll();
      }
      if (now - renewed >= config.leaseTtl / 3) {
        renewed = now;
        void this.#renew();
      }
      for (const batch of this.#active.values()) {
        void this.#lines.writeLeft(batch);
        void this.#feed(batch);
      }
      this.#lines.release();
      clock.sleep(config.tick, ticking.signal).then(loop, () => {});
    };
    clock.sleep(config.tick, ticking.signal).then(loop, () => {});
  }

  /**
   * Reads the records of the batches held: one another gateway cancelled stops, one final or
   * gone is let go. On a shared store, joins the batches running there that no gateway validates
   * any more or that are past validating.
   */
  async #poll(): Promise<void> {
    if (this.#polling || this.#closed) return;
    this.#polling = true;
    const { store, clock, config } = this.#settings;
    try {
      for (const batch of [...this.#active.values()]) {
        const record = await store.getBatch(batch.id).catch(() => null);
        if (record === null) continue;
        if (!record || FINAL_BATCH_STATUSES.has(record.status)) this.#drop(batch);
        else if (record.status === 'cancelling') this.#stop(batch, 'cancelled');
      }
      if (!store.shared) return;
      this.#tick();
      for (const id of await store.runningBatches()) {
        if (this.#active.has(id) || this.#unreadable.has(id) || this.#closed) continue;
        const record = await store.getBatch(id);
        if (!record || FINAL_BATCH_STATUSES.has(record.status)) continue;
        // A batch validating is its creator's, unless it has been so for long: its creator died.
        if (record.status === 'validating' && clock.now() - record.createdAt < 2 * config.leaseTtl) continue;
        if (record.status === 'validating') this.start(record, callerOf(record));
        else await this.#join(record);
      }
      this.#unread = false;
    } catch (error) {
      // Once per outage, not once a second.
      if (!this.#unread) this.#settings.logger.warn('batch store not read', { error: error as Error });
      this.#unread = true;
    } finally {
      this.#polling = false;
    }
  }

  /** Renews the leases of the chunks held; a chunk whose lease was lost is let go (its lines are another's). */
  async #renew(): Promise<void> {
    const { store, config, holder } = this.#settings;
    for (const batch of [...this.#active.values()]) {
      for (const index of [...batch.chunks.keys()]) {
        const kept = await store.renewChunk(batch.id, index, holder, config.leaseTtl).catch(() => true);
        if (kept) continue;
        this.#settings.logger.warn('batch chunk lease lost', { batch: batch.id, chunk: index });
        this.#lines.letGo(batch, index);
      }
    }
  }

  #count(outcome: LineOutcome): void {
    this.#metrics.line(outcome);
    if (outcome !== 'retried') this.#rate.add();
  }

  /** Stops releasing a batch's lines: those pending are let go, its chunks done once their lines in flight end. */
  #stop(batch: Active, stop: Stop): void {
    if (batch.stop !== undefined || !this.#active.has(batch.id)) return;
    batch.stop = stop;
    batch.expiry.abort();
    batch.idleUntil = 0;
    this.#lines.stopped(batch);
    // The store hands out no more of its chunks, whoever stopped it (a record marked elsewhere too).
    void this.#settings.store
      .stopBatch(batch.id, stop === 'expired' ? 'expired' : 'cancelled')
      .catch(() => {})
      .then(() => this.#feed(batch));
  }

  /** Takes the finalize step: the files assembled from the results, the final status. */
  async #finalize(batch: Active, stop: BatchStop | undefined): Promise<void> {
    try {
      const ended = await finalizeBatch(this.#settings, batch, stop);
      if (ended) this.#ended[ended.status] = (this.#ended[ended.status] ?? 0) + 1;
      this.#drop(batch);
    } catch (error) {
      await this.#fail(batch, 'output_not_stored', error);
    }
  }

  /** Lets a batch go from this gateway. */
  #drop(batch: Active): void {
    this.#active.delete(batch.id);
    batch.expiry.abort();
    batch.pending.length = 0;
  }

  /** Ends a batch `failed` with one reason. */
  async #fail(batch: Active, code: string, error: unknown): Promise<void> {
    const message =
      code === 'gateway_stopped' ? (error as Error).message : `${code}: ${String((error as Error)?.message ?? error)}`;
    const errors: BatchLineError[] = [{ code, message }];
    this.#settings.logger.warn('batch failed', { batch: batch.id, code });
    await this.#end(batch, { status: 'failed', failedAt: this.#settings.clock.now(), errors }).catch(() => {});
  }

  /** Writes a final status and counts the batch as ended so. */
  async #end(batch: Active, fields: Partial<BatchRecord>): Promise<void> {
    this.#drop(batch);
    const status = fields.status!;
    if (FINAL_BATCH_STATUSES.has(status)) this.#ended[status] = (this.#ended[status] ?? 0) + 1;
    const { store } = this.#settings;
    try {
      // The counts the store keeps from the results written become the record's own.
      const counted = await store.getBatch(batch.id);
      await store.updateBatch(batch.id, { ...(counted ? { requestCounts: counted.requestCounts } : {}), ...fields });
    } catch (error) {
      this.#settings.logger.error('batch record not written', { batch: batch.id, error: error as Error });
    }
  }
}
