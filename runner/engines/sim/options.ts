/**
 * Options of the simulated engine: their defaults, their validation, and the frozen resolved form
 * the rest of the module reads. Defaults come from simEngineDefaults and the named profile (see
 * profiles.ts), then any field given on its own wins. Every check runs once, up front, through the
 * kernel's resolveOptions, with a message naming the option and the bad value, so a bad flag fails
 * at start rather than on the first request.
 */
import { randomBytes } from 'node:crypto';
import { checksWith, rule, show } from '../../../placer/kernel/index.ts';
import type { Rule } from '../../../placer/kernel/index.ts';
import { SimOptionError } from './errors.ts';
import { parseKvEventsConfig, VLLM_STYLE } from './kv-events-config.ts';
import type { SimKvEventsConfig, SimKvEventsStyle } from './kv-events-config.ts';
import { isSimProfileName, SIM_PROFILES, type SimProfile, type SimProfileName } from './profiles.ts';
import type { SimTimingModel } from './timing.ts';

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
  /** Blocks the prefix cache remembers, least recently used evicted first. @default profile (small 4096, h100-8b 27000) */
  cacheBlocks?: number;
  /** KV-cache blocks on the device, for `vllm:kv_cache_usage_perc`. @default profile (small 65536, h100-8b 27000) */
  kvBlocks?: number;
  /** Tokens per KV-cache block (vLLM's `--block-size`). @default 16 */
  blockSize?: number;
  /**
   * The seed of the block hashes, as vLLM takes PYTHONHASHSEED (the entry point reads the
   * variable). Unset, a random seed: no router can then match the engine's blocks, as with vLLM.
   * @default 32 random hex digits
   */
  hashSeed?: string;
  /** Answers carry `usage.prompt_tokens_details.cached_tokens` (vLLM's `--enable-prompt-tokens-details`). @default false */
  enablePromptTokensDetails?: boolean;
  /**
   * KV-cache events, as vLLM's `--kv-events-config` takes them: its JSON text or the parsed
   * object (kv-events-config.ts). @default none: no events
   */
  kvEventsConfig?: string | Record<string, unknown>;
  /**
   * Whose KV events the engine publishes: `vllm` (its blocks by the wire's scheme) or `sglang`
   * (one per page of {@link pageSize} tokens, by SGLang's own hashes: kv-events-sglang.ts).
   * @default 'vllm'
   */
  kvEventsStyle?: 'vllm' | 'sglang';
  /** Tokens per page in the `sglang` style (SGLang's `--page-size`); it must divide {@link blockSize}. @default 1 */
  pageSize?: number;
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
  /**
   * The timing model that plans each call's delays; a spec wraps the real one to see every
   * planned delay instead of timing the stream on a busy machine.
   * @default createSimTiming over the resolved profile
   */
  timing?: SimTimingModel;
}

/** The validated, frozen form of {@link SimEngineOptions}: the profile's fields, then the rest. */
export interface ResolvedSimEngineOptions extends SimProfile {
  readonly profile: SimProfileName;
  readonly models: readonly string[];
  readonly engineId: string;
  readonly outputTokens: number;
  readonly maxBodyBytes: number;
  readonly failureRate: Readonly<Record<'429' | '503' | '500', number>>;
  readonly startupDelayMs: number;
  readonly crashOnCall: number | undefined;
  readonly onCrash: (() => void) | undefined;
  readonly clock: SimClock;
  readonly random: () => number;
  readonly timing: SimTimingModel | undefined;
  readonly blockSize: number;
  readonly hashSeed: string;
  readonly enablePromptTokensDetails: boolean;
  /** The events publisher's settings; undefined when the engine publishes none. */
  readonly kvEvents: SimKvEventsConfig | undefined;
}

/** SimOptionError carries the option's name, which every check passes along with its message. */
const check = checksWith((message, option) => new SimOptionError(option ?? '', message));

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
  blockSize: 16,
  enablePromptTokensDetails: false,
  /** No injected failures. */
  failureRate: Object.freeze({ 429: 0, 503: 0, 500: 0 }) as Readonly<Record<'429' | '503' | '500', number>>,
  /** Date itself: a function with a static now(). */
  clock: Date as SimClock,
  random: Math.random as () => number,
});

