/**
 * Test doubles for load-aware placement: loads a test sets by hand (and fake runners read live),
 * and randomness that is either scripted value by value or seeded, so picks are exact.
 */
import { expect } from 'vitest';
import type { Runner, RunnerLoad, TryExecResult } from '../../placer/index.ts';
import { seededRandom } from '../../placer/kernel/index.ts';

/**
 * Runner loads by id, as the gateway's pool would keep them. Fake runners read them on every
 * `load()`, so a test changes a load between calls and the next pass sees it.
 */
export class FakeLoads {
  readonly #loads = new Map<string, RunnerLoad>();

  constructor(initial: Record<string, RunnerLoad> = {}) {
    for (const [id, load] of Object.entries(initial)) this.#loads.set(id, load);
  }

  /** The load a runner with this id reports; undefined when none was set. */
  get(id: string): RunnerLoad | undefined {
    return this.#loads.get(id);
  }

  set(id: string, load: RunnerLoad): void {
    this.#loads.set(id, load);
  }

  /** Adds `n` calls to `id`'s own in-flight count (negative finishes them), keeping the rest. */
  add(id: string, n = 1): void {
    const load = this.#loads.get(id) ?? { inFlight: 0 };
    this.#loads.set(id, { ...load, inFlight: load.inFlight + n });
  }

  /** `id`'s own in-flight count, 0 when none was set. */
  inFlight(id: string): number {
    return this.#loads.get(id)?.inFlight ?? 0;
  }
}

/** A random() returning `values` in turn, wrapping around, so a test can name every draw. */
export function sequence(values: readonly number[]): () => number {
  let i = 0;
  return () => values[i++ % values.length]!;
}

/** A seeded random() in [0, 1) for ratio tests over thousands of calls; see seededRandom. */
export const seeded = seededRandom;

/** A load of `inFlight` calls out of `slots`, optionally with a runner report. */
export function slotsBusy(inFlight: number, slots: number, reported?: RunnerLoad['reported']): RunnerLoad {
  return reported === undefined ? { inFlight, slots } : { inFlight, slots, reported };
}

/**
 * The share of `total` each id got, for comparing with expected ratios within a tolerance; ids
 * never seen get 0, so an expected 0 is checked too.
 */
export function shares(
  counts: Readonly<Record<string, number>>,
  ids: readonly string[],
  total: number,
): Record<string, number> {
  return Object.fromEntries(ids.map((id) => [id, (counts[id] ?? 0) / total]));
}

/** An expect.closeTo for every expected share, `tolerance` either side. */
export function near(expected: Readonly<Record<string, number>>, tolerance = 0.02): Record<string, unknown> {
  // closeTo takes decimal digits; digits d accept |diff| < 10^-d / 2, so solve for d.
  const digits = -Math.log10(2 * tolerance);
  return Object.fromEntries(Object.entries(expected).map(([id, share]) => [id, expect.closeTo(share, digits)]));
}

/** Runners and how many times their load() was read. */
export interface CountedRunners<T> {
  readonly runners: readonly Runner<T>[];
  reads(): number;
}

/** Frozen runners named `ids` that read their load through `loadOf`, counting every read; each try answers `answer`. */
export function countingRunners<T>(
  ids: readonly string[],
  loadOf: (id: string) => RunnerLoad | undefined,
  answer: TryExecResult<T>,
): CountedRunners<T> {
  let reads = 0;
  const runners = Object.freeze(
    ids.map((id) => ({
      id,
      tryExec: async () => answer,
      load: () => {
        reads++;
        return loadOf(id);
      },
    })),
  );
  return { runners, reads: () => reads };
}

/** A frozen pool of `size` runners with one `load`, as the gateway's pool hands them out, placing every try as `ok`. */
export function countingPool(size: number, load: RunnerLoad): CountedRunners<string> {
  const ids = Array.from({ length: size }, (_, i) => `runner-${String(i).padStart(5, '0')}`);
  return countingRunners(ids, () => load, { kind: 'placed', value: 'ok' });
}
