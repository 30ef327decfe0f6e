/**
 * The timing model: how long a request waits for its first token and between tokens, and the
 * player that emits tokens on that schedule. Modelled on llm-d-inference-sim (REFERENCE, "A
 * credible simulated engine"): prefill costs a fixed overhead plus a price per uncached prompt
 * token, decode a mean inter-token latency; both are jittered and both slow down as more
 * sequences share the GPU. Kept apart from HTTP so the model can be tested without a server.
 */
import type { SimProfile } from './profiles.ts';
import { setTimeout as delay } from 'node:timers/promises';

/** What the model may take into account when planning one request. */
export interface TimingInput {
  /** Prompt length in tokens, as counted by the simulator. */
  readonly promptTokens: number;
  /** Leading prompt tokens found in the prefix cache; their prefill is skipped. @default 0 */
  readonly cachedTokens?: number;
  /** Tokens the request will produce. */
  readonly outputTokens: number;
  /**
   * Requests holding a slot, this one included: a number for a fixed load, or a function read
   * before every token, so that a sequence slows down as others join and speeds up as they leave.
   */
  readonly running: number | (() => number);
}

/** A per-request schedule: the delay before each token, relative to the token before it. */
export interface TokenSchedule {
  /** Tokens to emit. */
  readonly tokens: number;
  /**
   * Delay before token `index`, ms: the prefill time for index 0, an inter-token gap after.
   * Jitter and load are drawn at the call, so call it once per token, in order, when the wait starts.
   */
  delayBefore(index: number): number;
}

/** Plans each request's schedule once it holds a slot. */
export interface SimTimingModel {
  plan(input: TimingInput): TokenSchedule;
}

/** Parameters of {@link createSimTiming}: a profile's timing fields (the engine passes its resolved options). */
export type SimTimingOptions = Pick<
  SimProfile,
  | 'prefillOverheadMs'
  | 'prefillPerTokenMs'
  | 'prefillJitterStdMs'
  | 'itlMs'
  | 'itlJitterStdMs'
  | 'loadFactor'
  | 'maxNumSeqs'
> & {
  /** Uniform [0, 1) source for the jitter. */
  readonly random: () => number;
};

/** The largest standard deviation jitter may have, as a fraction of the mean (llm-d-inference-sim's bound). */
export const MAX_JITTER_FRACTION = 0.3;

/**
 * How much slower each step is with `running` sequences sharing `maxNumSeqs` slots:
 * 1 + (loadFactor - 1) x (running - 1) / (maxNumSeqs - 1), so 1 alone and `loadFactor` when full.
 */
export function loadScale(loadFactor: number, running: number, maxNumSeqs: number): number {
  if (maxNumSeqs <= 1 || loadFactor === 1) return 1;
  const others = Math.min(Math.max(running - 1, 0), maxNumSeqs - 1);
  return 1 + ((loadFactor - 1) * others) / (maxNumSeqs - 1);
}

/**
 * A normal sample around `mean` with standard deviation `stdMs`, capped at 30% of the mean and
 * clamped to mean +/- 3 standard deviations, so a delay is never negative and never absurd
 * whatever `random` returns (even exactly 0). Box-Muller on two draws of `random`.
 */
export function jitter(mean: number, stdMs: number, random: () => number): number {
  if (mean <= 0 || stdMs <= 0) return Math.max(mean, 0);
  const std = Math.min(stdMs, MAX_JITTER_FRACTION * mean);
  const u1 = Math.max(random(), Number.MIN_VALUE);
  const u2 = random();
  const z = Math.sqrt(-2 * Math.log(u1)) * Math.cos(2 * Math.PI * u2);
  return Math.min(Math.max(mean + z * std, mean - 3 * std), mean + 3 * std);
}

/**
 * The realistic model. Time to first token = (prefillOverheadMs + (promptTokens - cachedTokens)
 * x prefillPerTokenMs), jittered, x the load scale when prefill starts; each later token waits
 * itlMs, jittered, x the load scale at that moment. Waiting in the queue is not part of the
 * plan: the plan starts when the request holds a slot, and the queue adds its wait before that.
 */
export function createSimTiming(options: SimTimingOptions): SimTimingModel {
  const {
    prefillOverheadMs,
    prefillPerTokenMs,
    prefillJitterStdMs,
    itlMs,
    itlJitterStdMs,
    loadFactor,
    maxNumSeqs,
    random,
  } = options;
  return {
    plan: ({ promptTokens, cachedTokens = 0, outputTokens, running }) => {
      const runningNow = typeof running === 'function' ? running : () => running;
      const prefillMs = prefillOverheadMs + Math.max(0, promptTokens - cachedTokens) * prefillPerTokenMs;
      return {
        tokens: outputTokens,
        delayBefore: (index) => {
          const scale = loadScale(loadFactor, runningNow(), maxNumSeqs);
          const base =
            index === 0 ? jitter(prefillMs, prefillJitterStdMs, random) : jitter(itlMs, itlJitterStdMs, random);
          return base * scale;
        },
      };
    },
  };
}

/** Fixed delays of {@link createFixedTiming}. */
export interface FixedTimingOptions {
  readonly ttftMs: number;
  readonly itlMs: number;
}

/** A model with constant time to first token and inter-token latency, blind to load and prompt. */
export function createFixedTiming({ ttftMs, itlMs }: FixedTimingOptions): SimTimingModel {
  return createSimTiming({
    prefillOverheadMs: ttftMs,
    prefillPerTokenMs: 0,
    prefillJitterStdMs: 0,
    itlMs,
    itlJitterStdMs: 0,
    loadFactor: 1,
    maxNumSeqs: 1,
    // Never called: with no jitter there is nothing to draw.
    random: () => 0.5,
  });
}

/** How {@link playTokens} ended. */
export type PlayOutcome = 'done' | 'aborted';

/**
 * Calls `onToken(index)` for each token at its scheduled time; stops at once, leaving no timer
 * behind, when `signal` fires. Each gap is measured from the previous token, not from the start:
 * an engine step that runs late delays the steps after it rather than producing two tokens at
 * once, so a stalled event loop slows the stream down instead of bursting it.
 */
export async function playTokens(
  schedule: TokenSchedule,
  onToken: (index: number) => void,
  signal: AbortSignal,
): Promise<PlayOutcome> {
  for (let index = 0; index < schedule.tokens; index += 1) {
    if (!(await sleep(schedule.delayBefore(index), signal))) return 'aborted';
    onToken(index);
  }
  return 'done';
}

/** Waits `ms` (no wait when not positive); resolves false when `signal` fired first. */
export async function sleep(ms: number, signal: AbortSignal): Promise<boolean> {
  if (signal.aborted) return false;
  if (ms <= 0) return true;
  try {
    // The signal clears the timer on abort, so a gone client leaves nothing scheduled.
    await delay(ms, undefined, { signal });
    return true;
  } catch {
    return false;
  }
}
