/**
 * Pick tables for the key-homed load-aware placers: a pool, the key's home, and the exact offers
 * and outcomes a number of calls on that key must give.
 */
import { expect } from 'vitest';
import type { Placer, RunnerLoad } from '../../placer/index.ts';
import { homeOf } from '../../placer/least-loaded/choose.ts';
import { hash32 } from '../../placer/pool-view.ts';
import { Fleet, type Outcome, fakePool, manyCalls, placeEach } from './fake.ts';
import { FakeLoads } from './fake-load.ts';

/** One row of a pick table. */
export interface PickCase {
  name: string;
  /** Each runner's load; none reported when absent. */
  loads?: Record<string, RunnerLoad>;
  runners: Record<string, readonly Outcome[]>;
  /** The runner the calls' key has as its home. */
  home: string;
  /** Whether a placed call keeps its slot (adds to its runner's in-flight count). */
  hold?: boolean;
  calls: number;
  offers: string[];
  placed: string[];
}

/** A key whose home among `ids` (sorted) is `id`, found by trying keys in turn. */
export function keyHomedOn(id: string, ids: readonly string[]): string {
  const sorted = [...ids].sort();
  for (let i = 0; ; i++) if (sorted[homeOf(hash32(`session-${i}`), sorted.length)] === id) return `session-${i}`;
}

/** Places `c.calls` calls on a key homed on `c.home` with `placer`, and expects the row's offers and outcomes. */
export async function expectPicks(placer: Placer, c: PickCase): Promise<void> {
  const fleet = new Fleet({ ...(c.loads ? { loads: new FakeLoads(c.loads) } : {}), hold: c.hold ?? false });
  const key = keyHomedOn(c.home, Object.keys(c.runners));
  const placed = await placeEach(placer, fakePool(fleet.runners(c.runners)), manyCalls(c.calls, key));
  expect(fleet.offers).toEqual(c.offers);
  expect(placed).toEqual(c.placed);
}
