import { describe, expect, it } from 'vitest';
import { PlacerConfigError, createConsistentHashPlacer, type Runner } from '../../placer/index.ts';
import { Fleet, type Outcome, callsFor, fakeCall, fakePool, manyCalls, placeEach, tally } from './fake.ts';
import { FakeLoads } from './fake-load.ts';

interface PickCase {
  name: string;
  runners: Record<string, readonly Outcome[]>;
  keys: string[];
  offers: string[];
  placed: string[];
}

// The pool lists runners out of id order on purpose: the placer must sort them itself.
const poolOrder = ['c', 'e', 'a', 'd', 'b'];
const withScripts = (faults: Record<string, readonly Outcome[]>): Record<string, readonly Outcome[]> =>
  Object.fromEntries(poolOrder.map((id) => [id, faults[id] ?? ['placed']]));

// Start runners among a..e, from FNV-1a 64 then jump hash (both checked against reference
// vectors in hash.spec.ts): alice e, bob c, carol d, dave a, frank c, grace e.
const pickCases: PickCase[] = [
  {
    name: 'every runner is free',
    runners: withScripts({}),
    keys: ['alice', 'bob', 'carol', 'dave'],
    offers: ['e', 'c', 'd', 'a'],
    placed: ['e', 'c', 'd', 'a'],
  },
  {
    // Both keys that start at e spill to the same next runner, wrapping from e to a.
    name: 'the start runner is busy',
    runners: withScripts({ e: ['busy'] }),
    keys: ['alice', 'grace', 'bob'],
    offers: ['e', 'a', 'e', 'a', 'c'],
    placed: ['a', 'a', 'c'],
  },
  {
    name: 'one runner is down and the next is busy',
    runners: withScripts({ c: ['failed'], d: ['busy'] }),
    keys: ['bob', 'carol', 'frank'],
    offers: ['c', 'd', 'e', 'd', 'e', 'c', 'd', 'e'],
    placed: ['e', 'e', 'e'],
  },
  {
    name: 'every runner is busy on the first pass',
    runners: withScripts({ a: ['busy', 'placed'], b: ['busy'], c: ['busy'], d: ['busy'], e: ['busy', 'placed'] }),
    keys: ['alice', 'dave'],
    offers: ['e', 'a', 'b', 'c', 'd', 'e', 'a'],
    placed: ['e', 'a'],
  },
];

interface BoundedCase extends PickCase {
  /** In-flight counts by runner id; every runner has load(), 0 when not listed. */
  inFlight: Record<string, number>;
}

// With 5 runners and loadFactor 1.25 the bound is 1.25 x (total in flight + 1) / 5.
const boundedCases: BoundedCase[] = [
  {
    // Total 4, bound 1.25: e (alice's home) is over it and moves behind a, b, c, d; bob stays home.
    name: "alice's home runner is over the bound",
    inFlight: { e: 4 },
    runners: withScripts({}),
    keys: ['alice', 'bob'],
    offers: ['a', 'c'],
    placed: ['a', 'c'],
  },
  {
    name: 'the home runner is over the bound and every other runner is busy',
    inFlight: { e: 4 },
    runners: withScripts({ a: ['busy'], b: ['busy'], c: ['failed'], d: ['busy'] }),
    keys: ['alice'],
    offers: ['a', 'b', 'c', 'd', 'e'],
    placed: ['e'],
  },
  {
    // Total 6, bound 1.75: e and a are over it, so alice's ring e a b c d becomes b c d e a.
    name: 'the home runner and the next are over the bound',
    inFlight: { e: 3, a: 3 },
    runners: withScripts({ b: ['busy'] }),
    keys: ['alice', 'dave'],
    offers: ['b', 'c', 'b', 'c'],
    placed: ['c', 'c'],
  },
  {
    // Total 10, bound 2.75: nobody is over it, so the plain ring.
    name: 'every runner carries the mean',
    inFlight: { a: 2, b: 2, c: 2, d: 2, e: 2 },
    runners: withScripts({}),
    keys: ['alice', 'bob', 'carol', 'dave'],
    offers: ['e', 'c', 'd', 'a'],
    placed: ['e', 'c', 'd', 'a'],
  },
];

const keys = Array.from({ length: 5_000 }, (_, i) => `session-${i}`);

