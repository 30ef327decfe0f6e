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
export function unit(random: () => number): number {
  const r = random();
  if (!(r >= 0)) return 0;
  return r < 1 ? r : 1 - Number.EPSILON;
}

/**
 * A seeded uniform [0, 1) source (mulberry32: small, fast and well spread), for anything that
 * must be random-looking yet repeatable: tests, benchmarks, the simulator's fake text.
 */
export function seededRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}
