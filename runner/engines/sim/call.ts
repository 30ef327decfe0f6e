/**
 * What every call handler shares: the engine's parts, model resolution and admission. Handlers
 * get a context object rather than the engine so that they stay plain functions, testable alone.
 */
import type { ServerResponse } from 'node:http';
import { SimQueueFullError } from './errors.ts';
import type { SimFaults } from './faults.ts';
import { sendError } from './http.ts';
import type { KvUsage } from './kv-usage.ts';
import type { TtftHistogram } from './metrics.ts';
import type { ResolvedSimEngineOptions } from './options.ts';
import type { SimKvEvents } from './kv-events.ts';
import type { PrefixCache, SimBlockNamer } from './prefix-cache.ts';
import { notFound, refusal, schemaError, type ApiError } from './refusals.ts';
import type { Release, SimScheduler } from './scheduler.ts';
import type { SimTimingModel } from './timing.ts';

/** The engine's parts a call handler uses. */
export interface SimCallContext {
  readonly options: ResolvedSimEngineOptions;
  readonly scheduler: SimScheduler;
  readonly timing: SimTimingModel;
  readonly prefixCache: PrefixCache;
  /** Names a prompt's blocks as the cache and the events do. */
  readonly namer: SimBlockNamer;
  /** Where the cache's changes are told (vLLM's KV events). */
  readonly events: SimKvEvents;
  readonly kv: KvUsage;
  readonly faults: SimFaults;
  readonly ttft: TtftHistogram;
}

/**
 * The model a request names, or the first served model when it names none, as vLLM does.
 * An unknown name is vLLM's 404 `NotFoundError`, "The model `x` does not exist.".
 */
export function resolveModel(
  options: ResolvedSimEngineOptions,
  body: Record<string, unknown>,
): { kind: 'ok'; model: string } | { kind: 'bad'; error: ApiError } {
  const { model } = body;
  if (model === undefined || model === null) return { kind: 'ok', model: options.models[0]! };
  if (typeof model !== 'string') {
    return {
      kind: 'bad',
      error: schemaError({ field: 'model', kind: 'string_type', msg: 'Input should be a valid string', input: model }),
    };
  }
  if (!options.models.includes(model))
    return { kind: 'bad', error: notFound(`The model \`${model}\` does not exist.`, 'model') };
  return { kind: 'ok', model };
}

/**
 * Waits for a slot. Answers itself, and returns undefined, when fault injection refuses the call
 * (drawn first, so it never holds a slot or a queue place) or when the queue is full (429 with
 * `Retry-After: 1`, so a client backs off briefly); returns undefined too when the client left
 * while waiting.
 */
export async function admit(
  ctx: SimCallContext,
  res: ServerResponse,
  signal: AbortSignal,
): Promise<Release | undefined> {
  const failure = ctx.faults.drawFailure();
  if (failure !== undefined) {
    sendError(res, failure.error, failure.headers);
    return undefined;
  }
  try {
    return await ctx.scheduler.acquire(signal);
  } catch (error) {
    if (error instanceof SimQueueFullError) {
      sendError(res, refusal(429, `engine queue is full (${ctx.options.maxQueue} waiting); retry later`), {
        'retry-after': '1',
      });
      return undefined;
    }
    if (signal.aborted) return undefined;
    throw error;
  }
}

/** An id in OpenAI's style, `<prefix>-<24 hex digits>`, from the injected random source. */
export function newId(prefix: string, random: () => number): string {
  let hex = '';
  for (let i = 0; i < 4; i += 1)
    hex += Math.floor(random() * 0x1000000)
      .toString(16)
      .padStart(6, '0');
  return `${prefix}-${hex}`;
}

/** OpenAI's `created`: whole seconds since the epoch. */
export function createdAt(options: ResolvedSimEngineOptions): number {
  return Math.floor(options.clock.now() / 1000);
}
