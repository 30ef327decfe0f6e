/**
 * A simulated engine on the virtual clock: the live sim engine's model (runner/engines/sim) with
 * its timers replaced by events, so a thousand of them run in one process faster than real time.
 *
 * Kept from the live engine, with its own functions where it exports them:
 * - admission (scheduler.ts): at most `maxNumSeqs` sequences run; the rest wait first in, first
 *   out, up to `maxQueue`; one more is refused (429). A free slot is not taken past a non-empty
 *   queue. When a sequence ends, the longest waiting one starts at once.
 * - prefill (generate.ts, timing.ts): the prefix cache is looked up when a sequence starts; its
 *   first token comes `jitter(prefillOverheadMs + uncached x prefillPerTokenMs)` x `loadScale` of
 *   the sequences running at that moment later, and its blocks are cached then.
 * - the profile's numbers, `jitter` and `loadScale` themselves, and the cache's block size.
 *
 * Approximations, each for speed (per-token events for a million calls of 64 tokens would be
 * 64 million events):
 * - Decode is a fluid. The live engine waits `jitter(itlMs) x loadScale(running)` before each
 *   token, the scale read when the wait starts. Here each engine keeps a work clock that advances
 *   at 1 / loadScale(running) per ms, re-rated the moment `running` changes, and a sequence ends
 *   once it has done its work: one draw of `jitter((tokens - 1) x itlMs)` with the standard
 *   deviation of the sum of that many per-token draws (sqrt(tokens - 1) x itlJitterStdMs). Mean
 *   and spread of a sequence's decode time match; a change in `running` takes effect within a
 *   token instead of at the next one (a few ms on a decode of about a second).
 * - The prefix cache is {@link BlockRunCache}: the same blocks as the live LRU, named from the
 *   workload's structure instead of hashed from the text.
 * - KV-cache use, reported to placers as a tie-breaker, counts generated tokens from the fluid's
 *   progress, and is read when the runner's status is taken rather than up to a second before.
 */
import type { PrefixCacheTotals, SimProfile } from '../../../runner/index.ts';
import { BLOCK_SIZE, jitter, loadScale } from '../../../runner/index.ts';
import { BlockRunCache } from './block-cache.ts';
import type { ChainHolding } from './block-cache.ts';
import type { PromptBlocks } from './trace.ts';

/** Schedules `handle` to be called with `at`, a virtual time in ms; the simulation's event queue. */
export type Schedule = (at: number, handle: (now: number) => void) => void;

/** One request to an engine, and what it tells its sender. */
export interface EngineRequest {
  readonly prompt: PromptBlocks;
  /** Tokens to produce (`max_tokens` with `ignore_eos`), at least 1. */
  readonly outputTokens: number;
  /** Called when the request starts, with its prompt's leading tokens found in the cache. */
  onStart?(cachedTokens: number): void;
  /** Called when the first token exists. */
  onFirstToken(now: number): void;
  /** Called when the last token exists and the slot is free again. */
  onDone(now: number): void;
}

/** A request holding a slot. */
interface Sequence {
  readonly request: EngineRequest;
  /** Work-clock reading at which decode started, and at which it is done. */
  startWork: number;
  finishWork: number;
}

/** Below this much work left a sequence is done: float rounding of the work clock, not work. */
const WORK_EPSILON = 1e-9;

/** The virtual engine. */
export class VirtualEngine {
  readonly id: number;
  readonly #profile: SimProfile;
  readonly #random: () => number;
  readonly #schedule: Schedule;
  readonly #cache: BlockRunCache;
  /** Requests waiting for a slot, first in first out: `#waiting[#waitingHead]` is next. */
  #waiting: EngineRequest[] = [];
  #waitingHead = 0;
  #running = 0;
  /** Sequences past their first token (at most maxNumSeqs, so a scan is cheap). */
  readonly #decoding: Sequence[] = [];
  /** Every admitted sequence, for the KV-cache share. */
  readonly #admitted = new Set<Sequence>();
  #work = 0;
  #workAt = 0;
  #scale = 1;
  /** Bumped whenever the next decode finish is rescheduled; an event with an older one is stale. */
  #version = 0;
  #rejected = 0;
  #queuePeak = 0;
  readonly #inserted: ((prompt: PromptBlocks, now: number) => void)[] = [];

