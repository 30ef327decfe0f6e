import { describe, expect, it } from 'vitest';
import { PlacerConfigError, createLeastLoadedPlacer, leastLoadedOrder } from '../../placer/index.ts';
import { Fleet, T0, callsFor, fakeCall, fakePool, manyCalls, placeEach, tally } from './fake.ts';
import { FakeLoads, countingPool, countingRunners, seeded, sequence, slotsBusy } from './fake-load.ts';
import { expectPicks, keyHomedOn, type PickCase } from './pick-cases.ts';

// By id: a 0.5, b 0, c 0.75, d 0.25. The pool lists them out of order on purpose.
const mixed = { a: slotsBusy(2, 4), b: slotsBusy(0, 4), c: slotsBusy(3, 4), d: slotsBusy(1, 4) };
const free = { c: ['placed'], a: ['placed'], d: ['placed'], b: ['placed'] } as const;

const pickCases: PickCase[] = [
  {
    // A pool no larger than `choices` is scanned whole: b, the least loaded, every time.
    name: 'loads differ and every runner is free',
    loads: mixed,
    runners: free,
    home: 'c',
    calls: 3,
    offers: ['b', 'b', 'b'],
    placed: ['b', 'b', 'b'],
  },
  {
    // b turns the call down (or fails); the rest follow from least to most loaded: d, a, c.
    name: 'the least loaded and the next are busy',
    loads: mixed,
    runners: { ...free, b: ['busy'], d: ['failed'] },
    home: 'c',
    calls: 1,
    offers: ['b', 'd', 'a'],
    placed: ['a'],
  },
  {
    // a (0.5) is the key's home and within 0.1 of d (0.45): the tie goes home.
    name: "the key's home is within the tie band of the least loaded",
    loads: { a: slotsBusy(10, 20), b: slotsBusy(19, 20), d: slotsBusy(9, 20) },
    runners: { a: ['placed'], b: ['placed'], d: ['placed'] },
    home: 'a',
    calls: 2,
    offers: ['a', 'a'],
    placed: ['a', 'a'],
  },
  {
    // The home, a (0.6), is 0.15 above d (0.45): outside the band, so d.
    name: "the key's home is outside the tie band",
    loads: { a: slotsBusy(12, 20), b: slotsBusy(19, 20), d: slotsBusy(9, 20) },
    runners: { a: ['placed'], b: ['placed'], d: ['placed'] },
    home: 'a',
    calls: 1,
    offers: ['d'],
    placed: ['d'],
  },
  {
    // Loads build up as calls commit: a, the home, at 1 of 10 after the first is still within
    // 0.1 of the idle b and c, so it takes the second too.
    name: 'committed calls add to the in-flight count',
    loads: { a: slotsBusy(0, 10), b: slotsBusy(0, 10), c: slotsBusy(0, 10) },
    runners: { a: ['placed'], b: ['placed'], c: ['placed'] },
    home: 'a',
    hold: true,
    calls: 2,
    offers: ['a', 'a'],
    placed: ['a', 'a'],
  },
];

