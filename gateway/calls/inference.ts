/**
 * Inference timings and token counts, read from what the gateway relays: time to first token,
 * time between a stream's events, end-to-end duration, the engine's usage block, and the wait
 * before a runner committed. Recorded per model and runner into the GenAI histograms
 * (observe/metrics.ts) and the windowed recorder behind GET /v1/stats (observe/stats.ts).
 *
 * What a call pays: a stream's chunks are scanned for event boundaries (`indexOf` of line feeds,
 * no copy, no JSON); a non-streamed answer is not looked at at all. At the end, only the answer's
 * last few KiB (the last two chunks, kept by reference) are searched for the usage block, and
 * only that block is parsed, so a long answer is never parsed whole.
 */
import type { Attributes } from '@opentelemetry/api';
import { GATEWAY_PROVIDER } from '../observe/index.ts';
import type { InferenceInstruments, StatsWindow } from '../observe/index.ts';

/** The bytes of an answer's end searched for its usage block: engines put it last. */
export const USAGE_TAIL_BYTES = 4096;
/** The largest usage block parsed; a real one is a few hundred bytes, details included. */
const MAX_USAGE_BYTES = 2048;

/** Tokens an engine reported in its usage block. */
export interface Usage {
  /** prompt_tokens (input_tokens in the Responses API). */
  input?: number;
  /** completion_tokens (output_tokens in the Responses API). */
  output?: number;
  /** Of the input, the tokens the engine found in its prefix cache: `prompt_tokens_details.cached_tokens` (`input_tokens_details` in the Responses API). */
  cached?: number;
}

/** What {@link AnswerWatch} read of one answer. */
export interface AnswerReading {
  /** Call start to the first body chunk, in ms; streams only (a JSON answer's head is no first token). */
  ttftMs?: number;
  /** A stream's mean gap between its events after the first, in ms; with two events or more. */
  perEventMs?: number;
  /** Events of a stream counted, its closing `[DONE]` and a usage-only chunk left out; 0 for other answers. */
  events: number;
  /** The usage block at the answer's end, when the engine sent one. */
  usage?: Usage;
}

/** How the watch of one answer is set up. */
export interface AnswerWatchOptions {
  /** True for `text/event-stream`: events are counted and timed. */
  sse: boolean;
  /** True for a JSON answer: its end is searched for a usage block. Streams are searched always. */
  json: boolean;
  /** When the call started (its body in), on `now`'s clock. */
  startedAt: number;
  now: () => number;
}

/**
 * Watches one relayed answer, chunk by chunk. SSE events end at an empty line (LF or CRLF line
 * endings); a boundary split across chunks is found all the same.
 */
export class AnswerWatch {
  readonly #sse: boolean;
  readonly #json: boolean;
  readonly #startedAt: number;
  readonly #now: () => number;
  #firstChunkAt = Number.NaN;
  #firstEventAt = Number.NaN;
  /** Times of the last three events, newest last: the closing ones may be left out at the end. */
  #t1 = Number.NaN;
  #t2 = Number.NaN;
  #t3 = Number.NaN;
  #events = 0;
  /** Bytes of the line being read, carried from the chunks before. */
  #lineLength = 0;
  /** The line being read ended its last chunk with a CR (the first half of a CRLF). */
  #lineCr = false;
  /** A non-empty line came since the last event's end. */
  #inEvent = false;
  #previous: Buffer | undefined;
  #last: Buffer | undefined;

  constructor(options: AnswerWatchOptions) {
    this.#sse = options.sse;
    this.#json = options.json;
    this.#startedAt = options.startedAt;
    this.#now = options.now;
  }

