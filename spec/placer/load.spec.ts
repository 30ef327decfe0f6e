import { describe, expect, it } from 'vitest';
import { KV_CACHE_WEIGHT, byLoad, loadOf, loadsOf, readLoad, type RunnerLoad } from '../../placer/index.ts';
import { othersByLoad, thenByLoad } from '../../placer/load.ts';
import { seededRandom } from '../../placer/kernel/index.ts';
import { poolViewOf } from '../../placer/pool-view.ts';
import { Fleet, T0 } from './fake.ts';
import { FakeLoads, countingRunners } from './fake-load.ts';

interface LoadCase {
  name: string;
  load: RunnerLoad | undefined;
  staleAfterMs?: number;
  expected: number;
}

const kv = KV_CACHE_WEIGHT;

const loadCases: LoadCase[] = [
  { name: 'the runner has no load', load: undefined, expected: 0 },
  { name: 'nothing is in flight', load: { inFlight: 0, slots: 8 }, expected: 0 },
  { name: 'slots are unknown, so counts are used as they are', load: { inFlight: 3 }, expected: 3 },
  { name: 'a quarter of the slots are in flight', load: { inFlight: 2, slots: 8 }, expected: 0.25 },
  {
    name: 'a fresh report sees more than the own count (other gateways)',
    load: { inFlight: 2, slots: 8, reported: { running: 6, waiting: 2, at: T0 - 500 } },
    expected: 1,
  },
  {
    name: 'the own count sees more than a fresh report (a burst since it)',
    load: { inFlight: 4, slots: 8, reported: { running: 1, at: T0 } },
    expected: 0.5,
  },
  {
    name: 'the report is just past the staleness bound',
    load: { inFlight: 1, slots: 8, reported: { running: 8, waiting: 8, kvCacheUsage: 1, at: T0 - 2_001 } },
    expected: 0.125,
  },
  {
    name: 'the report is exactly at the staleness bound',
    load: { inFlight: 1, slots: 8, reported: { running: 8, waiting: 8, at: T0 - 2_000 } },
    expected: 2,
  },
  {
    name: 'a custom staleness bound of 0 leaves only reports from now',
    load: { inFlight: 1, slots: 8, reported: { running: 8, at: T0 - 1 } },
    staleAfterMs: 0,
    expected: 0.125,
  },
  {
    name: 'the report is stamped after now (clocks a hair apart)',
    load: { inFlight: 0, slots: 4, reported: { waiting: 6, at: T0 + 100 } },
    expected: 1.5,
  },
  {
    name: 'only KV-cache use is reported: a tie-breaker on the own count',
    load: { inFlight: 2, slots: 8, reported: { kvCacheUsage: 0.5, at: T0 } },
    expected: 0.25 + 0.5 * kv,
  },
  {
    name: 'every field is reported',
    load: { inFlight: 1, slots: 4, reported: { running: 2, waiting: 1, kvCacheUsage: 0.8, at: T0 } },
    expected: 0.75 + 0.8 * kv,
  },
  {
    name: 'fields are garbled: NaN in flight, 0 slots, negative running, KV above 1',
    load: { inFlight: Number.NaN, slots: 0, reported: { running: -1, waiting: 2, kvCacheUsage: 1.7, at: T0 } },
    expected: 2 + kv,
  },
  {
    name: 'the report time is NaN',
    load: { inFlight: 1, slots: 2, reported: { running: 9, at: Number.NaN } },
    expected: 0.5,
  },
];

describe('loadOf', () => {
  it.each(loadCases)('returns $expected when $name', (c) => {
    expect(loadOf(c.load, T0, c.staleAfterMs)).toBeCloseTo(c.expected, 12);
  });

  it('returns a finite non-negative number whatever the fields hold', () => {
    const odd = [Number.NaN, -5, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, 0, 1e300];
    for (const a of odd) {
      for (const b of odd) {
        const load = { inFlight: a, slots: b, reported: { running: a, waiting: b, kvCacheUsage: a, at: T0 } };
        const value = loadOf(load, T0);
        expect(Number.isFinite(value) && value >= 0).toBe(true);
      }
    }
  });
});

describe('readLoad', () => {
  it('returns undefined when the runner has no load()', () => {
    expect(readLoad(new Fleet().runner('a'))).toBeUndefined();
  });

  it("returns undefined when the runner's load() throws", () => {
    const runner = {
      ...new Fleet().runner('a'),
      load: (): never => {
        throw new Error('pool state gone');
      },
    };
    expect(readLoad(runner)).toBeUndefined();
  });

  it('returns what load() returns otherwise', () => {
    const loads = new FakeLoads({ a: { inFlight: 2, slots: 4 } });
    expect(readLoad(new Fleet({ loads }).runner('a'))).toEqual({ inFlight: 2, slots: 4 });
  });
});

describe('loadsOf', () => {
  it('returns every runner with its load, sorted by id, when the pool lists them out of order', () => {
    const loads = new FakeLoads({ c: { inFlight: 1, slots: 2 }, a: { inFlight: 3, slots: 4 } });
    const fleet = new Fleet({ loads });
    const entries = loadsOf([fleet.runner('c'), fleet.runner('b'), fleet.runner('a')], T0, 2_000);
    expect(entries.map((e) => [e.runner.id, e.load])).toEqual([
      ['a', 0.75],
      ['b', 0],
      ['c', 0.5],
    ]);
  });
});

describe('thenByLoad', () => {
  it('returns the firsts, then the rest by load, reading their loads only once asked past the firsts', () => {
    const loads = new FakeLoads({
      a: { inFlight: 3, slots: 4 },
      b: { inFlight: 1, slots: 4 },
      c: { inFlight: 0, slots: 4 },
    });
    const { runners, reads } = countingRunners(['c', 'a', 'b', 'd'], (id) => loads.get(id), { kind: 'busy' });
    const first = runners[1]!;
    const order = thenByLoad([first], poolViewOf(runners), () => T0, 2_000)[Symbol.iterator]();
    expect(order.next().value).toBe(first);
    expect(reads()).toBe(0);
    expect([...{ [Symbol.iterator]: () => order }].map((r) => r.id)).toEqual(['c', 'd', 'b']);
    expect(reads()).toBe(3);
  });
});

describe('othersByLoad', () => {
  it('returns every runner but the offered ones in byLoad order when 300 loads repeat and vary', () => {
    const random = seededRandom(41);
    const loads = new FakeLoads();
    const fleet = new Fleet({ loads });
    const runners = Array.from({ length: 300 }, (_, i) => {
      const id = `r${String((i * 7919) % 300).padStart(3, '0')}`;
      loads.set(id, { inFlight: Math.floor(random() * 6), slots: 4 });
      return fleet.runner(id);
    });
    const offered = [runners[5]!, runners[17]!];
    const expected = loadsOf(runners, T0, 2_000)
      .filter((entry) => !offered.includes(entry.runner))
      .sort(byLoad)
      .map((entry) => entry.runner.id);
    expect([...othersByLoad(offered, poolViewOf(runners), T0, 2_000)].map((r) => r.id)).toEqual(expected);
  });
});

describe('byLoad', () => {
  it('returns least loaded first, equal loads by id', () => {
    const fleet = new Fleet();
    const entries = [
      { runner: fleet.runner('b'), load: 0.5 },
      { runner: fleet.runner('c'), load: 0 },
      { runner: fleet.runner('a'), load: 0.5 },
    ];
    expect(entries.sort(byLoad).map((e) => e.runner.id)).toEqual(['c', 'a', 'b']);
  });
});
