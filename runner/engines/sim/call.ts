/**
 * What every call handler shares: the engine's parts, model resolution and admission. Handlers
 * get a context object rather than the engine so that they stay plain functions, testable alone.
 */
import type { ServerResponse } from 'node:http';
import { SimQueueFullError } from './errors.ts';
import { sendError, type ApiError } from './http.ts';
import type { ResolvedSimEngineOptions } from './options.ts';
import type { Release, SimScheduler } from './scheduler.ts';
import type { SimTimingModel } from './timing.ts';

/** The engine's parts a call handler uses. */
export interface SimCallContext {
  readonly options: ResolvedSimEngineOptions;
  readonly scheduler: SimScheduler;
  readonly timing: SimTimingModel;
}

/**
 * The model a request names, or the first served model when it names none, as vLLM does.
 * An unknown name is a 404 `model_not_found`, OpenAI's answer.
 */
export function resolveModel(
  options: ResolvedSimEngineOptions,
  body: Record<string, unknown>,
): { kind: 'ok'; model: string } | { kind: 'bad'; error: ApiError } {
  const { model } = body;
  if (model === undefined || model === null) return { kind: 'ok', model: options.models[0]! };
  if (typeof model !== 'string') {
    return { kind: 'bad', error: { status: 400, type: 'invalid_request_error', code: 'invalid_value', param: 'model', message: 'model must be a string' } };
  }
  if (!options.models.includes(model)) {
    return {
      kind: 'bad',
      error: { status: 404, type: 'invalid_request_error', code: 'model_not_found', param: 'model', message: `The model \`${model}\` does not exist.` },
    };
  }
  return { kind: 'ok', model };
}

/**
 * Waits for a slot. Answers 429 itself when the queue is full (with `Retry-After: 1`, so a client
 * backs off briefly), and returns undefined then or when the client left while waiting.
 */
export async function admit(ctx: SimCallContext, res: ServerResponse, signal: AbortSignal): Promise<Release | undefined> {
  try {
    return await ctx.scheduler.acquire(signal);
  } catch (error) {
    if (error instanceof SimQueueFullError) {
      sendError(
        res,
        { status: 429, type: 'rate_limit_error', code: 'rate_limit_exceeded', message: `engine queue is full (${ctx.options.maxQueue} waiting); retry later` },
        { 'retry-after': '1' },
      );
      return undefined;
    }
    if (signal.aborted) return undefined;
    throw error;
  }
}

/** An id in OpenAI's style, `<prefix>-<24 hex digits>`, from the injected random source. */
export function newId(prefix: string, random: () => number): string {
  let hex = '';
  for (let i = 0; i < 4; i += 1) hex += Math.floor(random() * 0x1000000).toString(16).padStart(6, '0');
  return `${prefix}-${hex}`;
}

/** OpenAI's `created`: whole seconds since the epoch. */
export function createdAt(options: ResolvedSimEngineOptions): number {
  return Math.floor(options.clock.now() / 1000);
}
