/**
 * Cache truth in the simulator: what a gateway knows of the engines' prefix caches, as the
 * `kv-aware` placer reads it (`RunnerCall.cache`).
 *
 * Two sources:
 * - the feed ({@link mirroredTruth}): each engine's cache as its events reach the gateway
 *   `feedDelayMs` later. A mirror cache per engine replays the engine's inserts that much later,
 *   in the same order; the cache being an LRU that reads never refresh, its evictions follow from
 *   its inserts, so the mirror holds exactly what the engine held `feedDelayMs` before. With no
 *   delay the mirror is updated within the insert itself, and equals the engine's cache at every
 *   instant.
 * - the oracle ({@link liveTruth}): every engine's cache read live, with no delay: the best any
 *   cache-aware placement can know.
 *
 * Either way each gateway adds its own recent placements, the pending rule (docs/placers.md): a
 * call it placed with prompt P on runner R counts R as holding P until R's feed reports P stored
 * or `cachePendingMs` passes, whichever comes first. Feeds never stop or lag in the simulator,
 * so every runner's cache is known.
 */
import type { PromptCache } from '../../../placer/index.ts';
import { leadingTokens } from './block-cache.ts';
import type { BlockRunCache, ChainHolding } from './block-cache.ts';
import type { Schedule, VirtualEngine } from './engine.ts';
import type { PromptBlocks } from './trace.ts';

/** The gateway's `cachePendingMs` default: how long a placement counts as cached without the feed saying so. */
export const DEFAULT_CACHE_PENDING_MS = 2_000;

/** The runner's cache feed interval: how late an engine's events reach the gateways, by default. */
export const DEFAULT_FEED_DELAY_MS = 50;

/** The engines' caches as the gateways see them, shared by every gateway of a run. */
export interface CacheTruth {
  /** Blocks of `prompt`'s chains engine `engine` is known to hold. */
  holding(engine: number, prompt: PromptBlocks): ChainHolding;
  /** Tells `listener` of each prompt an engine's feed reports stored, when the gateways hear of it. */
  onStored(listener: (prompt: PromptBlocks) => void): void;
}

/** The oracle: every engine's cache, live. */
export function liveTruth(engines: readonly VirtualEngine[]): CacheTruth {
  return {
    holding: (engine, prompt) => engines[engine]!.holding(prompt),
    onStored(listener) {
      for (const engine of engines) engine.onInsert((prompt) => listener(prompt));
    },
  };
}

/**
 * The feed: a mirror of each engine's cache as it is now, then fed the engine's inserts
 * `feedDelayMs` after each happens (within the insert when the delay is 0).
 */
export function mirroredTruth(engines: readonly VirtualEngine[], feedDelayMs: number, schedule: Schedule): CacheTruth {
  const mirrors: BlockRunCache[] = engines.map((engine) => engine.copyCache());
  const listeners: ((prompt: PromptBlocks) => void)[] = [];
  const apply = (mirror: BlockRunCache, prompt: PromptBlocks): void => {
    mirror.insert(prompt);
    for (const listener of listeners) listener(prompt);
  };
  for (const [i, engine] of engines.entries()) {
    const mirror = mirrors[i]!;
    engine.onInsert((prompt, now) => {
      if (feedDelayMs === 0) apply(mirror, prompt);
      else schedule(now + feedDelayMs, () => apply(mirror, prompt));
    });
  }
  return {
    holding: (engine, prompt) => mirrors[engine]!.holding(prompt),
    onStored: (listener) => void listeners.push(listener),
  };
}

/** One placement counted as cached until the feed reports it or it expires. */
interface Pending {
  readonly engine: number;
  readonly prompt: PromptBlocks;
  readonly until: number;
}

/** One gateway's recent placements, by the system prompt their prompts start with. */
export class PendingPlacements {
  readonly #bySystem = new Map<number, Set<Pending>>();
  readonly #byPrompt = new Map<PromptBlocks, Pending>();
  readonly #pendingMs: number;

  /** @param pendingMs how long a placement counts without the feed confirming it. */
  constructor(pendingMs: number) {
    this.#pendingMs = pendingMs;
  }

  /** Placed `prompt` on engine `engine` at `now`. */
  add(engine: number, prompt: PromptBlocks, now: number): void {
    if (this.#pendingMs <= 0) return;
    const pending: Pending = { engine, prompt, until: now + this.#pendingMs };
    let set = this.#bySystem.get(prompt.system);
    if (set === undefined) this.#bySystem.set(prompt.system, (set = new Set()));
    set.add(pending);
    this.#byPrompt.set(prompt, pending);
  }

  /** The feed reported `prompt` stored: the truth has it now. */
  stored(prompt: PromptBlocks): void {
    const pending = this.#byPrompt.get(prompt);
    if (pending !== undefined) this.#drop(pending);
  }

  /** Calls `visit` with each engine's pending blocks of `prompt`'s chains, dropping expired ones. */
  forEach(prompt: PromptBlocks, now: number, visit: (engine: number, held: ChainHolding) => void): void {
    const set = this.#bySystem.get(prompt.system);
    if (set === undefined) return;
    for (const pending of set) {
      if (pending.until <= now) {
        this.#drop(pending);
        continue;
      }
      const other = pending.prompt;
      const session = other.session === prompt.session ? other.blocks - other.sharedBlocks : 0;
      visit(pending.engine, { system: other.sharedBlocks, session });
    }
  }

  #drop(pending: Pending): void {
    this.#byPrompt.delete(pending.prompt);
    const set = this.#bySystem.get(pending.prompt.system);
    set?.delete(pending);
    if (set?.size === 0) this.#bySystem.delete(pending.prompt.system);
  }
}

const KNOWN = (): boolean => true;

/**
 * The call's PromptCache at one gateway: for each runner, the leading tokens of `prompt` its
 * engine holds by `truth` or by the gateway's pending placements, chain by chain.
 */
export function promptCacheOf(
  prompt: PromptBlocks,
  truth: CacheTruth,
  pending: PendingPlacements,
  runnerIds: readonly string[],
  now: number,
): PromptCache {
  const pendingHeld = new Map<number, ChainHolding>();
  pending.forEach(prompt, now, (engine, held) => {
    const before = pendingHeld.get(engine);
    pendingHeld.set(engine, before === undefined ? held : union(before, held));
  });
  const holders = new Map<string, number>();
  for (let engine = 0; engine < runnerIds.length; engine++) {
    const known = truth.holding(engine, prompt);
    const extra = pendingHeld.get(engine);
    const cached = leadingTokens(prompt, extra === undefined ? known : union(known, extra));
    if (cached > 0) holders.set(runnerIds[engine]!, cached);
  }
  return { promptTokens: prompt.tokens, holders, known: KNOWN };
}

/** Blocks held by either: each chain's blocks run from its first, so the longer run holds both. */
function union(a: ChainHolding, b: ChainHolding): ChainHolding {
  return { system: Math.max(a.system, b.system), session: Math.max(a.session, b.session) };
}
