/**
 * Options of the simulated engine: their defaults, their validation, and the frozen resolved form
 * the rest of the module reads. Defaults come from the named profile (see profiles.ts), then any
 * field given on its own wins. Every check runs once, up front, with a message naming the option
 * and the bad value, so a bad flag fails at start rather than on the first request.
 */
import {
  factorAtLeastOne,
  nonNegativeInteger,
  nonNegativeMs,
  positiveInteger,
  probability,
  show,
} from './checks.ts';
import { SimOptionError } from './errors.ts';
import { isSimProfileName, SIM_PROFILES, type SimProfileName } from './profiles.ts';

/** A source of wall-clock time in ms since the epoch; injectable so bodies' `created` and the startup delay are testable. */
export interface SimClock {
  now(): number;
}

/** Probability (0..1) that a call is refused with each status before it produces anything. Their sum must not exceed 1. */
export interface SimFailureRates {
  /** Answered 429 `rate_limit_exceeded` with `Retry-After`, as an engine with a full queue would. */
  readonly 429?: number;
  /** Answered 503 `service_unavailable` with `Retry-After`, as an overloaded engine would. */
  readonly 503?: number;
  /** Answered 500 `engine_error`, as an engine failing inside the model would. */
  readonly 500?: number;
}

/** What a simulated engine can be told. Every field is optional; timing and capacity fields default to the profile's. */
export interface SimEngineOptions {
  /** Named set of timing and capacity defaults (see profiles.ts). @default see simEngineDefaults */
  profile?: SimProfileName;
  /** Served model names; the first is used when a request names none, as vLLM does. @default see simEngineDefaults */
  models?: string[];
  /** Named in the `sluice-engine-id` header of every response. @default `sim-<6 random hex digits>` */
  engineId?: string;
  /** Fixed part of the time to first token, ms. @default profile (small 20, h100-8b 30) */
  prefillOverheadMs?: number;
  /**
   * The name {@link prefillOverheadMs} had when the model was fixed delays; kept for the
   * `--ttft-ms` flag. Giving both with different values is refused.
   * @deprecated use prefillOverheadMs.
   */
  ttftMs?: number;
  /** Prefill time per uncached prompt token, ms; fractions allowed. @default profile (small 0, h100-8b 0.25) */
  prefillPerTokenMs?: number;
  /** Standard deviation of the prefill time, ms; capped at 30% of the mean. @default profile (small 0, h100-8b 3) */
  prefillJitterStdMs?: number;
  /** Mean time between consecutive tokens, ms. @default profile (small 5, h100-8b 12) */
  itlMs?: number;
  /** Standard deviation of each inter-token gap, ms; capped at 30% of the mean. @default profile (small 0, h100-8b 2) */
  itlJitterStdMs?: number;
  /** Slow-down with every slot busy, at least 1; 1 means none. @default profile (small 1, h100-8b 2) */
  loadFactor?: number;
  /** Output length when a request sets no limit; a request's max_tokens caps it. @default see simEngineDefaults */
  outputTokens?: number;
  /** Requests running at once (vLLM's `--max-num-seqs`). @default profile (16) */
  maxNumSeqs?: number;
  /** Requests allowed to wait for a slot; one more is answered 429. @default profile (small 256, h100-8b 64) */
  maxQueue?: number;
  /** Blocks of 16 tokens the prefix cache remembers, least recently used evicted first. @default profile (small 4096, h100-8b 27000) */
  cacheBlocks?: number;
  /** KV-cache blocks of 16 tokens on the device, for `vllm:kv_cache_usage_perc`. @default profile (small 65536, h100-8b 27000) */
  kvBlocks?: number;
  /** Largest request body accepted, bytes; a larger one is answered 413. @default see simEngineDefaults */
  maxBodyBytes?: number;
  /** Fault injection: chance per call of each refusal, drawn from `random` before any output. @default see simEngineDefaults (none) */
  failureRate?: SimFailureRates;
  /** Time after creation during which /health, /v1/models and calls answer 503 `model_loading`, ms. @default see simEngineDefaults */
  startupDelayMs?: number;
  /** The Nth call (counted once loaded, from 1) crashes the engine: `onCrash` runs, once. @default undefined (never) */
  crashOnCall?: number;
  /**
   * What a crash does. Library code never exits the process; the CLI passes `() => process.exit(70)`.
   * @default drops every connection and closes the server abruptly
   */
  onCrash?: () => void;
  /** Wall clock for timestamps in response bodies and the startup delay. @default Date */
  clock?: SimClock;
  /** Uniform [0, 1) source for ids, jitter and injected failures. @default Math.random */
  random?: () => number;
}

