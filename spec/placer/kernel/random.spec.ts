import { describe, expect, it } from 'vitest';
import { drawIndex, drawWeighted } from '../../../placer/kernel/index.ts';
import { seeded, sequence } from '../fake-load.ts';

describe('drawIndex', () => {
  it.each([
    [0, 0],
    [0.33, 0],
    [0.34, 1],
    [0.999, 2],
  ])('returns the index for random() = %s among 3', (r, expected) => {
    expect(drawIndex(() => r, 3)).toBe(expected);
  });

  const strays = [Number.NaN, -0.5, 1, 7, Number.POSITIVE_INFINITY];
  it.each(strays)('returns an index in range when random() returns %s', (r) => {
    const i = drawIndex(() => r, 3);
    expect(i >= 0 && i < 3).toBe(true);
  });
});

describe('drawWeighted', () => {
  it('returns -1 when every weight is zero', () => {
    expect(drawWeighted(() => 0.5, [0, 0, 0])).toBe(-1);
    expect(drawWeighted(() => 0.5, [])).toBe(-1);
  });

  it('returns the index whose share of the total covers random()', () => {
    // Weights 1, 0, 3: [0, 0.25) picks 0, [0.25, 1) picks 2, never the zero weight.
    expect([0, 0.2, 0.25, 0.9].map((r) => drawWeighted(() => r, [1, 0, 3]))).toEqual([0, 0, 2, 2]);
  });

  it('returns the last weighted index when random() reaches 1', () => {
    expect(drawWeighted(sequence([1]), [0.5, 0.5, 0])).toBe(1);
  });

  it('returns indices in proportion to their weights over many draws', () => {
    const random = seeded(7);
    const counts = [0, 0, 0];
    for (let i = 0; i < 30_000; i++) counts[drawWeighted(random, [0.6, 0.3, 0.1])]!++;
    expect(counts.map((c) => c / 30_000)).toEqual([
      expect.closeTo(0.6, 1),
      expect.closeTo(0.3, 1),
      expect.closeTo(0.1, 1),
    ]);
  });
});
