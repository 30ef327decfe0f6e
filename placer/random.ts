/**
 * Draws from an injected `random()`. Placers call these on every pass, where a throw would fail a
 * placeable call, so a `random()` that strays outside [0, 1) is clamped instead of refused.
 */

/** A uniform index in [0, n), for n >= 1. */
export function drawIndex(random: () => number, n: number): number {
  const i = Math.floor(unit(random) * n);
  return Math.min(i, n - 1);
}

/**
 * The index of one of `weights`, each chosen with probability weight / sum (LiveKit's dispatch).
 * Zero weights are never chosen; -1 when every weight is zero.
 */
export function drawWeighted(random: () => number, weights: readonly number[]): number {
  let total = 0;
  let last = -1;
  for (let i = 0; i < weights.length; i++) {
    if (weights[i]! > 0) {
      total += weights[i]!;
      last = i;
    }
  }
  if (last < 0) return -1;
  const target = unit(random) * total;
  let sum = 0;
  for (let i = 0; i < weights.length; i++) {
    if (!(weights[i]! > 0)) continue;
    sum += weights[i]!;
    if (target < sum) return i;
  }
  // Rounding can leave the running sum a hair under the total; the last weighted one takes it.
  return last;
}

/** `random()` forced into [0, 1): NaN and below 0 read as 0, 1 and above as just under 1. */
function unit(random: () => number): number {
  const r = random();
  if (!(r >= 0)) return 0;
  return r < 1 ? r : 1 - Number.EPSILON;
}