const models: Rule = (option, value, fail) => {
  if (!Array.isArray(value) || value.length === 0)
    throw fail(`${option} must be a non-empty array of names, got ${show(value)}`, option);
  for (const name of value) {
    if (typeof name !== 'string' || name.trim() === '' || name !== name.trim()) {
      throw fail(`${option} must hold non-empty names without surrounding spaces, got ${show(name)}`, option);
    }
  }
  if (new Set(value).size !== value.length) throw fail(`${option} must not repeat a name, got ${show(value)}`, option);
  return Object.freeze([...(value as string[])]);
};

const clock: Rule = (option, value, fail) => {
  // Date, the default, is a function with a static now(); an object with now() does as well.
  if (
    (typeof value !== 'object' && typeof value !== 'function') ||
    value === null ||
    typeof (value as SimClock).now !== 'function'
  ) {
    throw fail(`${option} must be an object with a now() method, got ${show(value)}`, option);
  }
  return value;
};

const FAILURE_STATUSES = ['429', '503', '500'] as const;

const failureRate: Rule = (option, value, fail) => {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw fail(`${option} must be an object like { 429: 0.1 }, got ${show(value)}`, option);
  }
  for (const key of Object.keys(value)) {
    if (!(FAILURE_STATUSES as readonly string[]).includes(key))
      throw fail(`${option} keys must be 429, 503 or 500, got ${show(key)}`, option);
  }
  const rates = value as Record<string, unknown>;
  const probability = rule.number({ min: 0, max: 1 });
  const resolved = Object.fromEntries(
    FAILURE_STATUSES.map((status) => [status, probability(`${option}.${status}`, rates[status] ?? 0, fail)]),
  ) as Record<'429' | '503' | '500', number>;
  // One draw decides a call, so the rates partition [0, 1); a small epsilon forgives float sums.
  if (resolved[429] + resolved[503] + resolved[500] > 1 + 1e-9)
    throw fail(`${option} values must add up to at most 1, got ${show(value)}`, option);
  return Object.freeze(resolved);
};

const boolean: Rule = (option, value, fail) => {
  if (typeof value !== 'boolean') throw fail(`${option} must be true or false, got ${show(value)}`, option);
  return value;
};

/** lru-cache allocates its index arrays for `max` entries up front, so the size is bounded. */
const MAX_CACHE_BLOCKS = 1_048_576;

/** How each defaulted option is checked, in the order the first bad one is reported. */
const simRules = {
  clock,
  random: rule.fn(),
  models,
  // Durations here are fractional ms: prefill costs a fraction of a ms per token.
  prefillOverheadMs: rule.number({ min: 0 }),
  prefillPerTokenMs: rule.number({ min: 0 }),
  prefillJitterStdMs: rule.number({ min: 0 }),
  itlMs: rule.number({ min: 0 }),
  itlJitterStdMs: rule.number({ min: 0 }),
  // Below 1, a busy engine would be faster than an idle one.
  loadFactor: rule.number({ min: 1 }),
  outputTokens: rule.integer({ min: 1 }),
  maxNumSeqs: rule.integer({ min: 1 }),
  // An unbounded queue hides overload, so Infinity is refused as any non-integer is.
  maxQueue: rule.integer({ min: 0 }),
  cacheBlocks: rule.integer({ min: 1, max: MAX_CACHE_BLOCKS, unit: 'blocks (16M tokens)' }),
  kvBlocks: rule.integer({ min: 1 }),
  maxBodyBytes: rule.integer({ min: 1 }),
  failureRate,
  startupDelayMs: rule.number({ min: 0 }),
  // vLLM's CUDA kernels take 1 to 256 tokens a block.
  blockSize: rule.integer({ min: 1, max: 256 }),
  enablePromptTokensDetails: boolean,
};

/** `ttftMs` is the old name of prefillOverheadMs: either may be given, both only when they agree. */
function resolveOverhead(options: SimEngineOptions): number | undefined {
  const { ttftMs, prefillOverheadMs } = options;
  if (ttftMs === undefined) return prefillOverheadMs;
  check.number('ttftMs', ttftMs, { min: 0 });
  if (prefillOverheadMs !== undefined) {
    check.number('prefillOverheadMs', prefillOverheadMs, { min: 0 });
    if (ttftMs !== prefillOverheadMs) {
      throw check.fail(
        `ttftMs is the old name of prefillOverheadMs; give one, got ttftMs ${show(ttftMs)} and prefillOverheadMs ${show(prefillOverheadMs)}`,
        'ttftMs',
      );
    }
  }
  return ttftMs;
}

