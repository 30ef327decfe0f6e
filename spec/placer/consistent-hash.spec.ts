import { describe, expect, it } from 'vitest';
import { createConsistentHashPlacer, type Runner } from '../../placer/index.ts';
import { Fleet, type Outcome, callsFor, fakeCall, fakePool, manyCalls, placeEach, tally } from './fake.ts';

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
