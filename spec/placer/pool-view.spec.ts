import { describe, expect, it } from 'vitest';
import { hash32, poolViewOf, rendezvous } from '../../placer/pool-view.ts';
import { Fleet } from './fake.ts';

describe('poolViewOf', () => {
  it("returns the runners sorted by id, with each id's position, when the pool lists them out of order", () => {
    const fleet = new Fleet();
    const view = poolViewOf(['c', 'b', 'd', 'a'].map((id) => fleet.runner(id)));
    expect(view.sorted.map((r) => r.id)).toEqual(['a', 'b', 'c', 'd']);
    expect([...view.positions]).toEqual([
      ['a', 0],
      ['b', 1],
      ['c', 2],
      ['d', 3],
    ]);
    expect(view.size).toBe(4);
  });

  it('returns the same view for a frozen list on every call, without looking at its contents', () => {
    const fleet = new Fleet();
    const runners = Object.freeze([fleet.runner('b'), fleet.runner('a')]);
    const view = poolViewOf(runners);
    expect(poolViewOf(runners)).toBe(view);
    expect(view.contents).toBe(runners);
  });

  it('returns a new view when an unfrozen list is changed in place', () => {
    const fleet = new Fleet();
    const runners = [fleet.runner('b'), fleet.runner('a')];
    const before = poolViewOf(runners);
    expect(poolViewOf(runners)).toBe(before);
    runners[1] = fleet.runner('c');
    const after = poolViewOf(runners);
    expect(after).not.toBe(before);
    expect(after.sorted.map((r) => r.id)).toEqual(['b', 'c']);
    expect(after.positions.get('c')).toBe(1);
  });

  it('returns the first position of an id listed twice', () => {
    const fleet = new Fleet();
    const first = fleet.runner('a');
    const view = poolViewOf([fleet.runner('b'), first, fleet.runner('a')]);
    expect(view.sorted[view.positions.get('a')!]).toBe(first);
    expect(view.positions.get('b')).toBe(2);
  });

  it('returns no positions for an empty list', () => {
    expect(poolViewOf([]).positions.size).toBe(0);
  });

  it('returns each id hash by position', () => {
    const fleet = new Fleet();
    const view = poolViewOf([fleet.runner('b'), fleet.runner('a')]);
    expect([...view.idHashes]).toEqual([hash32('a'), hash32('b')]);
  });
});

describe('rendezvous', () => {
  it('returns a choice among candidates that stays while the chosen one is a candidate', () => {
    const ids = Array.from({ length: 20 }, (_, i) => hash32(`runner-${i}`));
    const key = hash32('session-42');
    const best = (candidates: readonly number[]): number =>
      candidates.reduce((a, b) => (rendezvous(key, b) > rendezvous(key, a) ? b : a));
    const chosen = best(ids);
    expect(best(ids.filter((id, i) => id === chosen || i % 2 === 0))).toBe(chosen);
    expect(best(ids.filter((id, i) => id === chosen || i % 3 === 0))).toBe(chosen);
  });

  it('returns scores spread over the runners for many keys', () => {
    const ids = Array.from({ length: 4 }, (_, i) => hash32(`runner-${i}`));
    const wins = [0, 0, 0, 0];
    for (let k = 0; k < 4_000; k++) {
      const key = hash32(`session-${k}`);
      let best = 0;
      for (let i = 1; i < 4; i++) if (rendezvous(key, ids[i]!) > rendezvous(key, ids[best]!)) best = i;
      wins[best]!++;
    }
    for (const count of wins) expect(count).toBeGreaterThan(850);
  });
});
