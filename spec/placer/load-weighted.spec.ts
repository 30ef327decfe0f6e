import { describe, expect, it } from 'vitest';
import { PlacerConfigError, createLoadWeightedPlacer, type RunnerLoad } from '../../placer/index.ts';
import { Fleet, type Outcome, fakeCall, fakePool, manyCalls, placeEach, tally } from './fake.ts';
import { FakeLoads, near, seeded, sequence, shares, slotsBusy } from './fake-load.ts';

interface PickCase {
  name: string;
  loads?: Record<string, RunnerLoad>;
  runners: Record<string, readonly Outcome[]>;
  /** One draw per runner offered among those with spare capacity, none for full ones. */
  draws: number[];
  calls: number;
  offers: string[];
  placed: string[];
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

const pickCases: PickCase[] = [
  {
    // Weights 0.9, 0.5, 0.1 of 1.5: a below 0.6, b below 0.933, c above.
    name: 'every runner is free',
    loads: spread,
    runners: free,
    draws: [0.1, 0.7, 0.95],
    calls: 3,
    offers: ['a', 'b', 'c'],
    placed: ['a', 'b', 'c'],
  },
  {
    // a, then b of (b 0.5, c 0.1), then c alone; then the full ones, least loaded first.
    name: 'every runner with spare capacity turns the call down',
    loads: spread,
    runners: { ...free, a: ['busy'], b: ['busy'], c: ['failed'] },
    draws: [0.1, 0.5, 0.9],
    calls: 1,
    offers: ['a', 'b', 'c', 'd'],
    placed: ['d'],
  },
  {
    name: 'every runner is full, so no number is drawn',
    loads: { a: slotsBusy(12, 10), b: slotsBusy(10, 10), c: slotsBusy(15, 10) },
    runners: { a: ['placed'], b: ['busy'], c: ['placed'] },
    draws: [],
    calls: 2,
    offers: ['b', 'a', 'b', 'a'],
    placed: ['a', 'a'],
  },
  {
    // Every weight is 1: 0.5 of 3 is b, then 0.5 of (a, c) is c.
    name: 'no runner reports load',
    runners: { a: ['placed'], b: ['busy'], c: ['placed'] },
    draws: [0.5, 0.5],
    calls: 1,
    offers: ['b', 'c'],
    placed: ['c'],
  },
];

describe('createLoadWeightedPlacer', () => {
  it.each(pickCases)('returns the expected offer order when $name', async (c) => {
    const fleet = new Fleet(c.loads ? { loads: new FakeLoads(c.loads) } : {});
    const random = c.draws.length > 0 ? sequence(c.draws) : () => expect.unreachable('random() was called');
    const pool = fakePool(fleet.runners(c.runners));
    const placed = await placeEach(createLoadWeightedPlacer({ random }), pool, manyCalls(c.calls));
    expect(fleet.offers).toEqual(c.offers);
    expect(placed).toEqual(c.placed);
  });

  it('returns runners in proportion to spare capacity 0.9 / 0.5 / 0.1 over 10,000 calls', async () => {
    const loads = new FakeLoads({ a: slotsBusy(1, 10), b: slotsBusy(5, 10), c: slotsBusy(9, 10) });
    const fleet = new Fleet({ loads });
    const placer = createLoadWeightedPlacer({ random: seeded(3) });
    const runners = fleet.runners({ a: ['placed'], b: ['placed'], c: ['placed'] });
    const placed = tally(await placeEach(placer, fakePool(runners), manyCalls(10_000)));
    expect(shares(placed, ['a', 'b', 'c'], 10_000)).toEqual(near({ a: 0.9 / 1.5, b: 0.5 / 1.5, c: 0.1 / 1.5 }));
  });

  it('returns the second pick in proportion to what is left when the first pick is always busy', async () => {
    // a is drawn 60% of the time and is busy; the call then goes to b or c by 0.5 : 0.1.
    const loads = new FakeLoads({ a: slotsBusy(1, 10), b: slotsBusy(5, 10), c: slotsBusy(9, 10) });
    const fleet = new Fleet({ loads });
    const runners = fleet.runners({ a: ['busy'], b: ['placed'], c: ['placed'] });
    const placer = createLoadWeightedPlacer({ random: seeded(4) });
    const placed = tally(await placeEach(placer, fakePool(runners), manyCalls(10_000)));
    expect(shares(placed, ['a', 'b', 'c'], 10_000)).toEqual(near({ a: 0, b: 5 / 6, c: 1 / 6 }));
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
