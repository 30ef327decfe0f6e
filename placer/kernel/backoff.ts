/**
 * Full-jitter exponential backoff: the wait before a retry is a uniform draw below a ceiling
 * that grows with each failure in a row, up to a cap. Drawing the whole wait (not a jitter
 * around a fixed step) is what spreads out clients that failed together: a fleet of runners
 * whose gateway came back, engines on one node that died at once, callbacks to one receiver.
 */
import { unit } from './random.ts';

/** The growth of a backoff: where it starts, how fast it grows, where it stops. */
export interface BackoffSteps {
  /** The ceiling after the first failure, ms. */
  readonly base: number;
  /** The largest ceiling, ms. */
  readonly cap: number;
  /** The ceiling's growth per failure in a row. @default 2 */
  readonly factor?: number;
}

/**
 * The wait before retry number `failures` (1 for the first; below 1 reads as 1): a uniform
 * draw in [0, min(cap, base * factor^(failures - 1))), whole ms. A `random()` outside [0, 1)
 * is clamped into it, as the kernel's other draws do, so a broken source never yields a
 * negative wait or one above the cap.
 */
export function fullJitterBackoff(failures: number, steps: BackoffSteps, random: () => number): number {
  const { base, cap, factor = 2 } = steps;
  // base * Infinity is NaN when base is 0: a long streak must not turn the wait into NaN.
  const grown = base === 0 ? 0 : base * factor ** (Math.max(failures, 1) - 1);
  return Math.floor(unit(random) * Math.min(cap, grown));
}