/** The validated, frozen form of {@link SimEngineOptions}. */
export interface ResolvedSimEngineOptions {
  readonly profile: SimProfileName;
  readonly models: readonly string[];
  readonly engineId: string;
  readonly prefillOverheadMs: number;
  readonly prefillPerTokenMs: number;
  readonly prefillJitterStdMs: number;
  readonly itlMs: number;
  readonly itlJitterStdMs: number;
  readonly loadFactor: number;
  readonly outputTokens: number;
  readonly maxNumSeqs: number;
  readonly maxQueue: number;
  readonly cacheBlocks: number;
  readonly kvBlocks: number;
  readonly maxBodyBytes: number;
  readonly failureRate: Readonly<Record<'429' | '503' | '500', number>>;
  readonly startupDelayMs: number;
  readonly crashOnCall: number | undefined;
  readonly onCrash: (() => void) | undefined;
  readonly clock: SimClock;
  readonly random: () => number;
}

function resolveModels(value: unknown): readonly string[] {
  if (value === undefined) return simEngineDefaults.models;
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

const FAILURE_STATUSES = ['429', '503', '500'] as const;

function showJson(value: unknown): string {
  return typeof value === 'object' && value !== null ? JSON.stringify(value) : show(value);
}

function resolveFailureRate(value: unknown): ResolvedSimEngineOptions['failureRate'] {
  if (value === undefined) return simEngineDefaults.failureRate;
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new SimOptionError('failureRate', `failureRate must be an object like { 429: 0.1 }, got ${showJson(value)}`);
  }
  for (const key of Object.keys(value)) {
    if (!(FAILURE_STATUSES as readonly string[]).includes(key)) {
      throw new SimOptionError('failureRate', `failureRate keys must be 429, 503 or 500, got ${show(key)}`);
    }
  }
  const rates = value as Record<string, unknown>;
  const resolved = {
    429: probability('failureRate.429', rates['429']),
    503: probability('failureRate.503', rates['503']),
    500: probability('failureRate.500', rates['500']),
  };
  // One draw decides a call, so the rates partition [0, 1); a small epsilon forgives float sums.
  if (resolved[429] + resolved[503] + resolved[500] > 1 + 1e-9) {
    throw new SimOptionError('failureRate', `failureRate values must add up to at most 1, got ${showJson(value)}`);
  }
  return Object.freeze(resolved);
}

/** lru-cache allocates its index arrays for `max` entries up front, so the size is bounded. */
const MAX_CACHE_BLOCKS = 1_048_576;

function resolveCacheBlocks(value: unknown, fallback: number): number {
  const blocks = positiveInteger('cacheBlocks', value, fallback);
  if (blocks > MAX_CACHE_BLOCKS) {
    throw new SimOptionError('cacheBlocks', `cacheBlocks must be at most ${MAX_CACHE_BLOCKS} (16M tokens), got ${show(value)}`);
  }
  return blocks;
}

function resolveOverhead(options: SimEngineOptions, fallback: number): number {
  const overhead = nonNegativeMs('prefillOverheadMs', options.prefillOverheadMs, fallback);
  const ttft = nonNegativeMs('ttftMs', options.ttftMs, overhead);
  if (options.prefillOverheadMs !== undefined && options.ttftMs !== undefined && ttft !== overhead) {
    throw new SimOptionError(
      'ttftMs',
      `ttftMs is the old name of prefillOverheadMs; give one, got ttftMs ${show(ttft)} and prefillOverheadMs ${show(overhead)}`,
    );
  }
  return ttft;
}