/**
 * The given seed, or 32 random hex digits, as vLLM seeds from os.urandom without PYTHONHASHSEED.
 * Drawn from node:crypto rather than the injected `random`, so a spec's seeded draws stay the calls'.
 */
function resolveHashSeed(value: unknown): string {
  if (value === undefined) return randomBytes(16).toString('hex');
  if (typeof value !== 'string') throw check.fail(`hashSeed must be a string, got ${show(value)}`, 'hashSeed');
  return value;
}

/** The events' style: vLLM's, or SGLang's with a page size that divides the block size. */
function resolveStyle(options: SimEngineOptions, blockSize: number): SimKvEventsStyle {
  const { kvEventsStyle = 'vllm', pageSize } = options;
  if (kvEventsStyle !== 'vllm' && kvEventsStyle !== 'sglang')
    throw check.fail(`kvEventsStyle must be "vllm" or "sglang", got ${show(kvEventsStyle)}`, 'kvEventsStyle');
  if (kvEventsStyle === 'vllm') {
    if (pageSize !== undefined) throw check.fail('pageSize is for kvEventsStyle "sglang"', 'pageSize');
    return VLLM_STYLE;
  }
  const size = check.integer('pageSize', pageSize ?? 1, { min: 1, max: 256 });
  if (blockSize % size !== 0)
    throw check.fail(`pageSize must divide blockSize (${blockSize}), got ${show(size)}`, 'pageSize');
  return Object.freeze({ kind: 'sglang', pageSize: size });
}

/** A random `sim-` and 6 hex digits, or the given id when a header can carry it. */
function resolveEngineId(value: unknown, random: () => number): string {
  if (value === undefined)
    return `sim-${Math.floor(random() * 0x1000000)
      .toString(16)
      .padStart(6, '0')}`;
  // The id goes into a response header, so anything a header cannot carry is refused here.
  if (typeof value !== 'string' || !/^[\x21-\x7e]+$/.test(value)) {
    throw check.fail(`engineId must be a non-empty string of visible ASCII, got ${show(value)}`, 'engineId');
  }
  return value;
}

/**
 * Applies simEngineDefaults and the profile's defaults to `options`, then validates every field.
 * @throws {SimOptionError} (code `SIM_INVALID_OPTION`) naming the first bad option and its value.
 */
export function resolveSimEngineOptions(options: SimEngineOptions = {}): ResolvedSimEngineOptions {
  const profile = options.profile ?? simEngineDefaults.profile;
  if (!isSimProfileName(profile)) {
    throw check.fail(`profile must be one of ${Object.keys(SIM_PROFILES).join(', ')}, got ${show(profile)}`, 'profile');
  }
  const defaults = { ...simEngineDefaults, ...SIM_PROFILES[profile], profile };
  const checked = check.resolve(defaults, simRules, { ...options, prefillOverheadMs: resolveOverhead(options) });
  if (options.onCrash !== undefined) check.fn('onCrash', options.onCrash);
  if (options.timing !== undefined && typeof (options.timing as Partial<SimTimingModel> | null)?.plan !== 'function') {
    throw check.fail(`timing must be an object with a plan() method, got ${show(options.timing)}`, 'timing');
  }
  return Object.freeze({
    ...checked,
    profile,
    engineId: resolveEngineId(options.engineId, checked.random),
    crashOnCall:
      options.crashOnCall === undefined ? undefined : check.integer('crashOnCall', options.crashOnCall, { min: 1 }),
    onCrash: options.onCrash,
    timing: options.timing,
    hashSeed: resolveHashSeed(options.hashSeed),
    kvEvents:
      options.kvEventsConfig === undefined
        ? undefined
        : parseKvEventsConfig(
            options.kvEventsConfig,
            (message) => check.fail(message, 'kvEventsConfig'),
            resolveStyle(options, checked.blockSize),
          ),
  });
}
