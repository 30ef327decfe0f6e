/**
 * The lines of the chunks a gateway holds, from release to result: what the window allows is
 * released a line per key in turn (so one key's large batch does not hold back another's), each
 * line is claimed in the store before its call, and its result is written once when it ends. A
 * result the store cannot take now (it is unavailable) is kept and written again each tick; a
 * chunk is done when every line of it has its result written.
 */
import type { BatchStore, LineResult } from '../store/index.ts';
import { clientRequestId, PRIORITY_HEADER, REQUEST_ID_HEADER } from '../http/index.ts';
import type { Clock, Logger } from '../../placer/kernel/index.ts';
import { newObjectId } from './files.ts';
import type { LineAnswer, LineCalls } from './line-calls.ts';
import { keyLineBound, retryDelay } from './batch-state.ts';
import type { Active, ChunkLine } from './batch-state.ts';
import type { LineOutcome } from './metrics.ts';
import type { BatchConfig } from './options.ts';
import { answeredLine, unansweredLine } from './views.ts';
import { freeSlots, linesToRelease } from './window.ts';
import type { FleetView } from './window.ts';

/** What the release works with: the part of the runner's settings (batch-runner.ts) it reads. */
export interface LineReleaseSettings {
  store: BatchStore;
  calls: LineCalls;
  fleet: FleetView;
  clock: Clock;
  logger: Logger;
  config: BatchConfig;
  /** The most of a line's answer kept (the gateway's maxResultBytes). */
  maxResultBytes: number;
  /**
   * The holder of the leases and line marks the runner takes: this gateway's id and a random
   * part, so that a gateway restarted with the same id never takes a mark of its past life for
   * its own.
   */
  holder: string;
}

/** What the release tells the runner. */
export interface LineReleaseEvents {
  counted(outcome: LineOutcome): void;
  /** A chunk of the batch is done here. */
  chunkEnded(batch: Active): void;
  /** A line of the batch left flight. */
  lineEnded(batch: Active): void;
  /** The batches held now. */
  batches(): Iterable<Active>;
}

/** How long a line waits when the store could not claim it, in ms. */
const CLAIM_RETRY_MS = 1000;

/** The message of a line found started by a holder that wrote no result. */
const INTERRUPTED =
  'the gateway running this line stopped before its answer was written; it is not run again, so it never runs twice';

/** Releases and runs the lines of the chunks held; see the file comment. */
export class LineRelease {
  readonly #settings: LineReleaseSettings;
  readonly #events: LineReleaseEvents;
  /** Lines in flight by key (flow), held under each key's {@link keyLineBound}. */
  readonly #flowInFlight = new Map<string, number>();
  /** The key a line was last released for: the next release starts with the key after it. */
  #lastFlow: string | undefined;
  /** Lines released and not yet called (their claim is under way), by model: the fleet does not see them yet. */
  readonly #claiming = new Map<string, number>();
  #inFlight = 0;
  #closed = false;
  #idle: (() => void) | undefined;

  constructor(settings: LineReleaseSettings, events: LineReleaseEvents) {
    this.#settings = settings;
    this.#events = events;
  }

  /** Lines released and not yet ended. */
  get inFlight(): number {
    return this.#inFlight;
  }

  /** Releases no line from now on. */
  close(): void {
    this.#closed = true;
  }

