/**
 * The simulated inference engine: a stand-in for vLLM on machines without a GPU. It speaks
 * vLLM's OpenAI-compatible HTTP (chat, completions, embeddings, models, health, metrics), plus
 * `POST /invoke/:fn` for the gateway's generic calls, and behaves like a loaded GPU: a bounded
 * batch and queue, prefill priced per uncached token, a prefix cache, slow-down under load,
 * jitter, and fault knobs. Modelled on llm-d-inference-sim; profiles name realistic numbers.
 *
 * @example
 * const engine = createSimEngine({ profile: 'h100-8b', maxNumSeqs: 4 });
 * const { url } = await engine.listen();
 * // ... point a runner at `url` ...
 * await engine.close();
 */
export { createSimEngine, ENGINE_ID_HEADER } from './server.ts';
export type { SimEngine, SimEngineAddress, SimEngineStats } from './server.ts';
export { runSimEngineCommand } from './main.ts';
export type { SimEngineCommandOptions } from './main.ts';
export { resolveSimEngineOptions } from './options.ts';
export type { ResolvedSimEngineOptions, SimClock, SimEngineOptions, SimFailureRates } from './options.ts';
export { H100_8B_PROFILE, isSimProfileName, SIM_PROFILES, SMALL_PROFILE } from './profiles.ts';
export type { SimProfile, SimProfileName } from './profiles.ts';
export { SimAbortedError, SimOptionError, SimQueueFullError } from './errors.ts';
export { SimScheduler } from './scheduler.ts';
export type { Release, SchedulerTotals, SimSchedulerLimits, SlotOutcome } from './scheduler.ts';
export { createFixedTiming, createSimTiming, jitter, loadScale, MAX_JITTER_FRACTION, playTokens } from './timing.ts';
export type {
  FixedTimingOptions,
  PlayOutcome,
  SimTimingModel,
  SimTimingOptions,
  TimingInput,
  TokenSchedule,
} from './timing.ts';
export { BLOCK_SIZE, blockHashes, PrefixCache } from './prefix-cache.ts';
export type { PrefixCacheTotals } from './prefix-cache.ts';
export { KvUsage } from './kv-usage.ts';
export type { KvHold } from './kv-usage.ts';
export type { FaultTotals, InjectedStatus } from './faults.ts';
export { EMBEDDING_DIMENSIONS } from './text.ts';
export { ENCODING_FORMATS } from './embeddings.ts';
