/** placer/rotate.ts: every item once, from a start taken modulo the length, wrapping around. */
import { describe, expect, it } from 'vitest';
import { rotate } from '../../placer/rotate.ts';

describe('rotate', () => {
  it.each([
    [0, ['a', 'b', 'c']],
    [1, ['b', 'c', 'a']],
    [2, ['c', 'a', 'b']],
    [3, ['a', 'b', 'c']],
    [7, ['b', 'c', 'a']],
    [-1, ['c', 'a', 'b']],
    [-4, ['c', 'a', 'b']],
    [1.9, ['b', 'c', 'a']],
  ])('returns every item once from start %d', (start, order) => {
    expect([...rotate(['a', 'b', 'c'], start)]).toEqual(order);
  });

  it('returns nothing for no items', () => {
    expect([...rotate([], 5)]).toEqual([]);
  });

  it('returns items lazily, so a pass that stops early reads no more', () => {
    const walk = rotate(['a', 'b', 'c'], 1);
    expect(walk.next()).toEqual({ value: 'b', done: false });
  });
});
