import { describe, expect, it } from 'vitest';
import { homeOf, keyHomeOf, sample } from '../../placer/least-loaded/choose.ts';
import { hash32 } from '../../placer/pool-view.ts';
import { Fleet, fakeCall } from './fake.ts';
import { seeded } from './fake-load.ts';
import { expectEvenSpread, expectMinimalMoves } from '../support/home-spread.ts';

const keys = Array.from({ length: 10_000 }, (_, i) => hash32(`session-${i}`));

describe('homeOf', () => {
  it('returns a position in range, each of 10 for about a tenth of 10,000 keys', () => {
    expectEvenSpread(keys, homeOf, 10);
  });

  it.each([1, 4, 15, 99])('moves about 1/(n+1) of keys, all to the new last runner, when runners grow from %i', (n) => {
    expectMinimalMoves(keys, homeOf, n);
  });
});

describe('keyHomeOf', () => {
  it("returns the id at the key's home in id order, whatever order the runners are listed in, and undefined for none", () => {
    const fleet = new Fleet();
    const runners = ['c', 'a', 'b'].map((id) => fleet.runner(id));
    const call = fakeCall({ key: 'session-3' });
    const expected = ['a', 'b', 'c'][homeOf(hash32('session-3'), 3)];
    expect(keyHomeOf(call, runners)).toBe(expected);
    expect(keyHomeOf(call, [...runners].reverse())).toBe(expected);
    expect(keyHomeOf(call, [])).toBeUndefined();
  });
});

describe('sample', () => {
  it('returns k distinct positions, every position about equally often over 20,000 samples', () => {
    const random = seeded(51);
    const counts = new Array<number>(100).fill(0);
    for (let s = 0; s < 20_000; s++) {
      const chosen = sample(100, 7, random);
      expect(new Set(chosen).size).toBe(7);
      for (const at of chosen) counts[at]!++;
    }
    // Each position is in 7 of 100 samples: 1,400 of 20,000.
    for (const count of counts) {
      expect(count).toBeGreaterThan(1_200);
      expect(count).toBeLessThan(1_600);
    }
  });
});
