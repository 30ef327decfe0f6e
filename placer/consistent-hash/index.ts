/**
 * Consistent hash: the call's affinity key picks a start runner, then the rest are offered in
 * turn. Calls sharing a key (a session, a user) land on the same runner while it has room, which
 * keeps its KV cache warm; when it is busy they spill to the same next runner, as in Fn.
 */
import { fnv1a64, jumpConsistentHash } from '../hash.ts';
import { rotate } from '../rotate.ts';
import type { Placer, Runner, RunnerCall } from '../types.ts';

interface SortedEntry {
  /** The pool's array as it was when sorted, element by element, to notice in-place changes. */
  readonly snapshot: readonly Runner<unknown>[];
  readonly sorted: readonly Runner<unknown>[];
}

/**
 * Creates a consistent-hash placer named `consistent-hash`: FNV-1a 64 of `call.key`, then jump
 * consistent hash over the runners sorted by id, then a walk on from there, wrapping.
 *
 * Runners are sorted by id because a pool may list them in any order, and a bucket number only
 * means the same runner if the order is the same everywhere. Adding a runner whose id sorts last
 * moves about 1/n of keys, all to it; a runner that is down or busy is walked past, so only its
 * keys go elsewhere. Removing a runner from the pool renumbers those sorted after it, which moves
 * more keys than that: a limit of jump hash, which assumes buckets come and go at the end.
 */
export function createConsistentHashPlacer(): Placer {
  // Pools usually return the same array until membership changes, so sort once per array.
  const cache = new WeakMap<readonly Runner<unknown>[], SortedEntry>();

  const sortedById = <R extends Runner<unknown>>(runners: readonly R[]): readonly R[] => {
    const hit = cache.get(runners);
    // O(n) identity check instead of trusting the array never changed: a pool that mutates and
    // returns its own array would otherwise get a stale order.
    if (hit && sameItems(hit.snapshot, runners)) return hit.sorted as readonly R[];
    const sorted = [...runners].sort(byId);
    cache.set(runners, { snapshot: [...runners], sorted });
    return sorted;
  };

  return {
    name: 'consistent-hash',
    order<R extends Runner<unknown>>(call: RunnerCall, runners: readonly R[]): Iterable<R> {
      if (runners.length === 0) return [];
      const sorted = sortedById(runners);
      return rotate(sorted, jumpConsistentHash(fnv1a64(call.key), sorted.length));
    },
  };
}

/** Code-unit order, not localeCompare: the order must not depend on the process's locale. */
function byId(a: Runner<unknown>, b: Runner<unknown>): number {
  return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}

function sameItems(a: readonly unknown[], b: readonly unknown[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}
