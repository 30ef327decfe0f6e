import { describe, expect, it } from 'vitest';
import { fullJitterBackoff, seededRandom } from '../../../placer/kernel/index.ts';

describe('fullJitterBackoff', () => {
  it('returns half the ceiling at random() = 0.5, the ceiling doubling from base and stopping at cap', () => {
    const ceilings = [500, 1000, 2000, 4000, 8000, 16_000, 30_000, 30_000, 30_000];
    const steps = { base: 500, cap: 30_000 };
    expect(ceilings.map((_, i) => fullJitterBackoff(i + 1, steps, () => 0.5))).toEqual(ceilings.map((c) => c / 2));
  });

  it('returns a ceiling grown by factor per failure when one is given', () => {
    const steps = { base: 100, cap: 10_000, factor: 3 };
    expect([1, 2, 3, 4, 5, 6].map((n) => fullJitterBackoff(n, steps, () => 0.5))).toEqual([
      50, 150, 450, 1350, 4050, 5000,
    ]);
  });

  it('returns whole ms: 0 at random() = 0 and just under the cap after many failures', () => {
    expect(fullJitterBackoff(1, { base: 500, cap: 30_000 }, () => 0)).toBe(0);
    expect(fullJitterBackoff(100, { base: 500, cap: 30_000 }, () => 0.999)).toBe(Math.floor(0.999 * 30_000));
    expect(fullJitterBackoff(Number.MAX_SAFE_INTEGER, { base: 500, cap: 30_000 }, () => 0.5)).toBe(15_000);
  });

  it('returns the first step for failures below 1', () => {
    expect(fullJitterBackoff(0, { base: 800, cap: 5000 }, () => 0.5)).toBe(400);
    expect(fullJitterBackoff(-3, { base: 800, cap: 5000 }, () => 0.5)).toBe(400);
  });

  it('returns 0, never NaN, when base is 0, however long the streak', () => {
    expect(fullJitterBackoff(5000, { base: 0, cap: 5000 }, () => 0.9)).toBe(0);
  });

  it.each([Number.NaN, -0.5, 1, 7, Number.POSITIVE_INFINITY])(
    'returns a wait in [0, ceiling) when random() returns %s',
    (r) => {
      const wait = fullJitterBackoff(3, { base: 1000, cap: 60_000 }, () => r);
      expect(wait >= 0 && wait < 4000).toBe(true);
    },
  );

  it('returns draws spread over the whole range below the ceiling under a seeded random', () => {
    const random = seededRandom(11);
    const waits = Array.from({ length: 4000 }, () => fullJitterBackoff(4, { base: 250, cap: 60_000 }, random));
    // Ceiling 2000 ms: every draw below it, and each quarter of the range holds about a quarter.
    expect(Math.max(...waits)).toBeLessThan(2000);
    expect(Math.min(...waits)).toBeGreaterThanOrEqual(0);
    const quarters = [0, 0, 0, 0];
    for (const w of waits) quarters[Math.floor(w / 500)]!++;
    for (const q of quarters) expect(q).toBeGreaterThan(850);
    for (const q of quarters) expect(q).toBeLessThan(1150);
    // Repeatable: the same seed gives the same waits.
    const again = seededRandom(11);
    expect(Array.from({ length: 4000 }, () => fullJitterBackoff(4, { base: 250, cap: 60_000 }, again))).toEqual(waits);
  });
});
