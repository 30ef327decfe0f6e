/**
 * Options of the simulated engine: their defaults, their validation, and the frozen resolved form
 * the rest of the module reads. Every check runs once, up front, with a message naming the option
 * and the bad value, so a bad flag fails at start rather than on the first request.
 */
import { SimOptionError } from './errors.ts';

/** A source of wall-clock time in ms since the epoch; injectable so bodies' `created` is testable. */
export interface SimClock {
  now(): number;
}

/** What a simulated engine can be told. Every field is optional. */
export interface SimEngineOptions {
  /** Served model names; the first is used when a request names none, as vLLM does. @default ['sim-small'] */
  models?: string[];
  /** Named in the `sluice-engine-id` header of every response. @default `sim-<6 random hex digits>` */
  engineId?: string;
  /** Time from admission to the first token, ms. @default 20 */
  ttftMs?: number;
  /** Time between consecutive tokens, ms. @default 5 */
  itlMs?: number;
  /** Output length when a request sets no limit; a request's max_tokens caps it. @default 16 */
  outputTokens?: number;
  /** Requests running at once (vLLM's `--max-num-seqs`). @default 16 */
  maxNumSeqs?: number;
  /** Requests allowed to wait for a slot; one more is answered 429. @default 256 */
  maxQueue?: number;
  /** Largest request body accepted, bytes; a larger one is answered 413. @default 16777216 (16 MiB) */
  maxBodyBytes?: number;
  /** Wall clock for timestamps in response bodies. @default Date */
  clock?: SimClock;
  /** Uniform [0, 1) source for ids. @default Math.random */
  random?: () => number;
}

/** The validated, frozen form of {@link SimEngineOptions}. */
export interface ResolvedSimEngineOptions {
  readonly models: readonly string[];
  readonly engineId: string;
  readonly ttftMs: number;
  readonly itlMs: number;
  readonly outputTokens: number;
  readonly maxNumSeqs: number;
  readonly maxQueue: number;
  readonly maxBodyBytes: number;
  readonly clock: SimClock;
  readonly random: () => number;
}

function show(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map(show).join(', ')}]`;
  if (typeof value === 'function') return `function ${value.name || '(anonymous)'}`;
  return String(value);
}

function positiveInteger(name: string, value: unknown, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1) {
    throw new SimOptionError(name, `${name} must be a positive integer, got ${show(value)}`);
  }
  return value;
}

function nonNegativeInteger(name: string, value: unknown, fallback: number): number {
  if (value === undefined) return fallback;
  // Infinity is refused on purpose: an unbounded queue hides overload instead of reporting it.
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
    throw new SimOptionError(name, `${name} must be a non-negative integer, got ${show(value)}`);
  }
  return value;
}

function nonNegativeMs(name: string, value: unknown, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) {
    throw new SimOptionError(name, `${name} must be a non-negative finite number of ms, got ${show(value)}`);
  }
  return value;
}

function resolveModels(value: unknown): readonly string[] {
  if (value === undefined) return Object.freeze(['sim-small']);
  if (!Array.isArray(value) || value.length === 0) {
    throw new SimOptionError('models', `models must be a non-empty array of names, got ${show(value)}`);
  }
  for (const name of value) {
    if (typeof name !== 'string' || name.trim() === '' || name !== name.trim()) {
      throw new SimOptionError('models', `models must hold non-empty names without surrounding spaces, got ${show(name)}`);
    }
  }
  if (new Set(value).size !== value.length) {
    throw new SimOptionError('models', `models must not repeat a name, got ${show(value)}`);
  }
  return Object.freeze([...(value as string[])]);
}

function resolveEngineId(value: unknown, random: () => number): string {
  if (value === undefined) {
    return `sim-${Math.floor(random() * 0x1000000).toString(16).padStart(6, '0')}`;
  }
  // The id goes into a response header, so anything a header cannot carry is refused here.
  if (typeof value !== 'string' || !/^[\x21-\x7e]+$/.test(value)) {
    throw new SimOptionError('engineId', `engineId must be a non-empty string of visible ASCII, got ${show(value)}`);
  }
  return value;
}

/**
 * Applies defaults to `options` and validates every field.
 * @throws {SimOptionError} (code `SIM_INVALID_OPTION`) naming the first bad option and its value.
 */
export function resolveSimEngineOptions(options: SimEngineOptions = {}): ResolvedSimEngineOptions {
  const { clock = Date, random = Math.random } = options;
  // Date itself is the default clock, and it is a function with a static now().
  if ((typeof clock !== 'object' && typeof clock !== 'function') || clock === null || typeof clock.now !== 'function') {
    throw new SimOptionError('clock', `clock must be an object with a now() method, got ${show(clock)}`);
  }
  if (typeof random !== 'function') {
    throw new SimOptionError('random', `random must be a function returning [0, 1), got ${show(random)}`);
  }
  return Object.freeze({
    models: resolveModels(options.models),
    engineId: resolveEngineId(options.engineId, random),
    ttftMs: nonNegativeMs('ttftMs', options.ttftMs, 20),
    itlMs: nonNegativeMs('itlMs', options.itlMs, 5),
    outputTokens: positiveInteger('outputTokens', options.outputTokens, 16),
    maxNumSeqs: positiveInteger('maxNumSeqs', options.maxNumSeqs, 16),
    maxQueue: nonNegativeInteger('maxQueue', options.maxQueue, 256),
    maxBodyBytes: positiveInteger('maxBodyBytes', options.maxBodyBytes, 16 * 1024 * 1024),
    clock,
    random,
  });
}