  /** Takes one chunk of the answer's body, as it arrives. */
  chunk(data: Buffer): void {
    if (data.length === 0) return;
    this.#previous = this.#last;
    this.#last = data;
    if (!this.#sse) return;
    const now = this.#now();
    if (Number.isNaN(this.#firstChunkAt)) this.#firstChunkAt = now;
    let from = 0;
    for (let lf = data.indexOf(0x0a); lf !== -1; lf = data.indexOf(0x0a, from)) {
      const length = this.#lineLength + (lf - from);
      const cr = lf > from ? data[lf - 1] === 0x0d : this.#lineCr;
      if (length === 0 || (length === 1 && cr)) {
        if (this.#inEvent) this.#event(now);
        this.#inEvent = false;
      } else {
        this.#inEvent = true;
      }
      this.#lineLength = 0;
      this.#lineCr = false;
      from = lf + 1;
    }
    if (from < data.length) {
      this.#lineLength += data.length - from;
      this.#lineCr = data[data.length - 1] === 0x0d;
    }
  }

  #event(now: number): void {
    if (this.#events === 0) this.#firstEventAt = now;
    this.#events++;
    this.#t1 = this.#t2;
    this.#t2 = this.#t3;
    this.#t3 = now;
  }

  /** What was read, once the answer ended. */
  finish(): AnswerReading {
    const tail = joinTail(this.#previous, this.#last);
    if (!this.#sse) {
      const usage = this.#json && tail ? readUsage(tail) : undefined;
      return { events: 0, ...(usage ? { usage } : {}) };
    }
    const usage = tail ? readUsage(tail) : undefined;
    // The closing `[DONE]` and a usage-only chunk (`"choices":[]`) carry no token: not counted.
    const closing = tail ? closingEvents(tail, usage !== undefined) : 0;
    const events = Math.max(0, this.#events - closing);
    const lastAt = closing === 0 ? this.#t3 : closing === 1 ? this.#t2 : this.#t1;
    return {
      ...(Number.isNaN(this.#firstChunkAt) ? {} : { ttftMs: this.#firstChunkAt - this.#startedAt }),
      ...(events >= 2 ? { perEventMs: (lastAt - this.#firstEventAt) / (events - 1) } : {}),
      events,
      ...(usage ? { usage } : {}),
    };
  }
}

/**
 * The usage block nearest the end of `tail`: the last `"usage"` whose value is an object (a
 * stream's earlier chunks carry `"usage":null`), parsed alone. Undefined when there is none, or
 * it holds neither count.
 */
export function readUsage(tail: Buffer): Usage | undefined {
  for (let at = tail.lastIndexOf('"usage"'); at >= 0; at = at === 0 ? -1 : tail.lastIndexOf('"usage"', at - 1)) {
    let i = at + 7;
    while (i < tail.length && isSpace(tail[i]!)) i++;
    if (tail[i] !== 0x3a) continue;
    i++;
    while (i < tail.length && isSpace(tail[i]!)) i++;
    if (tail[i] !== 0x7b) continue;
    const end = objectEnd(tail, i);
    if (end < 0) return undefined;
    let block: Record<string, unknown>;
    try {
      block = JSON.parse(tail.toString('utf8', i, end)) as Record<string, unknown>;
    } catch {
      return undefined;
    }
    const input = count(block.prompt_tokens) ?? count(block.input_tokens);
    const output = count(block.completion_tokens) ?? count(block.output_tokens);
    if (input === undefined && output === undefined) return undefined;
    const cached = cachedOf(block.prompt_tokens_details) ?? cachedOf(block.input_tokens_details);
    return {
      ...(input === undefined ? {} : { input }),
      ...(output === undefined ? {} : { output }),
      ...(cached === undefined ? {} : { cached }),
    };
  }
  return undefined;
}

/** The offset just past the object that opens at `start`, or -1 when it does not close within MAX_USAGE_BYTES. */
function objectEnd(buf: Buffer, start: number): number {
  let depth = 0;
  let inString = false;
  const stop = Math.min(buf.length, start + MAX_USAGE_BYTES);
  for (let i = start; i < stop; i++) {
    const c = buf[i];
    if (inString) {
      if (c === 0x5c) i++;
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x7b) depth++;
    else if (c === 0x7d && --depth === 0) return i + 1;
  }
  return -1;
}

/** How many of a stream's last events carry no token: `data: [DONE]`, and a usage-only chunk before it. */
function closingEvents(tail: Buffer, hasUsage: boolean): number {
  const events = tail
    .toString('latin1')
    .trimEnd()
    .split(/\r?\n\r?\n/);
  let closing = 0;
  let last = events.length - 1;
  if (events[last]?.trim() === 'data: [DONE]') {
    closing++;
    last--;
  }
  if (hasUsage && last >= 0 && /"choices"\s*:\s*\[\s*\]/.test(events[last]!) && /"usage"\s*:\s*\{/.test(events[last]!))
    closing++;
  return closing;
}

function isSpace(c: number): boolean {
  return c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;
}

/** The `cached_tokens` of a usage block's details, when it holds a count. */
function cachedOf(details: unknown): number | undefined {
  return details && typeof details === 'object'
    ? count((details as { cached_tokens?: unknown }).cached_tokens)
    : undefined;
}

function count(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0 ? value : undefined;
}

/** The last USAGE_TAIL_BYTES of two chunks, copying at most that many bytes. */
function joinTail(previous: Buffer | undefined, last: Buffer | undefined): Buffer | undefined {
  if (!last) return undefined;
  if (last.length >= USAGE_TAIL_BYTES) return last.subarray(last.length - USAGE_TAIL_BYTES);
  if (!previous) return last;
  return Buffer.concat([previous.subarray(Math.max(0, previous.length - (USAGE_TAIL_BYTES - last.length))), last]);
}

/** The attribute sets of one (model, runner), built once. */
export interface InferenceAttributes {
  readonly base: Attributes;
  readonly input: Attributes;
  readonly output: Attributes;
}

/** Attribute sets kept at most; past it they are built afresh (many runner ids over a long run). */
const MAX_ATTRIBUTE_SETS = 4096;

/** One call's end, as the agent hands it over. */
export interface InferenceEnd {
  model: string;
  runner: string;
  /** The call's `gen_ai.operation.name` (`chat`, `text_completion`, `embeddings`). */
  operation: string;
  /** Call start to the end of the answer, in ms. */
  durationMs: number;
  /** From the call's first wait in the wait queue to its placement, in ms; 0 when it never waited. */
  queueWaitMs: number;
  /** True when the answer was relayed in full with a 2xx status. */
  ok: boolean;
  reading: AnswerReading;
}

/** Records what {@link AnswerWatch} read into the histograms and the stats window; one per gateway. */
export class InferenceRecorder {
  readonly #instruments: InferenceInstruments;
  readonly #window: StatsWindow;
  readonly #attributes = new Map<string, InferenceAttributes>();

  constructor(instruments: InferenceInstruments, window: StatsWindow) {
    this.#instruments = instruments;
    this.#window = window;
  }

  /** Records one call's end. Histograms take only answers relayed in full with a 2xx status. */
  record(end: InferenceEnd): void {
    const { reading } = end;
    const m = this.#instruments;
    const attributes = this.attributes(end.model, end.runner, end.operation);
    m.queueWait.record(end.queueWaitMs / 1000, attributes.base);
    this.#window.record(end.model, end.ok ? reading.ttftMs : undefined);
    if (!end.ok) return;
    m.requestDuration.record(end.durationMs / 1000, attributes.base);
    if (reading.ttftMs !== undefined) m.timeToFirstToken.record(reading.ttftMs / 1000, attributes.base);
    if (reading.perEventMs !== undefined) m.timePerOutputToken.record(reading.perEventMs / 1000, attributes.base);
    if (reading.usage?.input !== undefined) m.tokenUsage.record(reading.usage.input, attributes.input);
    if (reading.usage?.output !== undefined) m.tokenUsage.record(reading.usage.output, attributes.output);
  }

  /**
   * The attribute sets of `model` on `runner` for `operation`, with the provider the GenAI
   * conventions require, built the first time they are asked for.
   */
  attributes(model: string, runner: string, operation: string): InferenceAttributes {
    const key = `${model}\u0000${runner}\u0000${operation}`;
    let sets = this.#attributes.get(key);
    if (sets === undefined) {
      if (this.#attributes.size >= MAX_ATTRIBUTE_SETS) this.#attributes.clear();
      const base = {
        'gen_ai.operation.name': operation,
        'gen_ai.provider.name': GATEWAY_PROVIDER,
        'gen_ai.request.model': model,
        'sluice.runner.id': runner,
      };
      sets = Object.freeze({
        base: Object.freeze(base),
        input: Object.freeze({ ...base, 'gen_ai.token.type': 'input' }),
        output: Object.freeze({ ...base, 'gen_ai.token.type': 'output' }),
      });
      this.#attributes.set(key, sets);
    }
    return sets;
  }
}
