/** The two properties every key-to-position function of a consistent placer keeps. */
import { expect } from 'vitest';

/** Where `key` lives among `n` positions, 0 to n - 1. */
export type HomeOf<K> = (key: K, n: number) => number;

/** Expects `homeOf` to give each of `n` positions its share of `keys`, within 10%. */
export function expectEvenSpread<K>(keys: readonly K[], homeOf: HomeOf<K>, n: number): void {
  const counts = new Array<number>(n).fill(0);
  for (const key of keys) counts[homeOf(key, n)]!++;
  const share = keys.length / n;
  for (const count of counts) {
    expect(count).toBeGreaterThan(share * 0.9);
    expect(count).toBeLessThan(share * 1.1);
  }
}

/**
 * Expects growing from `n` positions to n + 1 to move about 1/(n + 1) of `keys` (within 20%),
 * every moved key to the new last position.
 */
export function expectMinimalMoves<K>(keys: readonly K[], homeOf: HomeOf<K>, n: number): void {
  let moved = 0;
  for (const key of keys) {
    const before = homeOf(key, n);
    const after = homeOf(key, n + 1);
    if (before !== after) {
      moved++;
      expect(after).toBe(n);
    }
  }
  const expected = keys.length / (n + 1);
  expect(moved).toBeGreaterThan(expected * 0.8);
  expect(moved).toBeLessThan(expected * 1.2);
}
