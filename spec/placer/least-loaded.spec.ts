import { describe, expect, it } from 'vitest';
import { PlacerConfigError, createLeastLoadedPlacer, type RunnerLoad } from '../../placer/index.ts';
import { Fleet, type Outcome, fakePool, manyCalls, placeEach, tally } from './fake.ts';
import { FakeLoads, near, seeded, sequence, shares, slotsBusy } from './fake-load.ts';

interface PickCase {
  name: string;
  /** Loads by runner id; runners without one have no load(). */
  loads?: Record<string, RunnerLoad>;
  runners: Record<string, readonly Outcome[]>;
  /** Each call draws two numbers: the first of the pair, then the second among the others. */
  draws: number[];
  hold?: boolean;
  calls: number;
  offers: string[];
  placed: string[];
}

// By id: a 0.5, b 0, c 0.75, d 0.25. The pool lists them out of order on purpose.
const mixed = { a: slotsBusy(2, 4), b: slotsBusy(0, 4), c: slotsBusy(3, 4), d: slotsBusy(1, 4) };
const free = { c: ['placed'], a: ['placed'], d: ['placed'], b: ['placed'] } as const;

const pickCases: PickCase[] = [
  {
    // Pairs (a, b), (c, d), (d, a): the less loaded of each goes first.
    name: 'loads differ and every runner is free',
    loads: mixed,
    runners: free,
    draws: [0, 0, 0.5, 0.9, 0.9, 0],
    calls: 3,
    offers: ['b', 'd', 'd'],
    placed: ['b', 'd', 'd'],
  },
  {
    // Pair (a, c) picks a; then the rest from least to most loaded: b, d, c.
    name: 'the winner and the next least loaded are busy',
    loads: mixed,
    runners: { ...free, a: ['busy'], b: ['failed'] },
    draws: [0, 0.5],
    calls: 1,
    offers: ['a', 'b', 'd'],
    placed: ['d'],
  },
  {
    // No loads at all: every pair ties and goes to its first draw, the rest by id.
    name: 'no runner reports load',
    runners: { ...free, d: ['busy'] },
    draws: [0.9, 0, 0.3, 0.9],
    calls: 2,
    offers: ['d', 'a', 'b'],
    placed: ['a', 'b'],
  },
  {
    // Loads build up as calls commit: a, then b (a now holds one), then a tie goes to a, which
    // is full, so the idle c comes before b.
    name: 'committed calls add to the in-flight count',
    loads: { a: slotsBusy(0, 1), b: slotsBusy(0, 1), c: slotsBusy(0, 1) },
    runners: { a: ['placed', 'busy'], b: ['placed'], c: ['placed'] },
    hold: true,
    draws: [0, 0],
    calls: 3,
    offers: ['a', 'b', 'a', 'c'],
    placed: ['a', 'b', 'c'],
  },
];

describe('createLeastLoadedPlacer', () => {
  it.each(pickCases)('returns the expected offer order when $name', async (c) => {
    const fleet = new Fleet(c.loads ? { loads: new FakeLoads(c.loads), hold: c.hold ?? false } : {});
    const placer = createLeastLoadedPlacer({ random: sequence(c.draws) });
    const placed = await placeEach(placer, fakePool(fleet.runners(c.runners)), manyCalls(c.calls));
    expect(fleet.offers).toEqual(c.offers);
    expect(placed).toEqual(c.placed);
  });

  it('returns each runner in proportion to the pairs it wins over 10,000 calls', async () => {
    const fleet = new Fleet({ loads: new FakeLoads(mixed) });
    const placer = createLeastLoadedPlacer({ random: seeded(1) });
    const placed = tally(await placeEach(placer, fakePool(fleet.runners(free)), manyCalls(10_000)));
    // Of the 6 pairs, b wins the 3 it is in, d 2, a 1 and c, the most loaded, none.
    expect(placed.c).toBeUndefined();
    expect(shares(placed, ['a', 'b', 'c', 'd'], 10_000)).toEqual(near({ a: 1 / 6, b: 3 / 6, c: 0, d: 2 / 6 }));
  });

  it('never returns the more loaded of the drawn pair first over 10,000 calls', async () => {
    const ids = ['a', 'b', 'c', 'd', 'e'];
    const loads = new FakeLoads({
      a: slotsBusy(1, 8),
      b: slotsBusy(5, 8),
      c: slotsBusy(2, 8),
      d: slotsBusy(7, 8),
      e: slotsBusy(3, 8),
    });
    const draws: number[] = [];
    const random = seeded(2);
    const recording = (): number => {
      const r = random();
      draws.push(r);
      return r;
    };
    const fleet = new Fleet({ loads });
    const pool = fakePool(ids.map((id) => fleet.runner(id)));
    const placed = await placeEach(createLeastLoadedPlacer({ random: recording }), pool, manyCalls(10_000));
    for (let call = 0; call < placed.length; call++) {
      const i = Math.floor(draws[2 * call]! * 5);
      let j = Math.floor(draws[2 * call + 1]! * 4);
      if (j >= i) j++;
      const pair = [ids[i]!, ids[j]!].sort((x, y) => loads.inFlight(x) - loads.inFlight(y));
      expect(placed[call]).toBe(pair[0]);
    }
  });

  it('returns a runner with a heavy report last only while the report is fresh', () => {
    let now = 5_000;
    const loads = new FakeLoads({
      a: { inFlight: 0, slots: 4, reported: { running: 4, waiting: 4, at: 4_000 } },
      b: slotsBusy(1, 4),
    });
    const fleet = new Fleet({ loads });
    const runners = [fleet.runner('a'), fleet.runner('b')];
    const placer = createLeastLoadedPlacer({ random: sequence([0, 0]), now: () => now });
    expect([...placer.order(manyCalls(1)[0]!, runners)].map((r) => r.id)).toEqual(['b', 'a']);
    now = 6_001; // the report is now 2,001 ms old
    expect([...placer.order(manyCalls(1)[0]!, runners)].map((r) => r.id)).toEqual(['a', 'b']);
  });

  it('returns a placer named least-loaded when created', () => {
    expect(createLeastLoadedPlacer().name).toBe('least-loaded');
  });

  it.each([
    [{ random: 5 }, 'random must be a function, got 5'],
    [{ now: 'now' }, 'now must be a function, got "now"'],
    [{ staleAfterMs: -1 }, 'staleAfterMs must be a non-negative integer, got -1'],
    [{ staleAfterMs: 1.5 }, 'staleAfterMs must be a non-negative integer, got 1.5'],
  ])('throws PlacerConfigError naming the option when given %o', (options, message) => {
    expect(() => createLeastLoadedPlacer(options as never)).toThrow(new PlacerConfigError(message));
  });
});