  /** Resolves when no line is in flight, or after `timeout` ms. */
  async idle(timeout: number): Promise<void> {
    if (this.#inFlight === 0) return;
    const idle = new Promise<void>((resolve) => (this.#idle = resolve));
    await Promise.race([idle, new Promise((resolve) => setTimeout(resolve, timeout).unref())]);
  }

  /** Releases what the window allows over the batches held, a line per key in turn. */
  release(): void {
    const batches = this.#events.batches();
    if (this.#closed) return;
    const now = this.#settings.clock.now();
    const byFlow = new Map<string, Active[]>();
    for (const batch of batches) {
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
        const list = byFlow.get(flows[(start + i) % flows.length]!)!;
        if (this.#inFlight >= this.#settings.config.maxLinesInFlight) return;
        const batch = list.find(
          (b) =>
            b.pending.length > 0 &&
            (this.#flowInFlight.get(b.flow) ?? 0) < keyLineBound(b.caller) &&
            this.#budget(budgets, b.pending[0]!.line.model) > 0,
        );
        if (!batch) continue;
        const item = batch.pending.shift()!;
        budgets.set(item.line.model, budgets.get(item.line.model)! - 1);
        this.#lastFlow = batch.flow;
        void this.#run(batch, item);
        released = true;
      }
    }
  }

  /** Lets a chunk go (its lease was lost): its pending lines are another's now. */
  letGo(batch: Active, index: number): void {
    batch.chunks.delete(index);
    const kept = batch.pending.filter((item) => item.chunk !== index);
    batch.pending.splice(0, batch.pending.length, ...kept);
  }

  /** A batch stopped: its pending lines are not run, and its chunks with nothing in flight are done. */
  stopped(batch: Active): void {
    for (const item of batch.pending.splice(0)) this.#left(batch, item.chunk);
  }

  /** Writes again the results the store could not take before. */
  async writeLeft(batch: Active): Promise<void> {
    for (const { item, result } of batch.unwritten.splice(0)) await this.#write(batch, item, result);
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
    budgets.set(model, budget - (this.#claiming.get(model) ?? 0));
    return budgets.get(model)!;
  }

  async #run(batch: Active, item: ChunkLine): Promise<void> {
    const { store, holder, clock } = this.#settings;
    // Already in flight here from an earlier hold of its chunk: that run ends it.
    if (batch.running.has(item.line.customId)) return;
    batch.running.add(item.line.customId);
    this.#took(batch, 1);
    const model = item.line.model;
    this.#claiming.set(model, (this.#claiming.get(model) ?? 0) + 1);
    const claim = await store.claimLine(batch.id, item.line.customId, holder).catch(() => undefined);
    const claiming = this.#claiming.get(model)! - 1;
    if (claiming === 0) this.#claiming.delete(model);
    else this.#claiming.set(model, claiming);
    if (claim === undefined) {
      this.#putBack(batch, item, clock.now() + CLAIM_RETRY_MS);
    } else if (claim === 'ended') {
      this.#left(batch, item.chunk);
    } else if (claim === 'started') {
      const id = newObjectId('batch_req');
      await this.#write(batch, item, {
        outcome: 'failed',
        line: unansweredLine(id, item.line, 'line_interrupted', INTERRUPTED),
      });
    } else {
      await this.#call(batch, item);
    }
    this.#took(batch, -1);
    batch.running.delete(item.line.customId);
    if (this.#inFlight === 0) this.#idle?.();
    this.#events.lineEnded(batch);
    // The slot the line held is free for any batch's next line.
    this.release();
  }

  /** Makes a claimed line's call and keeps its result, or puts it back when its answer says nothing ran. */
  async #call(batch: Active, item: ChunkLine): Promise<void> {
    const { line } = item;
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
    const retryAfter = answer && retryDelay(answer);
    if (retryAfter !== undefined) {
      const { store, holder, clock } = this.#settings;
      await store.unclaimLine(batch.id, line.customId, holder).catch(() => {});
      this.#putBack(batch, item, clock.now() + retryAfter);
      this.#events.counted('retried');
      return;
    }
    await this.#write(batch, item, this.#resultOf(item, answer, failure));
  }

  #resultOf(item: ChunkLine, answer: LineAnswer | undefined, failure: unknown): LineResult {
    const id = newObjectId('batch_req');
    const { line } = item;
    if (answer && answer.status >= 200 && answer.status < 300 && !answer.truncated)
      return { outcome: 'completed', line: answeredLine(id, line, answer) };
    if (answer?.truncated) {
      const message = `the answer was larger than maxResultBytes (${this.#settings.maxResultBytes})`;
      return { outcome: 'failed', line: unansweredLine(id, line, 'result_too_large', message) };
    }
    if (answer) return { outcome: 'failed', line: answeredLine(id, line, answer) };
    return {
      outcome: 'failed',
      line: unansweredLine(id, line, 'internal_error', `the call failed: ${String(failure)}`),
    };
  }

  /** Writes a line's result once; one the store cannot take now is kept to write again. */
  async #write(batch: Active, item: ChunkLine, result: LineResult): Promise<void> {
    let written: boolean;
    try {
      written = await this.#settings.store.putLineResult(batch.id, item.line.customId, result);
    } catch (error) {
      this.#settings.logger.warn('batch line result not written yet', { batch: batch.id, error: error as Error });
      batch.unwritten.push({ item, result });
      return;
    }
    if (written) this.#events.counted(result.outcome);
    this.#left(batch, item.chunk);
  }

  #putBack(batch: Active, item: ChunkLine, notBefore: number): void {
    if (batch.stop !== undefined || !batch.chunks.has(item.chunk)) {
      this.#left(batch, item.chunk);
      return;
    }
    batch.pending.unshift(item);
    batch.notBefore = notBefore;
  }

  /** A line of a held chunk ended here; the chunk is done when none is left. */
  #left(batch: Active, index: number): void {
    const chunk = batch.chunks.get(index);
    if (!chunk) return;
    chunk.left--;
    if (chunk.left > 0) return;
    batch.chunks.delete(index);
    const { store, holder } = this.#settings;
    void store
      .endChunk(batch.id, index, holder)
      .catch(() => {})
      .then(() => this.#events.chunkEnded(batch));
  }

  #took(batch: Active, delta: 1 | -1): void {
    this.#inFlight += delta;
    batch.inFlight += delta;
    const left = (this.#flowInFlight.get(batch.flow) ?? 0) + delta;
    if (left === 0) this.#flowInFlight.delete(batch.flow);
    else this.#flowInFlight.set(batch.flow, left);
  }
}