describe('createLeastLoadedPlacer', () => {
  it.each(pickCases)('returns the expected offer order when $name', async (c) => {
    await expectPicks(createLeastLoadedPlacer({ random: () => expect.unreachable('a small pool draws nothing') }), c);
  });

  it('returns the same runner for one key and spreads keys over the runners when no runner reports load', async () => {
    const fleet = new Fleet();
    const runners = fleet.runners({ a: ['placed'], b: ['placed'], c: ['placed'], d: ['placed'] });
    const placer = createLeastLoadedPlacer();
    expect(new Set(await placeEach(placer, fakePool(runners), manyCalls(20, 'session-7'))).size).toBe(1);
    const keys = Array.from({ length: 400 }, (_, i) => `session-${i}`);
    const spread = tally(await placeEach(placer, fakePool(runners), callsFor(keys)));
    for (const id of ['a', 'b', 'c', 'd']) expect(spread[id]).toBeGreaterThan(60);
  });

  it('returns the least loaded of a sample of `choices` and the home on a larger pool', () => {
    // 100 runners; only r-099 is idle, the rest half busy. With 4 choices the candidates are the
    // key's home (r-010) and 3 of the 99 others: r-099 goes first when drawn, and otherwise every
    // candidate ties at 0.5 and the home takes the call.
    const ids = Array.from({ length: 100 }, (_, i) => `r-${String(i).padStart(3, '0')}`);
    const loads = new FakeLoads(Object.fromEntries(ids.map((id) => [id, slotsBusy(id === 'r-099' ? 0 : 5, 10)])));
    const fleet = new Fleet({ loads });
    const runners = ids.map((id) => fleet.runner(id));
    const placer = createLeastLoadedPlacer({ random: seeded(21), choices: 4 });
    const key = keyHomedOn('r-010', ids);
    const firsts = tally(Array.from({ length: 4_000 }, () => [...placer.order(fakeCall({ key }), runners)][0]!.id));
    expect(Object.keys(firsts).sort()).toEqual(['r-010', 'r-099']);
    // The sample holds 3 of the 99 others: r-099 is among them 3/99 of the time.
    expect(firsts['r-099']! / 4_000).toBeGreaterThan(0.02);
    expect(firsts['r-099']! / 4_000).toBeLessThan(0.042);
  });

  it('reads the loads of `choices` runners, and no more, for one decision on a 10,000-runner pool', async () => {
    const { runners, reads } = countingPool(10_000, Object.freeze({ inFlight: 3, slots: 16 }));
    const placer = createLeastLoadedPlacer({ random: seeded(22), now: () => T0 });
    expect(await placeEach(placer, fakePool(runners), [fakeCall()])).toEqual(['ok']);
    expect(reads()).toBe(16);
  });

  it('returns the rest by load, read only once the walk asks past the first', () => {
    const loads = new FakeLoads(mixed);
    const { runners, reads } = countingRunners(['a', 'b', 'c', 'd'], (id) => loads.get(id), { kind: 'busy' });
    const order = createLeastLoadedPlacer({ now: () => T0 })
      .order(fakeCall(), runners)
      [Symbol.iterator]();
    expect(order.next().value!.id).toBe('b');
    expect(reads()).toBe(4);
    expect([order.next().value!.id, order.next().value!.id, order.next().value!.id]).toEqual(['d', 'a', 'c']);
    expect(reads()).toBe(7);
  });

  it('returns a runner with a heavy report last only while the report is fresh', () => {
    let now = 5_000;
    const loads = new FakeLoads({
      a: { inFlight: 0, slots: 4, reported: { running: 4, waiting: 4, at: 4_000 } },
      b: slotsBusy(1, 4),
    });
    const fleet = new Fleet({ loads });
    const runners = [fleet.runner('a'), fleet.runner('b')];
    const placer = createLeastLoadedPlacer({ now: () => now });
    const key = keyHomedOn('b', ['a', 'b']);
    expect([...placer.order(fakeCall({ key }), runners)].map((r) => r.id)).toEqual(['b', 'a']);
    now = 6_001; // the report is now 2,001 ms old
    expect([...placer.order(fakeCall({ key }), runners)].map((r) => r.id)).toEqual(['a', 'b']);
  });

  it("returns the key's home as its preference, the same whatever order the pool lists runners in", () => {
    const fleet = new Fleet();
    const runners = ['d', 'a', 'c', 'b'].map((id) => fleet.runner(id));
    const placer = createLeastLoadedPlacer();
    const key = keyHomedOn('c', ['a', 'b', 'c', 'd']);
    expect(placer.preferred!(fakeCall({ key }), runners)).toBe('c');
    expect(placer.preferred!(fakeCall({ key }), [...runners].reverse())).toBe('c');
    expect(placer.preferred!(fakeCall({ key }), [])).toBeUndefined();
  });

  it('returns a placer named least-loaded when created', () => {
    expect(createLeastLoadedPlacer().name).toBe('least-loaded');
  });

  it.each([
    [{ random: 5 }, 'random must be a function, got 5'],
    [{ now: 'now' }, 'now must be a function, got "now"'],
    [{ staleAfterMs: -1 }, 'staleAfterMs must be a non-negative integer, got -1'],
    [{ staleAfterMs: 1.5 }, 'staleAfterMs must be a non-negative integer, got 1.5'],
    [{ choices: 0 }, 'choices must be a positive integer, got 0'],
    [{ choices: 2_000 }, 'choices must be at most 1024, got 2000'],
    [{ tieBand: -0.1 }, 'tieBand must be at least 0, got -0.1'],
    [{ tieBand: '0.1' }, 'tieBand must be a finite number, got "0.1"'],
  ])('throws PlacerConfigError naming the option when given %o', (options, message) => {
    expect(() => createLeastLoadedPlacer(options as never)).toThrow(new PlacerConfigError(message));
  });
});

describe('leastLoadedOrder', () => {
  it('returns the least loaded of loads already read first, then the rest by load', () => {
    const fleet = new Fleet();
    const loaded = ['a', 'b', 'c'].map((id, i) => ({ runner: fleet.runner(id), load: [0.5, 0.1, 0.3][i]! }));
    expect([...leastLoadedOrder(loaded, sequence([0]))].map((r) => r.id)).toEqual(['b', 'c', 'a']);
    expect([...leastLoadedOrder([], sequence([0]))]).toEqual([]);
  });
});