/**
 * The defaults that do not come from the profile, in one place: resolveSimEngineOptions applies
 * them and `sluice sim-engine --help` prints them. Timings and capacities come from the profile.
 */
export const simEngineDefaults = Object.freeze({
  profile: 'small' as SimProfileName,
  models: Object.freeze(['sim-small']) as readonly string[],
  outputTokens: 16,
  maxBodyBytes: 16 * 1024 * 1024,
  startupDelayMs: 0,
  /** No injected failures. */
  failureRate: Object.freeze({ 429: 0, 503: 0, 500: 0 }) as Readonly<Record<'429' | '503' | '500', number>>,
});

/**
 * Applies the profile's defaults to `options`, then validates every field.
 * @throws {SimOptionError} (code `SIM_INVALID_OPTION`) naming the first bad option and its value.
 */
export function resolveSimEngineOptions(options: SimEngineOptions = {}): ResolvedSimEngineOptions {
  const { clock = Date, random = Math.random, profile = simEngineDefaults.profile } = options;
  // Date itself is the default clock, and it is a function with a static now().
  if ((typeof clock !== 'object' && typeof clock !== 'function') || clock === null || typeof clock.now !== 'function') {
    throw new SimOptionError('clock', `clock must be an object with a now() method, got ${show(clock)}`);
  }
  if (typeof random !== 'function') {
    throw new SimOptionError('random', `random must be a function returning [0, 1), got ${show(random)}`);
  }
  if (!isSimProfileName(profile)) {
    throw new SimOptionError('profile', `profile must be one of ${Object.keys(SIM_PROFILES).join(', ')}, got ${show(profile)}`);
  }
  if (options.onCrash !== undefined && typeof options.onCrash !== 'function') {
    throw new SimOptionError('onCrash', `onCrash must be a function, got ${show(options.onCrash)}`);
  }
  const base = SIM_PROFILES[profile];
  return Object.freeze({
    profile,
    models: resolveModels(options.models),
    engineId: resolveEngineId(options.engineId, random),
    prefillOverheadMs: resolveOverhead(options, base.prefillOverheadMs),
    prefillPerTokenMs: nonNegativeMs('prefillPerTokenMs', options.prefillPerTokenMs, base.prefillPerTokenMs),
    prefillJitterStdMs: nonNegativeMs('prefillJitterStdMs', options.prefillJitterStdMs, base.prefillJitterStdMs),
    itlMs: nonNegativeMs('itlMs', options.itlMs, base.itlMs),
    itlJitterStdMs: nonNegativeMs('itlJitterStdMs', options.itlJitterStdMs, base.itlJitterStdMs),
    loadFactor: factorAtLeastOne('loadFactor', options.loadFactor, base.loadFactor),
    outputTokens: positiveInteger('outputTokens', options.outputTokens, simEngineDefaults.outputTokens),
    maxNumSeqs: positiveInteger('maxNumSeqs', options.maxNumSeqs, base.maxNumSeqs),
    maxQueue: nonNegativeInteger('maxQueue', options.maxQueue, base.maxQueue),
    cacheBlocks: resolveCacheBlocks(options.cacheBlocks, base.cacheBlocks),
    kvBlocks: positiveInteger('kvBlocks', options.kvBlocks, base.kvBlocks),
    maxBodyBytes: positiveInteger('maxBodyBytes', options.maxBodyBytes, simEngineDefaults.maxBodyBytes),
    failureRate: resolveFailureRate(options.failureRate),
    startupDelayMs: nonNegativeMs('startupDelayMs', options.startupDelayMs, simEngineDefaults.startupDelayMs),
    crashOnCall: options.crashOnCall === undefined ? undefined : positiveInteger('crashOnCall', options.crashOnCall, 1),
    onCrash: options.onCrash,
    clock,
    random,
  });
}
