import { describe, expect, it } from 'vitest';
import {
  createMemoryLimiter,
  decideWindow,
  estimateTokens,
  formatReset,
  rateLimitHeaders,
  retryAfterSeconds,
} from '../../../gateway/access/limits.ts';
import type { WindowTally } from '../../../gateway/access/limits.ts';
import { T0, WINDOW, describeLimiter, fakeClock } from './limits-contract.ts';

describeLimiter('memory limiter', async (options) => {
  const { clock, elapse } = fakeClock();
  return { limiter: createMemoryLimiter({ ...options, clock }), elapse };
});

/**
 * Counts at `elapsed` ms into the window starting at T0, their last hits where they would be for
 * traffic spread over the windows: the current one's now, the previous one's at its end.
 */
const tally = (elapsed: number, current: number, previous: number, lasts: Partial<WindowTally> = {}): WindowTally => ({
  current,
  previous,
  currentLast: T0 + elapsed,
  previousLast: T0 - 1,
  ...lasts,
});

/** The tally at `at` of counts taken at T0 + `elapsed`, rolled forward a window when `at` is past its end. */
const rolledTo = (at: number, taken: WindowTally): WindowTally =>
  at >= T0 + WINDOW ? { current: 0, previous: taken.current, currentLast: 0, previousLast: taken.currentLast } : taken;

describe('decideWindow', () => {
  // limit 10, cost 1; elapsed is ms into the current fixed window.
  // name, elapsed, current, previous → admitted, remaining, resetMs, retryAfterMs
  it.each([
    ['an empty window', 0, 0, 0, true, 9, 60_000, 0],
    ['half the previous window still inside', 30_000, 0, 10, true, 4, 60_000, 0],
    ['a full current window: wait for the next and 1/10 of it to slide out', 30_000, 10, 0, false, 0, 60_000, 36_000],
    ['a full previous window: wait for its weight to fall', 0, 5, 10, false, 0, 60_000, 36_000],
    ['an over-full previous window and nothing now', 0, 0, 20, false, 0, 59_999, 33_000],
    ['exactly the limit once this call is in', 0, 9, 0, true, 0, 60_000, 0],
  ] as const)('decides %s', (_name, elapsed, current, previous, admitted, remaining, resetMs, retryAfterMs) => {
    const decision = decideWindow(T0 + elapsed, WINDOW, 10, 1, tally(elapsed, current, previous));
    expect({ admitted: decision.admitted, ...decision.state, retryAfterMs: decision.retryAfterMs }).toEqual({
      admitted,
      remaining,
      resetMs,
      retryAfterMs,
      limit: 10,
    });
  });

  it('admits the call its retryAfterMs names, and not one ms before', () => {
    for (const [current, previous, elapsed] of [
      [10, 0, 30_000],
      [5, 10, 0],
      [0, 20, 0],
      [7, 9, 12_345],
    ] as const) {
      const taken = tally(elapsed, current, previous);
      const refused = decideWindow(T0 + elapsed, WINDOW, 10, 1, taken);
      expect(refused.admitted).toBe(false);
      const at = T0 + elapsed + refused.retryAfterMs;
      // Past the window edge the current count becomes the previous one.
      expect(decideWindow(at, WINDOW, 10, 1, rolledTo(at, taken)).admitted).toBe(true);
      expect(decideWindow(at - 1, WINDOW, 10, 1, rolledTo(at - 1, taken)).admitted).toBe(false);
    }
  });

  it('tells a 3-a-minute key whose calls came together to retry in the window, not 67 s, and admits it then', () => {
    // Three calls 13 s into the window, a fourth at once: the first leaves the sliding minute at 73 s.
    const taken = tally(13_000, 3, 0, { currentLast: T0 + 13_000 });
    const refused = decideWindow(T0 + 13_000, WINDOW, 3, 1, taken);
    expect(refused).toMatchObject({ admitted: false, retryAfterMs: 60_000 });
    expect(retryAfterSeconds(refused.retryAfterMs)).toBe(60);
    const at = T0 + 73_000;
    expect(decideWindow(at, WINDOW, 3, 1, rolledTo(at, taken)).admitted).toBe(true);
    expect(decideWindow(at - 1, WINDOW, 3, 1, rolledTo(at - 1, taken)).admitted).toBe(false);
  });

  it('counts nothing of a previous window whose last hit is a whole window old', () => {
    // Ten hits in the first second of the previous window: none is inside the sliding minute at 5 s.
    const early = tally(5_000, 0, 10, { previousLast: T0 - WINDOW + 1_000 });
    expect(decideWindow(T0 + 5_000, WINDOW, 10, 1, early)).toMatchObject({ admitted: true, state: { remaining: 9 } });
    // Spread to its end, most of them still are.
    expect(decideWindow(T0 + 5_000, WINDOW, 10, 1, tally(5_000, 0, 10)).admitted).toBe(false);
  });
});

describe('rate limit headers', () => {
  it('writes resets as OpenAI does', () => {
    expect([0, 20, 999.2, 1500, 60_000, 90_500, 360_000].map(formatReset)).toEqual([
      '0ms',
      '20ms',
      '1s',
      '1.5s',
      '1m0s',
      '1m30.5s',
      '6m0s',
    ]);
  });

  it('names the limit, what remains and the reset of each window checked', () => {
    expect(
      rateLimitHeaders({
        requests: { limit: 60, remaining: 59, resetMs: 1000 },
        tokens: { limit: 1000, remaining: 10, resetMs: 61_000 },
      }),
    ).toEqual({
      'x-ratelimit-limit-requests': '60',
      'x-ratelimit-remaining-requests': '59',
      'x-ratelimit-reset-requests': '1s',
      'x-ratelimit-limit-tokens': '1000',
      'x-ratelimit-remaining-tokens': '10',
      'x-ratelimit-reset-tokens': '1m1s',
    });
    expect(rateLimitHeaders({})).toEqual({});
  });

  it('rounds Retry-After up to whole seconds, at least 1', () => {
    expect([0, 1, 1000, 1001, 36_000].map(retryAfterSeconds)).toEqual([1, 1, 1, 2, 36]);
  });

  it('estimates a quarter of the prompt bytes, at least 1 token', () => {
    expect([0, 1, 4, 5, 4000].map(estimateTokens)).toEqual([1, 1, 1, 2, 1000]);
  });
});

describe('limiter options', () => {
  it('refuses a window, a Retry-After or a clock that cannot work, naming it', () => {
    expect(() => createMemoryLimiter({ windowMs: 0 })).toThrow('windowMs must be a positive integer, got 0');
    expect(() => createMemoryLimiter({ retryAfterMs: -1 })).toThrow(
      'retryAfterMs must be a non-negative integer, got -1',
    );
    expect(() => createMemoryLimiter({ clock: {} as never })).toThrow('clock must have a now() method, got {}');
  });
});