/** Where each key lands when every runner in `ids` is free. */
async function homes(ids: string[], faults: Record<string, readonly Outcome[]> = {}): Promise<string[]> {
  const fleet = new Fleet();
  const runners = ids.map((id) => fleet.runner(id, faults[id] ?? ['placed']));
  return placeEach(createConsistentHashPlacer(), fakePool(runners), callsFor(keys));
}

describe('createConsistentHashPlacer', () => {
  it.each(pickCases)('returns the expected offer order when $name', async (c) => {
    const fleet = new Fleet();
    const placed = await placeEach(createConsistentHashPlacer(), fakePool(fleet.runners(c.runners)), callsFor(c.keys));
    expect(fleet.offers).toEqual(c.offers);
    expect(placed).toEqual(c.placed);
  });

  it('returns the same runner for every call when they share a key', async () => {
    const pool = fakePool(new Fleet().runners(withScripts({})));
    const placed = await placeEach(createConsistentHashPlacer(), pool, manyCalls(200, 'alice'));
    expect(tally(placed)).toEqual({ e: 200 });
  });

  it('returns an even spread when keys differ', async () => {
    const counts = tally(await homes(['a', 'b', 'c', 'd', 'e']));
    for (const id of ['a', 'b', 'c', 'd', 'e']) {
      expect(counts[id]).toBeGreaterThan(800);
      expect(counts[id]).toBeLessThan(1_200);
    }
  });

  it('returns the same placements when the pool lists runners in another order', async () => {
    expect(await homes(['e', 'd', 'c', 'b', 'a'])).toEqual(await homes(['a', 'b', 'c', 'd', 'e']));
  });

  it("moves only a down runner's keys, each to the runner after it", async () => {
    const before = await homes(['a', 'b', 'c', 'd', 'e']);
    const after = await homes(['a', 'b', 'c', 'd', 'e'], { c: ['failed'] });
    for (let i = 0; i < keys.length; i++) expect(after[i]).toBe(before[i] === 'c' ? 'd' : before[i]);
  });

  it("moves only the removed runner's keys when the runner sorting last leaves the pool", async () => {
    const before = await homes(['a', 'b', 'c', 'd', 'e']);
    const after = await homes(['a', 'b', 'c', 'd']);
    for (let i = 0; i < keys.length; i++) if (before[i] !== 'e') expect(after[i]).toBe(before[i]);
  });

  it('moves about a sixth of keys, all to the newcomer, when a sixth runner sorting last joins', async () => {
    const before = await homes(['a', 'b', 'c', 'd', 'e']);
    const after = await homes(['a', 'b', 'c', 'd', 'e', 'f']);
    const moved = keys.filter((_, i) => after[i] !== before[i]).length;
    for (let i = 0; i < keys.length; i++) if (after[i] !== before[i]) expect(after[i]).toBe('f');
    expect(moved).toBeGreaterThan((keys.length / 6) * 0.8);
    expect(moved).toBeLessThan((keys.length / 6) * 1.2);
  });

  it('returns an order that includes a runner the pool pushed into the array it returned before', () => {
    const placer = createConsistentHashPlacer();
    const fleet = new Fleet();
    const runners: Runner<string>[] = fleet.runners({ a: [], b: [] });
    expect([...placer.order(fakeCall(), runners)]).toHaveLength(2);
    runners.push(fleet.runner('c'));
    expect([...placer.order(fakeCall(), runners)].map((r) => r.id).sort()).toEqual(['a', 'b', 'c']);
  });

  it('returns a placer named consistent-hash when created', () => {
    expect(createConsistentHashPlacer().name).toBe('consistent-hash');
  });
});

