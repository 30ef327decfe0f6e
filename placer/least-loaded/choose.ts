/**
 * The least-loaded choice: the least loaded of a bounded number of runners (the whole pool when it
 * is small, the key's home and a random sample otherwise), near-ties going to the key's own runner.
 * least-loaded, prefix-affinity and kv-aware choose by it, so each reads a bounded number of loads
 * per decision.
 */
import { drawIndex } from '../kernel/index.ts';
import { loadOf, readLoad } from '../load.ts';
import type { LoadedRunner } from '../load.ts';
import { hash32, poolViewOf, rendezvous } from '../pool-view.ts';
import type { PoolView } from '../pool-view.ts';
import type { Runner, RunnerCall } from '../types.ts';

/** How the choice is made; see `LeastLoadedOptions` for what each means and its default. */
export interface ChoiceSettings {
  readonly choices: number;
  readonly tieBand: number;
  readonly staleAfterMs: number;
  readonly random: () => number;
}

/**
 * The runner least-loaded offers first. Candidates: every runner of a pool of at most `choices`,
 * else the key's home ({@link homeOf}) and `choices - 1` runners drawn at random. Of them, the key's
 * home when its load is within `tieBand` of the least, else the least loaded, near-ties (within
 * `tieBand`) going to the runner rendezvous hashing gives the key. So a session's calls go back
 * to the engine caching its history whenever that engine is among the least loaded, and balance
 * is given up for it by no more than `tieBand`. O(choices) loads read and hashes mixed, whatever
 * the pool's size. Undefined for an empty pool.
 */
export function leastLoadedChoice<R extends Runner<unknown>>(
  view: PoolView<R>,
  key: string,
  now: number,
  settings: ChoiceSettings,
): LoadedRunner<R> | undefined {
  const n = view.size;
  if (n === 0) return undefined;
  const keyHash = hash32(key);
  const home = homeOf(keyHash, n);
  const positions = candidatesOf(n, home, settings);
  const loads = positions.map((at) => loadOf(readLoad(view.sorted[at]!), now, settings.staleAfterMs));
  const least = Math.min(...loads);
  const homeLoad = loads[positions.indexOf(home)]!;
  if (homeLoad <= least + settings.tieBand) return { runner: view.sorted[home]!, load: homeLoad };
  const ids = view.idHashes;
  let best = -1;
  let bestScore = -1;
  for (let c = 0; c < positions.length; c++) {
    if (!(loads[c]! <= least + settings.tieBand)) continue;
    const score = rendezvous(keyHash, ids[positions[c]!]!);
    if (score > bestScore) {
      best = c;
      bestScore = score;
    }
  }
  return { runner: view.sorted[positions[best]!]!, load: loads[best]! };
}

/**
 * The positions least-loaded compares: all `n` when there are at most `choices`, else `home` first
 * and `choices - 1` of the others, sampled.
 */
function candidatesOf(n: number, home: number, settings: ChoiceSettings): number[] {
  if (n <= settings.choices) return Array.from({ length: n }, (_, i) => i);
  const others = sample(n - 1, settings.choices - 1, settings.random);
  // Sampled from the n - 1 runners other than the home: those at or past it move up one.
  return [home, ...others.map((at) => (at >= home ? at + 1 : at))];
}

/**
 * The id of `call`'s key's home among `runners` ({@link homeOf} over their id order), or undefined
 * for none: the preference least-loaded and load-weighted name while every runner is busy.
 */
export function keyHomeOf(call: RunnerCall, runners: readonly Runner<unknown>[]): string | undefined {
  const { sorted } = poolViewOf(runners);
  return sorted.length === 0 ? undefined : sorted[homeOf(hash32(call.key), sorted.length)]!.id;
}

/**
 * The key's home among `n` runners (by position in id order): jump consistent hashing (Lamping and
 * Veach) driven by a generator seeded with the key's hash, so going from n to n + 1 runners moves
 * only about 1/(n + 1) of keys, all to the new last one. O(log n) steps of 32-bit arithmetic.
 */
export function homeOf(keyHash: number, n: number): number {
  let state = keyHash >>> 0;
  let b = -1;
  let j = 0;
  while (j < n) {
    b = j;
    // mulberry32's step: a fresh uniform draw in (0, 1] per jump.
    state = (state + 0x6d2b79f5) >>> 0;
    let t = Math.imul(state ^ (state >>> 15), state | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    const r = (((t ^ (t >>> 14)) >>> 0) + 1) / 4_294_967_296;
    j = Math.floor((b + 1) / r);
  }
  return b;
}

/**
 * `k` distinct positions in [0, n), for k <= n: evenly spaced (n / k apart) from one random
 * offset, so every position is in the sample with the same chance, k / n, for one draw. Runners
 * are in id order, which says nothing of their load, so a spaced sample weighs them as a fully
 * random one would, at a fraction of the cost.
 */
export function sample(n: number, k: number, random: () => number): number[] {
  const offset = drawIndex(random, n);
  const chosen = new Array<number>(k);
  for (let i = 0; i < k; i++) chosen[i] = (offset + Math.floor((i * n) / k)) % n;
  return chosen;
}
