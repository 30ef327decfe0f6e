import { describe, expect, it } from 'vitest';
import { PlacerConfigError, createLoadWeightedPlacer } from '../../placer/index.ts';
import { Fleet, T0, callsFor, fakeCall, fakePool, placeEach, tally } from './fake.ts';
import { FakeLoads, countingPool, near, seeded, sequence, shares, slotsBusy } from './fake-load.ts';
import { expectPicks, type PickCase } from './pick-cases.ts';

/** A pick row with its draws: the home's acceptance draw, then an index draw and an acceptance draw per further try. */
interface DrawnPickCase extends PickCase {
  draws: number[];
}

// Spare capacity a 0.9, b 0.5, c 0.1; d and e are full (1.0 and 1.2). Listed out of order.
const spread = {
  e: slotsBusy(12, 10),
  c: slotsBusy(9, 10),
  a: slotsBusy(1, 10),
  d: slotsBusy(10, 10),
  b: slotsBusy(5, 10),
};
const free = { e: ['placed'], c: ['placed'], a: ['placed'], d: ['placed'], b: ['placed'] } as const;

const pickCases: DrawnPickCase[] = [
  {
    // Mean spare room 0.3: the home, c (spare 0.1), is kept when the draw is under 0.1 / 0.3.
    name: "the draw keeps the key's home",
    loads: spread,
    runners: free,
    home: 'c',
    draws: [0.05],
    calls: 1,
    offers: ['c'],
    placed: ['c'],
  },
  {
    // c refused (0.5 >= 1/3); then index 0.1 of 5 is a (spare 0.9), kept by 0.3.
    name: 'the home is passed over and the next try is kept',
    loads: spread,
    runners: free,
    home: 'c',
    draws: [0.5, 0.1, 0.3],
    calls: 1,
    offers: ['a'],
    placed: ['a'],
  },
  {
    // Every try misses (full runners are never kept): the rest by weight, none with room, so by load.
    name: 'every runner is full',
    loads: { a: slotsBusy(12, 10), b: slotsBusy(10, 10), c: slotsBusy(15, 10) },
    runners: { a: ['placed'], b: ['busy'], c: ['placed'] },
    home: 'a',
    draws: [0.5],
    calls: 2,
    offers: ['b', 'a', 'b', 'a'],
    placed: ['a', 'a'],
  },
  {
    // No loads: every spare room is 1, so the home is kept at once.
    name: 'no runner reports load',
    runners: { a: ['placed'], b: ['busy'], c: ['placed'] },
    home: 'c',
    draws: [0.5],
    calls: 2,
    offers: ['c', 'c'],
    placed: ['c', 'c'],
  },
];

describe('createLoadWeightedPlacer', () => {
  it.each(pickCases)('returns the expected offer order when $name', async (c) => {
    await expectPicks(createLoadWeightedPlacer({ random: sequence(c.draws) }), c);
  });

  it('returns runners by spare capacity 0.9 / 0.5 / 0.1, homes with the mean room or more keeping their keys, over 10,000 calls', async () => {
    const loads = new FakeLoads({ a: slotsBusy(1, 10), b: slotsBusy(5, 10), c: slotsBusy(9, 10) });
    const fleet = new Fleet({ loads });
    const placer = createLoadWeightedPlacer({ random: seeded(3) });
    const runners = fleet.runners({ a: ['placed'], b: ['placed'], c: ['placed'] });
    const keys = Array.from({ length: 10_000 }, (_, i) => `session-${i}`);
    const placed = tally(await placeEach(placer, fakePool(runners), callsFor(keys)));
    // Mean spare 0.5: homes a and b keep every call of their keys, c a fifth; the four fifths c
    // passes on are drawn in proportion, 0.9 : 0.5 : 0.1.
    const passed = (1 / 3) * 0.8;
    expect(shares(placed, ['a', 'b', 'c'], 10_000)).toEqual(
      near({ a: 1 / 3 + passed * 0.6, b: 1 / 3 + passed / 3, c: 0.2 / 3 + passed / 15 }),
    );
  });

  it('returns the second pick in proportion to what is left when the first pick is always busy', async () => {
    // a is drawn 60% of the time and is busy; the call then goes to b or c by 0.5 : 0.1.
    const loads = new FakeLoads({ a: slotsBusy(1, 10), b: slotsBusy(5, 10), c: slotsBusy(9, 10) });
    const fleet = new Fleet({ loads });
    const runners = fleet.runners({ a: ['busy'], b: ['placed'], c: ['placed'] });
    const placer = createLoadWeightedPlacer({ random: seeded(4) });
    const keys = Array.from({ length: 10_000 }, (_, i) => `session-${i}`);
    const placed = tally(await placeEach(placer, fakePool(runners), callsFor(keys)));
    expect(shares(placed, ['a', 'b', 'c'], 10_000)).toEqual(near({ a: 0, b: 5 / 6, c: 1 / 6 }));
  });

  it('reads the mean sample and one load per try, and no more, for one decision on a 10,000-runner pool', async () => {
    const { runners, reads } = countingPool(10_000, Object.freeze({ inFlight: 4, slots: 16 }));
    // Spare room 0.75 everywhere, so the home has the mean room and is kept.
    const placer = createLoadWeightedPlacer({ random: sequence([0.5]), now: () => T0 });
    expect(await placeEach(placer, fakePool(runners), [fakeCall()])).toEqual(['ok']);
    expect(reads()).toBe(16 + 1);
  });

  it('returns the same order when the pool lists runners in another order', () => {
    const fleet = new Fleet({ loads: new FakeLoads(spread) });
    const forward = ['a', 'b', 'c', 'd', 'e'].map((id) => fleet.runner(id));
    const order = (runners: typeof forward): string[] =>
      [...createLoadWeightedPlacer({ random: seeded(5) }).order(fakeCall(), runners)].map((r) => r.id);
    expect(order([...forward].reverse())).toEqual(order(forward));
  });

  it('returns a placer named load-weighted when created', () => {
    expect(createLoadWeightedPlacer().name).toBe('load-weighted');
  });

  it.each([
    [{ random: null }, 'random must be a function, got null'],
    [{ staleAfterMs: '2000' }, 'staleAfterMs must be a non-negative integer, got "2000"'],
  ])('throws PlacerConfigError naming the option when given %o', (options, message) => {
    expect(() => createLoadWeightedPlacer(options as never)).toThrow(new PlacerConfigError(message));
  });
});
