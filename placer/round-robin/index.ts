/**
 * Round-robin: each pass starts one runner further on than the last, then offers the rest in
 * turn. Fn's naive placer drew a random start on every pass; a rotating counter spreads calls
 * evenly instead of only on average, and is deterministic under test.
 */
import { PlacerConfigError } from '../errors.ts';
import { rotate } from '../rotate.ts';
import type { PlacerDescriptor } from '../descriptor.ts';
import type { Placer, Runner, RunnerCall } from '../types.ts';

/** Options for {@link createRoundRobinPlacer}. */
export interface RoundRobinOptions {
  /**
   * Picks the counter's starting point, called once. Random by default so a fleet of gateways
   * restarted together does not send its first calls all to the same runner.
   * @default see roundRobinDefaults (Math.random)
   */
  random?: () => number;
}

/** The defaults, frozen so no caller can change them for everyone else. */
export const roundRobinDefaults = Object.freeze({ random: Math.random });

/** Offset space for the first start; large, so it stays uniform for any realistic pool size. */
const OFFSET_SPACE = 2 ** 32;

/**
 * Creates a round-robin placer named `round-robin`. The counter advances on every `order()` call
 * (every pass, not every call), so a call that retries also starts somewhere new.
 * @throws PlacerConfigError when `random()` returns something outside [0, 1).
 */
export function createRoundRobinPlacer(options: RoundRobinOptions = {}): Placer {
  const { random = roundRobinDefaults.random } = options;
  const r = random();
  if (typeof r !== 'number' || !(r >= 0 && r < 1)) {
    throw new PlacerConfigError(`random must return a number in [0, 1), got ${String(r)}`);
  }
  let next = Math.floor(r * OFFSET_SPACE);

  return {
    name: 'round-robin',
    order<R extends Runner<unknown>>(_call: RunnerCall, runners: readonly R[]): Iterable<R> {
      // Taken eagerly, not inside a generator, so the counter moves even if nobody iterates.
      const start = next;
      // Wrapping keeps the counter an exact integer however long the gateway runs.
      next = (next + 1) % Number.MAX_SAFE_INTEGER;
      return rotate(runners, start);
    },
  };
}

/** The registry's entry: no option a config may set (`random` is code-only). */
export const descriptor: PlacerDescriptor = Object.freeze({
  name: 'round-robin',
  defaults: Object.freeze({}),
  optionKeys: Object.freeze([]),
  create: (options: Record<string, unknown> | undefined) => createRoundRobinPlacer(options as RoundRobinOptions),
});
