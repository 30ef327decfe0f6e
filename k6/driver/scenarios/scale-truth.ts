/**
 * What a kv-aware decision costs on cache truth as the pool grows: for an 8k-token prompt
 * (512 blocks of 16), the walk over the gateway's truth index (`CacheIndex.leading`, the holders
 * and how far each holds the prompt) and the placer's order up to its first runner. Mapping the
 * prompt to its blocks (tokenizing and hashing) is not in it: `sluice bench tokens` measures that.
 *
 * Two shapes of truth: a tenant's context held by four runners (the usual case, once kv-aware has
 * placed a tenant's calls), and the same with a 32-block preamble every runner holds (a system
 * prompt the whole fleet has cached, which the index gives as a floor rather than runner by runner).
 */
import { CacheIndex } from '../../../gateway/index.ts';
import { builtinPlacers, seededRandom } from '../../../placer/index.ts';
import type { Clock, PromptCache, Runner, RunnerCall } from '../../../placer/index.ts';
import { measureCost } from '../micro.ts';
import type { CostBounds, CostSample } from '../micro.ts';

/** Blocks of the prompt: 8,192 tokens in vLLM's default blocks of 16. */
export const TRUTH_PROMPT_BLOCKS = 512;
/** Tokens per block. */
const BLOCK_SIZE = 16;
/** Runners holding each tenant's context. */
export const TRUTH_HOLDERS = 4;
/** Blocks of the context those runners hold (the rest is the query, new to every engine). */
const CONTEXT_BLOCKS = 400;
/** Blocks of the preamble every runner holds, in the shared-preamble shape. */
const PREAMBLE_BLOCKS = 32;
/** Tenants the calls cycle through. */
const TENANTS = 8;

/** The shapes of truth measured. */
export const TRUTH_SHAPES = ['four holders', 'shared preamble'] as const;

/** One shape at one pool size. */
export interface TruthCell {
  shape: (typeof TRUTH_SHAPES)[number];
  runners: number;
  decision: CostSample;
}

/** A clock that never moves: nothing in the index goes stale while it is timed. */
const STILL: Clock = Object.freeze({ now: () => 0, sleep: () => Promise.resolve() });

/** `n` distinct 16-hex-digit block keys drawn from `random`. */
function keysOf(n: number, random: () => number): string[] {
  return Array.from({ length: n }, () =>
    Array.from({ length: 4 }, () =>
      Math.floor(random() * 0x10000)
        .toString(16)
        .padStart(4, '0'),
    ).join(''),
  );
}

/** Keys packed as the cache feed carries them: base64 of 8 bytes each. */
function packed(keys: readonly string[]): string {
  return Buffer.from(keys.join(''), 'hex').toString('base64');
}

/**
 * A truth index over `runners` in `shape`, and the prompts' keys by tenant: tenant t's context on
 * four runners spread over the pool, and in the shared-preamble shape every runner holding the
 * first {@link PREAMBLE_BLOCKS} blocks, which every tenant's prompt starts with.
 */
export function truthOf(
  shape: TruthCell['shape'],
  runners: readonly Runner<string>[],
): { index: CacheIndex; prompts: string[][] } {
  const random = seededRandom(runners.length);
  const preamble = keysOf(PREAMBLE_BLOCKS, random);
  const prompts = Array.from({ length: TENANTS }, () => {
    const own = keysOf(TRUTH_PROMPT_BLOCKS, random);
    return shape === 'shared preamble' ? [...preamble, ...own.slice(PREAMBLE_BLOCKS)] : own;
  });
  const held = new Map<string, string[]>();
  const hold = (runner: Runner<string>, keys: readonly string[]) => {
    const list = held.get(runner.id) ?? [];
    list.push(...keys);
    held.set(runner.id, list);
  };
  prompts.forEach((keys, t) => {
    for (let j = 0; j < TRUTH_HOLDERS; j++) {
      const runner = runners[(t * 7 + Math.floor((j * runners.length) / TRUTH_HOLDERS)) % runners.length]!;
      hold(runner, keys.slice(0, CONTEXT_BLOCKS));
    }
  });
  if (shape === 'shared preamble') for (const runner of runners) hold(runner, preamble);
  const index = new CacheIndex({
    clock: STILL,
    staleAfterMs: 3_600_000,
    pendingMs: 0,
    maxBlocksPerRunner: 1_000_000,
    maxBlocks: 100_000_000,
  });
  for (const runner of runners) {
    const keys = held.get(runner.id) ?? [];
    index.apply(runner.id, { epoch: 'bench', seq: 1, engineFeed: 'live', reset: true, stored: packed(keys) });
  }
  return { index, prompts };
}

/**
 * The decision's cost in `shape` over `runners`: per call, the index walk for the tenant's prompt
 * and kv-aware's order up to its first runner, for `calls` cycled through.
 */
export async function measureTruthDecision(
  shape: TruthCell['shape'],
  runners: readonly Runner<string>[],
  calls: readonly RunnerCall[],
  bounds: CostBounds,
): Promise<CostSample> {
  const { index, prompts } = truthOf(shape, runners);
  const placer = builtinPlacers['kv-aware']!({ now: () => 0 });
  const known = () => true;
  return measureCost((i) => {
    const holders = new Map<string, number>();
    const floor = index.leading(prompts[i % TENANTS]!, BLOCK_SIZE, holders);
    const cache: PromptCache = { promptTokens: TRUTH_PROMPT_BLOCKS * BLOCK_SIZE, holders, floor, known };
    return placer
      .order({ ...calls[i % calls.length]!, cache }, runners)
      [Symbol.iterator]()
      .next().value;
  }, bounds);
}
