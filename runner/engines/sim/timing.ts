/**
 * The timing model: how long a request waits for its first token and between tokens, and the
 * player that emits tokens on that schedule. Kept apart from HTTP so that a richer model
 * (prefix cache, load factor, jitter, profiles) replaces {@link createFixedTiming} alone.
 */
import { setTimeout as delay } from 'node:timers/promises';

/** What the model may take into account when planning one request. */
export interface TimingInput {
  /** Prompt length in tokens, as counted by the simulator. */
  readonly promptTokens: number;
  /** Tokens the request will produce. */
  readonly outputTokens: number;
  /** Requests holding a slot, this one included. */
  readonly running: number;
}

/** A per-request schedule: the delay before each token, relative to the token before it. */
export interface TokenSchedule {
  /** Tokens to emit. */
  readonly tokens: number;
  /** Delay before token `index`, ms: the prefill time for index 0, an inter-token gap after. */
  delayBefore(index: number): number;
}

/** Plans each request's schedule once it holds a slot. */
export interface SimTimingModel {
  plan(input: TimingInput): TokenSchedule;
}

/** Fixed delays of {@link createFixedTiming}. */
export interface FixedTimingOptions {
  readonly ttftMs: number;
  readonly itlMs: number;
}

/** A model with constant time to first token and inter-token latency, blind to load and prompt. */
export function createFixedTiming({ ttftMs, itlMs }: FixedTimingOptions): SimTimingModel {
  return {
    plan: ({ outputTokens }) => ({
      tokens: outputTokens,
      delayBefore: (index) => (index === 0 ? ttftMs : itlMs),
    }),
  };
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