  /**
   * @param profile timing and capacity numbers (tests set the jitter to 0).
   * @param random uniform [0, 1) source of the jitter, seeded by the simulation.
   * @param schedule the simulation's event queue.
   */
  constructor(id: number, profile: SimProfile, random: () => number, schedule: Schedule) {
    this.id = id;
    this.#profile = profile;
    this.#random = random;
    this.#schedule = schedule;
    this.#cache = new BlockRunCache(profile.cacheBlocks);
  }

  /** Sequences holding a slot (in prefill or decode). */
  get running(): number {
    return this.#running;
  }

  /** Requests waiting for a slot. */
  get waiting(): number {
    return this.#waiting.length - this.#waitingHead;
  }

  /** Requests refused because the queue was full. */
  get rejected(): number {
    return this.#rejected;
  }

  /** Most requests ever waiting at once. */
  get queuePeak(): number {
    return this.#queuePeak;
  }

  /** Prefix-cache queries and hits in tokens, over the engine's life. */
  cacheTotals(): PrefixCacheTotals {
    return this.#cache.totals();
  }

  /** Blocks of `prompt`'s chains the prefix cache holds now, read as a cache-aware oracle would. */
  holding(prompt: PromptBlocks): ChainHolding {
    return this.#cache.holding(prompt);
  }

  /** A copy of the prefix cache as it is now: the start of a mirror fed by {@link onInsert}. */
  copyCache(): BlockRunCache {
    return this.#cache.copy();
  }

  /**
   * Tells `listener` of every prompt the prefix cache stores from now on, as it stores it: the
   * engine's BlockStored events (evictions follow from the inserts, the cache being an LRU that
   * reads never refresh).
   */
  onInsert(listener: (prompt: PromptBlocks, now: number) => void): void {
    this.#inserted.push(listener);
  }

  /** Caches `prompts`' blocks as if they had been served before the run, without counting a lookup. */
  warm(prompts: readonly PromptBlocks[]): void {
    for (const prompt of prompts) this.#cache.insert(prompt);
  }

  /**
   * A request arrives at `now`. Returns false, having done nothing, when the queue is full: the
   * live engine's 429.
   */
  submit(request: EngineRequest, now: number): boolean {
    if (this.#running < this.#profile.maxNumSeqs && this.waiting === 0) {
      this.#start(request, now);
      this.#reschedule(now);
      return true;
    }
    if (this.waiting >= this.#profile.maxQueue) {
      this.#rejected++;
      return false;
    }
    this.#waiting.push(request);
    this.#queuePeak = Math.max(this.#queuePeak, this.waiting);
    return true;
  }

