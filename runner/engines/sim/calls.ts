/**
 * The calls that produce no token stream: `POST /v1/embeddings` and the generic
 * `POST /invoke/:fn`. Both still take a slot, so they load the engine and show in its counters
 * like any other call.
 */
import type { IncomingHttpHeaders, ServerResponse } from 'node:http';
import { admit, resolveModel, type SimCallContext } from './call.ts';
import { invalidRequest, sendError, sendJson } from './http.ts';
import { countTokens, embedText } from './text.ts';
import { playTokens, sleep } from './timing.ts';

/** Serves an embeddings request: one 8-value vector per input, after the prefill time. */
export async function handleEmbeddings(
  ctx: SimCallContext,
  body: Record<string, unknown>,
  res: ServerResponse,
  signal: AbortSignal,
): Promise<void> {
  const model = resolveModel(ctx.options, body);
  if (model.kind === 'bad') {
    sendError(res, model.error);
    return;
  }
  const { input } = body;
  const inputs = typeof input === 'string' ? [input] : input;
  if (!Array.isArray(inputs) || inputs.length === 0 || !inputs.every((item) => typeof item === 'string')) {
    sendError(res, invalidRequest('input must be a string or a non-empty array of strings', 'input'));
    return;
  }
  const texts = inputs as string[];
  const promptTokens = texts.reduce((sum, text) => sum + countTokens(text), 0);
  const release = await admit(ctx, res, signal);
  if (release === undefined) return;
  let completed = false;
  try {
    // Embedding is one forward pass: the prefill delay alone, which the timing model owns.
    // No prefix cache: pooling models in vLLM usually run without it.
    const prefill = ctx.timing.plan({ promptTokens, outputTokens: 1, running: ctx.scheduler.running }).delayBefore(0);
    if (!(await sleep(prefill, signal))) return;
    sendJson(res, 200, {
      object: 'list',
      data: texts.map((text, index) => ({ object: 'embedding', index, embedding: embedText(text) })),
      model: model.model,
      usage: { prompt_tokens: promptTokens, total_tokens: promptTokens },
    });
    completed = true;
  } finally {
    release(completed ? 'completed' : 'aborted');
  }
}

/**
 * Serves a generic function call: holds a slot for as long as a default-length generation with an
 * empty prompt (prefill overhead, then outputTokens inter-token gaps, each slowed by the load at
 * the time), then describes the body it got, so a test can check what the gateway forwarded
 * without the engine caring what the body means.
 */
export async function handleInvoke(
  ctx: SimCallContext,
  fn: string,
  headers: IncomingHttpHeaders,
  body: Buffer,
  res: ServerResponse,
  signal: AbortSignal,
): Promise<void> {
  const release = await admit(ctx, res, signal);
  if (release === undefined) return;
  let completed = false;
  try {
    // outputTokens + 1 steps: the prefill, then one gap per output token, as before the model had load.
    const schedule = ctx.timing.plan({ promptTokens: 0, outputTokens: ctx.options.outputTokens + 1, running: () => ctx.scheduler.running });
    if ((await playTokens(schedule, () => undefined, signal)) === 'aborted') return;
    sendJson(res, 200, { fn, bytes: body.length, contentType: headers['content-type'] ?? null });
    completed = true;
  } finally {
    release(completed ? 'completed' : 'aborted');
  }
}
