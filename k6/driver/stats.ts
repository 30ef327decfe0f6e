/**
 * The statistics the bench reports: nearest-rank percentiles over raw samples, and the summary
 * of one run. Raw samples are kept (not a histogram) because runs are bounded in length and
 * exact percentiles make two runs comparable without bucket error.
 */

/** Percentiles and extremes of a set of samples, in the samples' unit (ms for latencies). */
export interface Distribution {
  count: number;
  min: number;
  mean: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
}

/**
 * The nearest-rank percentile of ascending `sorted`: the smallest sample such that at least
 * `p` percent of the samples are at or below it. Nearest rank never invents a value between two
 * samples, so a p99 printed is a latency some request really had.
 * @returns NaN when there are no samples.
 * @throws {RangeError} when `p` is not in [0, 100].
 */
export function percentile(sorted: ArrayLike<number>, p: number): number {
  if (!(p >= 0 && p <= 100)) throw new RangeError(`p must be between 0 and 100, got ${p}`);
  const n = sorted.length;
  if (n === 0) return Number.NaN;
  // The epsilon keeps float error (0.99 * 100 = 98.99999…) from moving the rank.
  const rank = Math.ceil((p / 100) * n - 1e-9);
  return sorted[Math.min(n, Math.max(1, rank)) - 1]!;
}

/** Sorts a copy of `samples` numerically and summarises it. Every field is NaN when it is empty. */
export function distribution(samples: ArrayLike<number>): Distribution {
  // A typed array sorts numerically and several times faster than number[] with a comparator.
  const sorted = Float64Array.from(samples).sort();
  const n = sorted.length;
  let sum = 0;
  for (let i = 0; i < n; i++) sum += sorted[i]!;
  return {
    count: n,
    min: n === 0 ? Number.NaN : sorted[0]!,
    mean: n === 0 ? Number.NaN : sum / n,
    p50: percentile(sorted, 50),
    p90: percentile(sorted, 90),
    p99: percentile(sorted, 99),
    max: n === 0 ? Number.NaN : sorted[n - 1]!,
  };
}

/** Events per second; NaN when no time passed (a throughput from nothing is not zero, it is unknown). */
export function perSecond(count: number, elapsedMs: number): number {
  return elapsedMs > 0 ? (count * 1000) / elapsedMs : Number.NaN;
}

/** `a / b`, NaN when either is not a positive finite number (so a table prints "-", not Infinity). */
export function ratio(a: number, b: number): number {
  return Number.isFinite(a) && Number.isFinite(b) && b > 0 && a >= 0 ? a / b : Number.NaN;
}
