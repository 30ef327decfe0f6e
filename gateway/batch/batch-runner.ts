/**
 * Runs the batches this gateway created: validating → in_progress → finalizing → completed (or
 * failed, expired, cancelling → cancelled). Each line is one call through the gateway's own
 * call path in the `batch` priority class ({@link LineCalls}), released by the window
 * (window.ts) and, among the keys with lines to run, a line per key in turn, so one key's large
 * batch does not hold back another's.
 *
 * A line runs at most once: it leaves the pending list when released, and goes back only when
 * its answer says nothing ran (a busy or rate-limit refusal, RETRY_CODES in batch-state.ts), after a
 * delay. Any other answer is its result, written once: a 2xx to the output file, the rest to
 * the error file. Its call carries `x-request-id: <batch id>:<custom_id>`, which the runner and
 * engine log. Cancel and expiry stop new lines at once and let running ones finish; an expired
 * batch lists the lines it never ran in its error file (`batch_expired`).
 */
import { metrics } from '@opentelemetry/api';
import type { MeterProvider } from '@opentelemetry/api';
import type { Clock, Logger } from '../../placer/kernel/index.ts';
import type { Runner } from '../../placer/types.ts';
import type { Caller } from '../access/index.ts';
import { FINAL_BATCH_STATUSES } from '../store/index.ts';
import type { BatchLineError, BatchRecord, BatchStatus, BatchStore } from '../store/index.ts';
import { clientRequestId, PRIORITY_HEADER, REQUEST_ID_HEADER } from '../http/index.ts';
import type { FileKeeper } from './files.ts';
import { newObjectId } from './files.ts';
import { parseBatchInput } from './jsonl.ts';
import type { BatchLine } from './jsonl.ts';
import type { LineAnswer, LineCalls } from './line-calls.ts';
import { Active, keyLineBound, retryDelay } from './batch-state.ts';
import type { Stop } from './batch-state.ts';
import { createBatchMetrics, LineRate } from './metrics.ts';
import type { BatchMetrics, BatchStats, LineOutcome } from './metrics.ts';
import type { BatchConfig } from './options.ts';
import { answeredLine, unansweredLine } from './views.ts';
import { freeSlots, linesToRelease } from './window.ts';

/** What the window reads of the fleet and the queue. */
export interface FleetView {
  /** The runners that may serve `model`. */
  runners(model: string): readonly Pick<Runner, 'load'>[];
  /** Batch-class calls of `model` waiting in this gateway's queue. */
  waiting(model: string): number;
}

/** What the runner works with. */
export interface BatchRunnerSettings {
  store: BatchStore;
  files: FileKeeper;
  calls: LineCalls;
  fleet: FleetView;
  clock: Clock;
  logger: Logger;
  config: BatchConfig;
  /** The most of a line's answer kept (the gateway's maxResultBytes). */
  maxResultBytes: number;
  /** This gateway's id: the owner of the batches it creates and runs. */
  gatewayId: string;
  meterProvider?: MeterProvider;
}

/** How often the runner reads its batches' records for a cancel made on another gateway, in ms. */
const CANCEL_POLL_MS = 1000;

/** Runs this gateway's batches; see the file comment. */
export class BatchRunner {
  readonly #settings: BatchRunnerSettings;
  readonly #active = new Map<string, Active>();
  readonly #ended: Partial<Record<BatchStatus, number>> = {};
  /** Lines in flight by key (flow), held under each key's {@link keyLineBound}. */
  readonly #flowInFlight = new Map<string, number>();
  readonly #rate: LineRate;
  readonly #metrics: BatchMetrics;
  #inFlight = 0;
  /** The key a line was last released for: the next release starts with the key after it. */
  #lastFlow: string | undefined;
  #ticking: AbortController | undefined;
  #closed = false;
  /** Resolves a close waiting for the lines in flight. */
  #idle: (() => void) | undefined;

  constructor(settings: BatchRunnerSettings) {
    this.#settings = settings;
    this.#rate = new LineRate(() => settings.clock.now());
    this.#metrics = createBatchMetrics(settings.meterProvider ?? metrics.getMeterProvider(), () => this.stats());
  }

  /** Starts a batch just recorded `validating`: its input is checked, then its lines run. */
  start(record: BatchRecord, caller: Caller): void {
    const batch = new Active(record, caller);
    this.#active.set(record.id, batch);
    const { clock } = this.#settings;
    clock.sleep(Math.max(0, record.expiresAt - clock.now()), batch.expiry.signal).then(
      () => this.#stop(batch, 'expired'),
      () => {},
    );
    this.#validate(batch).catch((error: unknown) => this.#fail(batch, 'validation_failed', error));
  }

