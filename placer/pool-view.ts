/**
 * What placers know of a runner list beyond the list itself: its id order, each id's position and
 * a hash of each id. Built once per list and kept with it, so a decision pays for them only when
 * the pool's membership changes, never per call.
 */
import type { Runner } from './types.ts';

/** One runner list's id order and what is derived from it; see {@link poolViewOf}. */
export class PoolView<R extends Runner<unknown>> {
  /** The runners sorted by id (code-unit order), so seeded draws pick alike whatever order a pool lists them in. */
  readonly sorted: readonly R[];
  /** The list's contents when the view was built, to notice an unfrozen list changed in place. */
  readonly contents: readonly R[];
  #positions: ReadonlyMap<string, number> | undefined;
  #idHashes: Uint32Array | undefined;

  constructor(runners: readonly R[]) {
    this.contents = Object.isFrozen(runners) ? runners : [...runners];
    this.sorted = [...runners].sort((a, b) => compareIds(a.id, b.id));
  }

  /** Runners in the list. */
  get size(): number {
    return this.sorted.length;
  }

  /** Each id's position in {@link sorted}; an id listed twice maps to its first entry. Built on first use. */
  get positions(): ReadonlyMap<string, number> {
    if (this.#positions === undefined) {
      const positions = new Map<string, number>();
      this.sorted.forEach((runner, i) => {
        if (!positions.has(runner.id)) positions.set(runner.id, i);
      });
      this.#positions = positions;
    }
    return this.#positions;
  }

  /** {@link hash32} of each runner's id, by position in {@link sorted}. Built on first use. */
  get idHashes(): Uint32Array {
    this.#idHashes ??= Uint32Array.from(this.sorted, (runner) => hash32(runner.id));
    return this.#idHashes;
  }
}

/** The view of each runner list seen; weak, so a list a pool replaced goes with its view. */
const views = new WeakMap<readonly Runner<unknown>[], PoolView<Runner<unknown>>>();

/**
 * The view of `runners`, built on first sight of the list and kept with it. A frozen list cannot
 * change, so its view is found in O(1): the gateway's pool hands out frozen lists, replaced when
 * membership changes. An unfrozen list might have been changed in place, so its contents are
 * compared with the view's (one pass, no string compares) and the view rebuilt when they differ:
 * O(n) per call, which is why a pool should freeze what it hands out.
 */
export function poolViewOf<R extends Runner<unknown>>(runners: readonly R[]): PoolView<R> {
  const hit = views.get(runners) as PoolView<R> | undefined;
  if (hit !== undefined && (hit.contents === runners || sameItems(hit.contents, runners))) return hit;
  const view = new PoolView(runners);
  views.set(runners, view as PoolView<Runner<unknown>>);
  return view;
}

/** Code-unit order, not localeCompare: the order must not depend on the process's locale. */
export function compareIds(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/**
 * A 32-bit FNV-1a of the string's UTF-16 code units, finished with a murmur3 mix so nearby ids
 * spread. For rendezvous tie-breaks ({@link rendezvous}), where speed matters and no other
 * process must agree on the bits beyond this code's own.
 */
export function hash32(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193);
  return fmix32(h);
}

/**
 * The rendezvous (highest random weight) score of a key's hash with a runner's id hash: the
 * runner with the highest score among some candidates is the key's choice among them, and stays
 * so while it is a candidate, whatever else joins or leaves.
 */
export function rendezvous(keyHash: number, idHash: number): number {
  return fmix32((keyHash ^ Math.imul(idHash, 0x9e3779b1)) >>> 0);
}

/** murmur3's 32-bit finaliser: every input bit moves every output bit. */
function fmix32(value: number): number {
  let h = value >>> 0;
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

function sameItems(a: readonly unknown[], b: readonly unknown[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}