describe('createConsistentHashPlacer with bounded load', () => {
  it.each(boundedCases)('returns the expected offer order when $name', async (c) => {
    const loads = new FakeLoads();
    for (const id of poolOrder) loads.set(id, { inFlight: c.inFlight[id] ?? 0 });
    const fleet = new Fleet({ loads });
    const placed = await placeEach(createConsistentHashPlacer(), fakePool(fleet.runners(c.runners)), callsFor(c.keys));
    expect(fleet.offers).toEqual(c.offers);
    expect(placed).toEqual(c.placed);
  });

  it('returns the plain ring when every runner exposes load() and nothing is in flight', async () => {
    const fleet = new Fleet({ loads: new FakeLoads() });
    const runners = ['a', 'b', 'c', 'd', 'e'].map((id) => fleet.runner(id));
    const placed = await placeEach(createConsistentHashPlacer(), fakePool(runners), callsFor(keys));
    expect(placed).toEqual(await homes(['a', 'b', 'c', 'd', 'e']));
  });

  it('returns the home runner behind the others when only it exposes load() and it is over the bound', async () => {
    const fleet = new Fleet();
    const runners = fleet.runners(withScripts({}));
    const loaded = runners.map((r) => (r.id === 'e' ? { ...r, load: () => ({ inFlight: 4 }) } : r));
    const placed = await placeEach(createConsistentHashPlacer(), fakePool(loaded), callsFor(['alice', 'grace']));
    expect(placed).toEqual(['a', 'a']);
  });

  it('spills a hot key once its runner passes the bound, never letting a runner pass it by more than one', async () => {
    const loads = new FakeLoads();
    const fleet = new Fleet({ loads, hold: true });
    const ids = ['a', 'b', 'c', 'd'];
    const pool = fakePool(ids.map((id) => fleet.runner(id)));
    const placer = createConsistentHashPlacer();
    const placed: string[] = [];
    for (let total = 1; total <= 2_000; total++) {
      placed.push(...(await placeEach(placer, pool, manyCalls(1, 'alice'))));
      for (const id of ids) expect(loads.inFlight(id)).toBeLessThanOrEqual((1.25 * total) / ids.length + 1);
    }
    const counts = tally(placed);
    const home = placed[0]!;
    // The home runner keeps about its bound of 1.25 / 4 of the calls; the rest spill along the ring.
    expect(counts[home]! / 2_000).toBeCloseTo(1.25 / 4, 1);
    expect(Object.keys(counts).sort()).toEqual(ids);
  });

  it('keeps a hot key home longer when loadFactor is larger', async () => {
    const share = async (loadFactor: number): Promise<number> => {
      const fleet = new Fleet({ loads: new FakeLoads(), hold: true });
      const pool = fakePool(['a', 'b', 'c', 'd'].map((id) => fleet.runner(id)));
      const placed = await placeEach(createConsistentHashPlacer({ loadFactor }), pool, manyCalls(1_000, 'alice'));
      return tally(placed)[placed[0]!]! / 1_000;
    };
    expect(await share(1)).toBeCloseTo(0.25, 1);
    expect(await share(2)).toBeCloseTo(0.5, 1);
    expect(await share(4)).toBe(1);
  });

  it.each([
    [0.9, 'loadFactor must be at least 1, got 0.9'],
    [Number.NaN, 'loadFactor must be a finite number, got NaN'],
    ['1.25', 'loadFactor must be a finite number, got "1.25"'],
  ])('throws PlacerConfigError naming loadFactor when given %s', (loadFactor, message) => {
    const create = (): unknown => createConsistentHashPlacer({ loadFactor: loadFactor as number });
    expect(create).toThrow(new PlacerConfigError(message));
  });
});

describe('consistent-hash preferred', () => {
  it("names the key's home on the ring, the runner order() puts first without load, whatever the load", () => {
    const fleet = new Fleet({
      loads: new FakeLoads({ a: { inFlight: 40 }, b: { inFlight: 0 }, c: { inFlight: 0 }, d: { inFlight: 0 } }),
    });
    const runners = fleet.runners({ a: ['placed'], b: ['placed'], c: ['placed'], d: ['placed'] });
    const bare = new Fleet().runners({ a: ['placed'], b: ['placed'], c: ['placed'], d: ['placed'] });
    const placer = createConsistentHashPlacer();
    const homes = new Set<string>();
    for (let i = 0; i < 200; i++) {
      const call = fakeCall({ key: `session-${i}` });
      const home = placer.preferred?.(call, runners);
      expect(home).toBe([...placer.order(call, bare)][0]!.id);
      homes.add(home!);
    }
    expect(homes).toEqual(new Set(['a', 'b', 'c', 'd']));
    expect(placer.preferred?.(fakeCall(), [])).toBeUndefined();
  });
});