  /**
   * Cancels a batch: one running here stops releasing lines at once (`cancelling`) and ends
   * `cancelled` when its lines in flight have. One another gateway runs (a shared store) is
   * marked `cancelling`, which that gateway reads within a second and acts on; one of this
   * gateway's that does not run here (it ran before a restart) ends `cancelled` at once.
   * Resolves with the record after, undefined when unknown.
   */
  async cancel(id: string): Promise<BatchRecord | undefined> {
    const batch = this.#active.get(id);
    const { store, clock, gatewayId } = this.#settings;
    if (!batch) {
      const record = await store.getBatch(id);
      if (!record) return undefined;
      const fields: Partial<BatchRecord> =
        record.owner === gatewayId
          ? { status: 'cancelled', cancelledAt: clock.now() }
          : { status: 'cancelling', cancellingAt: record.cancellingAt ?? clock.now() };
      return (await store.updateBatch(id, fields)) ?? store.getBatch(id);
    }
    if (batch.stop === undefined) {
      await store.updateBatch(id, { status: 'cancelling', cancellingAt: clock.now() });
      this.#stop(batch, 'cancelled');
    }
    return store.getBatch(id);
  }

  /**
   * The batch as a reader should see it: one this gateway owns but does not run (it was running
   * when the gateway restarted, on a store that outlived it) is ended `failed`
   * (`gateway_restarted`) first, since nothing will run its lines again.
   */
  async settled(record: BatchRecord): Promise<BatchRecord> {
    const { store, clock, gatewayId } = this.#settings;
    if (FINAL_BATCH_STATUSES.has(record.status) || record.owner !== gatewayId || this.#active.has(record.id))
      return record;
    const message = 'the gateway running this batch restarted; its lines are not run again';
    const errors: BatchLineError[] = [{ code: 'gateway_restarted', message }];
    return (await store.updateBatch(record.id, { status: 'failed', failedAt: clock.now(), errors })) ?? record;
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
    return { batches, linesWaiting, linesInFlight: this.#inFlight, linesPerSecond: this.#rate.perSecond() };
  }

  /**
   * Stops releasing lines, waits up to `timeout` ms for those in flight, and fails every batch
   * still running (`gateway_stopped`): the memory store goes with the gateway, and a batch is
   * run only by the gateway that created it.
   */
  async close(timeout: number): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#ticking?.abort();
    if (this.#inFlight > 0) {
      const idle = new Promise<void>((resolve) => (this.#idle = resolve));
      await Promise.race([idle, new Promise((resolve) => setTimeout(resolve, timeout).unref())]);
    }
    const reason = new Error('the gateway stopped before the batch finished');
    await Promise.all([...this.#active.values()].map((batch) => this.#fail(batch, 'gateway_stopped', reason)));
  }

  async #validate(batch: Active): Promise<void> {
    const { store, config, clock } = this.#settings;
    const content = await store.fileContent(batch.record.inputFileId);
    const input = content
      ? parseBatchInput(content, batch.record.endpoint, config.maxLines)
      : {
          kind: 'invalid' as const,
          errors: [{ code: 'missing_file', message: `input file ${batch.record.inputFileId} is gone` }],
        };
    // A cancel made on another gateway while the file was read (a shared store) is kept.
    if ((await store.getBatch(batch.id))?.status === 'cancelling') batch.stop ??= 'cancelled';
    if (batch.stop !== undefined) return this.#finalize(batch);
    if (input.kind === 'invalid')
      return this.#end(batch, { status: 'failed', failedAt: clock.now(), errors: input.errors });
    batch.pending.push(...input.lines);
    batch.counts.total = input.lines.length;
    batch.validated = true;
    await store.updateBatch(batch.id, {
      status: 'in_progress',
      inProgressAt: clock.now(),
      requestCounts: { ...batch.counts },
    });
    this.#tick();
    this.#release();
  }

  /** Looks at the window every tick while any batch has lines, besides each line's end. */
  #tick(): void {
    if (this.#ticking || this.#closed) return;
    const ticking = new AbortController();
    this.#ticking = ticking;
    const { clock, config } = this.#settings;
    let polled = clock.now();
    const loop = (): void => {
      if (this.#ticking !== ticking) return;
      if (![...this.#active.values()].some((b) => b.pending.length > 0)) {
        this.#ticking = undefined;
        return;
      }
      if (clock.now() - polled >= CANCEL_POLL_MS) {
        polled = clock.now();
        void this.#pollCancels();
      }
      this.#release();
      clock.sleep(config.tick, ticking.signal).then(loop, () => {});
    };
    clock.sleep(config.tick, ticking.signal).then(loop, () => {});
  }

  /** Stops the batches another gateway marked `cancelling` in the shared store. */
  async #pollCancels(): Promise<void> {
    for (const batch of [...this.#active.values()]) {
      if (batch.stop !== undefined) continue;
      const record = await this.#settings.store.getBatch(batch.id).catch(() => undefined);
      if (record?.status === 'cancelling') this.#stop(batch, 'cancelled');
    }
  }

  /** Releases what the window allows, a line per key in turn. */
  #release(): void {
    if (this.#closed) return;
    const now = this.#settings.clock.now();
    const byFlow = new Map<string, Active[]>();
    for (const batch of this.#active.values()) {
      if (!batch.validated || batch.stop !== undefined || batch.pending.length === 0 || batch.notBefore > now) continue;
      const list = byFlow.get(batch.flow) ?? [];
      list.push(batch);
      byFlow.set(batch.flow, list);
    }
    const flows = [...byFlow.keys()];
    if (flows.length === 0) return;
    const start = this.#lastFlow === undefined ? 0 : (flows.indexOf(this.#lastFlow) + 1) % flows.length;
    const budgets = new Map<string, number>();
    let released = true;
    while (released) {
      released = false;
      for (let i = 0; i < flows.length; i++) {
        const batches = byFlow.get(flows[(start + i) % flows.length]!)!;
        if (this.#inFlight >= this.#settings.config.maxLinesInFlight) return;
        const batch = batches.find(
          (b) =>
            b.pending.length > 0 &&
            (this.#flowInFlight.get(b.flow) ?? 0) < keyLineBound(b.caller) &&
            this.#budget(budgets, b.pending[0]!.model) > 0,
        );
        if (!batch) continue;
        const line = batch.pending.shift()!;
        budgets.set(line.model, budgets.get(line.model)! - 1);
        this.#lastFlow = batch.flow;
        void this.#run(batch, line);
        released = true;
      }
    }
  }

  /** What the window allows for `model` in this release, computed once per release. */
  #budget(budgets: Map<string, number>, model: string): number {
    const known = budgets.get(model);
    if (known !== undefined) return known;
    const { fleet, config } = this.#settings;
    const budget = linesToRelease({
      free: freeSlots(fleet.runners(model)),
      waiting: fleet.waiting(model),
      inFlight: this.#inFlight,
      maxInFlight: config.maxLinesInFlight,
    });
    budgets.set(model, budget);
    return budget;
  }

  async #run(batch: Active, line: BatchLine): Promise<void> {
    this.#inFlight++;
    batch.inFlight++;
    this.#flowInFlight.set(batch.flow, (this.#flowInFlight.get(batch.flow) ?? 0) + 1);
    let answer: LineAnswer | undefined;
    let failure: unknown;
    try {
      answer = await this.#settings.calls.post({
        path: line.url,
        body: line.body,
        headers: {
          [PRIORITY_HEADER]: 'batch',
          [REQUEST_ID_HEADER]: clientRequestId(`${batch.id}:${line.customId}`) ?? `${batch.id}:line-${line.line}`,
        },
        caller: batch.caller,
        maxBytes: this.#settings.maxResultBytes,
      });
    } catch (error) {
      failure = error;
    }
    this.#inFlight--;
    batch.inFlight--;
    const flowLeft = this.#flowInFlight.get(batch.flow)! - 1;
    if (flowLeft === 0) this.#flowInFlight.delete(batch.flow);
    else this.#flowInFlight.set(batch.flow, flowLeft);
    if (this.#settle(batch, line, answer, failure)) await this.#write(batch, { requestCounts: { ...batch.counts } });
    if (this.#inFlight === 0) this.#idle?.();
    if (batch.inFlight === 0 && (batch.stop !== undefined || batch.pending.length === 0)) await this.#finalize(batch);
    // The slot the line held is free for any batch's next line.
    this.#release();
  }

  /**
   * Keeps a line's result, or puts the line back when its answer says nothing ran; true when
   * the line ended (its result kept).
   */
  #settle(batch: Active, line: BatchLine, answer: LineAnswer | undefined, failure: unknown): boolean {
    const retryAfter = answer && retryDelay(answer);
    if (retryAfter !== undefined) {
      batch.pending.unshift(line);
      batch.notBefore = this.#settings.clock.now() + retryAfter;
      this.#count('retried');
      return false;
    }
    const id = newObjectId('batch_req');
    if (answer && answer.status >= 200 && answer.status < 300 && !answer.truncated) {
      batch.output.push(answeredLine(id, line, answer));
      batch.counts.completed++;
      this.#count('completed');
      return true;
    }
    if (answer?.truncated) {
      const message = `the answer was larger than maxResultBytes (${this.#settings.maxResultBytes})`;
      batch.errors.push(unansweredLine(id, line, 'result_too_large', message));
    } else if (answer) batch.errors.push(answeredLine(id, line, answer));
    else batch.errors.push(unansweredLine(id, line, 'internal_error', `the call failed: ${String(failure)}`));
    batch.counts.failed++;
    this.#count('failed');
    return true;
  }

  #count(outcome: LineOutcome): void {
    this.#metrics.line(outcome);
    if (outcome !== 'retried') this.#rate.add();
  }

  #stop(batch: Active, stop: Stop): void {
    if (batch.stop !== undefined || !this.#active.has(batch.id)) return;
    batch.stop = stop;
    batch.expiry.abort();
    if (batch.inFlight === 0 && batch.validated) void this.#finalize(batch);
  }

  /** Ends a batch whose lines in flight are done: its files written, its final status. */
  async #finalize(batch: Active): Promise<void> {
    if (!this.#active.delete(batch.id)) return;
    batch.expiry.abort();
    const { clock, files } = this.#settings;
    const { stop } = batch;
    if (stop === undefined)
      await this.#write(batch, { status: 'finalizing', finalizingAt: clock.now(), requestCounts: { ...batch.counts } });
    if (stop === 'expired') {
      const message = 'This request could not be executed before the completion window expired.';
      for (const line of batch.pending.splice(0)) {
        batch.errors.push(unansweredLine(newObjectId('batch_req'), line, 'batch_expired', message));
        batch.counts.failed++;
      }
    }
    try {
      const keep = async (lines: string[], name: string) =>
        lines.length === 0
          ? undefined
          : (
              await files.keep({
                caller: batch.caller,
                filename: `${batch.id}_${name}.jsonl`,
                purpose: 'batch_output',
                content: Buffer.from(`${lines.join('\n')}\n`),
              })
            ).id;
      const outputFileId = await keep(batch.output, 'output');
      const errorFileId = await keep(batch.errors, 'error');
      const now = clock.now();
      const final: Partial<BatchRecord> =
        stop === 'cancelled'
          ? { status: 'cancelled', cancelledAt: now }
          : stop === 'expired'
            ? { status: 'expired', expiredAt: now }
            : { status: 'completed', completedAt: now };
      await this.#end(batch, {
        ...final,
        ...(outputFileId ? { outputFileId } : {}),
        ...(errorFileId ? { errorFileId } : {}),
      });
    } catch (error) {
      await this.#fail(batch, 'output_not_stored', error);
    }
  }

  /** Ends a batch `failed` with one reason. */
  async #fail(batch: Active, code: string, error: unknown): Promise<void> {
    this.#active.delete(batch.id);
    batch.expiry.abort();
    const message =
      code === 'gateway_stopped' ? (error as Error).message : `${code}: ${String((error as Error)?.message ?? error)}`;
    const errors: BatchLineError[] = [{ code, message }];
    this.#settings.logger.warn('batch failed', { batch: batch.id, code });
    await this.#end(batch, { status: 'failed', failedAt: this.#settings.clock.now(), errors }).catch(() => {});
  }

  /** Writes a final status, with the counts, and counts the batch as ended so. */
  async #end(batch: Active, fields: Partial<BatchRecord>): Promise<void> {
    this.#active.delete(batch.id);
    batch.expiry.abort();
    const status = fields.status!;
    if (FINAL_BATCH_STATUSES.has(status)) this.#ended[status] = (this.#ended[status] ?? 0) + 1;
    await this.#write(batch, { ...fields, requestCounts: { ...batch.counts } });
  }

  async #write(batch: Active, fields: Partial<BatchRecord>): Promise<void> {
    try {
      await this.#settings.store.updateBatch(batch.id, fields);
    } catch (error) {
      this.#settings.logger.error('batch record not written', { batch: batch.id, error: error as Error });
    }
  }
}