  /**
   * Held KV blocks over the device's, 0..1, as `vllm:kv_cache_usage_perc` reads: every admitted
   * sequence holds ceil((prompt + generated tokens) / 16) blocks.
   */
  kvCacheUsage(now: number): number {
    this.#advance(now);
    let held = 0;
    for (const s of this.#admitted) {
      const decodeWork = s.finishWork - s.startWork;
      const generated = Number.isFinite(s.startWork)
        ? 1 +
          Math.floor(((this.#work - s.startWork) / Math.max(decodeWork, WORK_EPSILON)) * (s.request.outputTokens - 1))
        : 0;
      held += Math.ceil((s.request.prompt.tokens + Math.min(generated, s.request.outputTokens)) / BLOCK_SIZE);
    }
    return Math.min(1, held / this.#profile.kvBlocks);
  }

  /** Admits `request`: cache lookup, then its prefill at the load it starts under. The caller reschedules decode. */
  #start(request: EngineRequest, now: number): void {
    this.#setRunning(this.#running + 1, now);
    const p = this.#profile;
    const cached = this.#cache.lookup(request.prompt);
    request.onStart?.(cached);
    const prefillMs = p.prefillOverheadMs + Math.max(0, request.prompt.tokens - cached) * p.prefillPerTokenMs;
    const delay =
      jitter(prefillMs, p.prefillJitterStdMs, this.#random) * loadScale(p.loadFactor, this.#running, p.maxNumSeqs);
    const sequence: Sequence = { request, startWork: Number.NaN, finishWork: Number.NaN };
    this.#admitted.add(sequence);
    this.#schedule(now + delay, (at) => this.#firstToken(sequence, at));
  }

  /** Prefill is done: the blocks are cached, the first token goes out, decode begins. */
  #firstToken(sequence: Sequence, now: number): void {
    const { request } = sequence;
    this.#cache.insert(request.prompt);
    for (const listener of this.#inserted) listener(request.prompt, now);
    request.onFirstToken(now);
    const gaps = request.outputTokens - 1;
    if (gaps <= 0) {
      this.#finish(sequence, now);
    } else {
      this.#advance(now);
      const p = this.#profile;
      sequence.startWork = this.#work;
      sequence.finishWork = this.#work + jitter(gaps * p.itlMs, Math.sqrt(gaps) * p.itlJitterStdMs, this.#random);
      this.#decoding.push(sequence);
    }
    this.#reschedule(now);
  }

  /** The decode finish event: ends every sequence whose work is done, if the event is not stale. */
  #decodeDue(version: number, now: number): void {
    if (version !== this.#version) return;
    this.#advance(now);
    // Collected first: finishing one admits a waiting request, which changes `running`.
    const done = this.#decoding.filter((s) => s.finishWork - this.#work <= WORK_EPSILON);
    for (const s of done) this.#decoding.splice(this.#decoding.indexOf(s), 1);
    for (const s of done) this.#finish(s, now);
    this.#reschedule(now);
  }

  /** Frees the slot, tells the sender, and starts the longest waiting request if any. The caller reschedules decode. */
  #finish(sequence: Sequence, now: number): void {
    this.#admitted.delete(sequence);
    this.#setRunning(this.#running - 1, now);
    sequence.request.onDone(now);
    while (this.#running < this.#profile.maxNumSeqs && this.waiting > 0) this.#start(this.#takeWaiting(), now);
  }

  #takeWaiting(): EngineRequest {
    const next = this.#waiting[this.#waitingHead]!;
    this.#waitingHead++;
    if (this.#waitingHead >= 1_024 && this.#waitingHead * 2 >= this.#waiting.length) {
      this.#waiting = this.#waiting.slice(this.#waitingHead);
      this.#waitingHead = 0;
    }
    return next;
  }

  /** Changes `running`, settling the work done at the old rate first; the caller reschedules decode. */
  #setRunning(running: number, now: number): void {
    this.#advance(now);
    this.#running = running;
    const p = this.#profile;
    this.#scale = loadScale(p.loadFactor, running, p.maxNumSeqs);
  }

  /** Brings the work clock to `now`: it ran at 1 / scale per ms since it was last read. */
  #advance(now: number): void {
    if (now > this.#workAt) {
      this.#work += (now - this.#workAt) / this.#scale;
      this.#workAt = now;
    }
  }

  /** Schedules the next decode finish at the current rate; earlier schedules go stale. */
  #reschedule(now: number): void {
    this.#version++;
    if (this.#decoding.length === 0) return;
    let next = Infinity;
    for (const s of this.#decoding) next = Math.min(next, s.finishWork);
    const version = this.#version;
    const at = now + Math.max(0, next - this.#work) * this.#scale;
    this.#schedule(at, (when) => this.#decodeDue(version, when));
  }
}
