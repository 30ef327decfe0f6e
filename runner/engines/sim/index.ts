/**
 * The simulated inference engine: a stand-in for vLLM on machines without a GPU. It speaks
 * vLLM's OpenAI-compatible HTTP (chat, completions, embeddings, models, health, metrics), plus
 * `POST /invoke/:fn` for the gateway's generic calls.
 *
 * @example
 * const engine = createSimEngine({ ttftMs: 30, itlMs: 10, maxNumSeqs: 4 });
 * const { url } = await engine.listen();
 * // ... point a runner at `url` ...
 * await engine.close();
 */
export { createSimEngine, ENGINE_ID_HEADER } from './server.ts';
export type { SimEngine, SimEngineAddress, SimEngineStats } from './server.ts';
export { runSimEngineCommand } from './main.ts';
export type { SimEngineCommandOptions } from './main.ts';
export { resolveSimEngineOptions } from './options.ts';
export type { ResolvedSimEngineOptions, SimClock, SimEngineOptions } from './options.ts';
export { SimAbortedError, SimOptionError, SimQueueFullError } from './errors.ts';
export { SimScheduler } from './scheduler.ts';
export type { Release, SchedulerTotals, SimSchedulerLimits, SlotOutcome } from './scheduler.ts';
export { createFixedTiming, playTokens } from './timing.ts';
export type { FixedTimingOptions, PlayOutcome, SimTimingModel, TimingInput, TokenSchedule } from './timing.ts';
