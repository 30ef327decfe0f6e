/**
 * `POST /v1/chat/completions` and `POST /v1/completions`: validate like vLLM, wait for a slot,
 * then produce tokens on the timing model's schedule, either all at once at the end or as
 * server-sent events written the moment each token exists.
 */
import type { ServerResponse } from 'node:http';
import { admit, createdAt, newId, resolveModel, type SimCallContext } from './call.ts';
import { invalidRequest, sendError, sendJson, type ApiError } from './http.ts';
import { blockHashes } from './prefix-cache.ts';
import type { SlotOutcome } from './scheduler.ts';
import { createTokenWriter, renderChatPrompt, renderCompletionPrompt, tokenize } from './text.ts';
import { playTokens, type PlayOutcome } from './timing.ts';

/** Which OpenAI endpoint a request came to. */
export type GenerationKind = 'chat' | 'text';

interface Plan {
  readonly model: string;
  /** The whole rendered prompt: for chat every message's role and content, in order. */
  readonly prompt: string;
  readonly promptTokens: readonly string[];
  readonly tokens: number;
  readonly finishReason: 'length' | 'stop';
  readonly stream: boolean;
  readonly includeUsage: boolean;
}

function optionalLimit(body: Record<string, unknown>, name: string): number | undefined | ApiError {
  const value = body[name];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1) {
    return invalidRequest(`${name} must be a positive integer, got ${JSON.stringify(value)}`, name);
  }
  return value;
}

function planRequest(ctx: SimCallContext, kind: GenerationKind, body: Record<string, unknown>): Plan | ApiError {
  const model = resolveModel(ctx.options, body);
  if (model.kind === 'bad') return model.error;
  let prompt: string | undefined;
  if (kind === 'chat') {
    if (!Array.isArray(body.messages) || body.messages.length === 0) return invalidRequest('messages must be a non-empty array', 'messages');
    prompt = renderChatPrompt(body.messages);
  } else {
    prompt = renderCompletionPrompt(body.prompt);
    if (prompt === undefined) return invalidRequest('prompt must be a string, an array of strings or an array of token ids', 'prompt');
  }
  // max_completion_tokens is the newer name; vLLM prefers it when both are sent.
  const newer = optionalLimit(body, 'max_completion_tokens');
  if (typeof newer === 'object') return newer;
  const older = optionalLimit(body, 'max_tokens');
  if (typeof older === 'object') return older;
  const limit = newer ?? older;
  if (body.stream !== undefined && body.stream !== null && typeof body.stream !== 'boolean') return invalidRequest('stream must be a boolean', 'stream');
  const stream = body.stream === true;
  const streamOptions = body.stream_options as { include_usage?: unknown } | null | undefined;
  const natural = ctx.options.outputTokens;
  // ignore_eos is vLLM's benchmark switch: the model never stops early, so max_tokens is exact.
  const tokens = limit === undefined ? natural : body.ignore_eos === true ? limit : Math.min(limit, natural);
  return {
    model: model.model,
    prompt,
    promptTokens: tokenize(prompt),
    tokens,
    finishReason: limit !== undefined && tokens === limit ? 'length' : 'stop',
    stream,
    includeUsage: stream && typeof streamOptions === 'object' && streamOptions?.include_usage === true,
  };
}

/** Serves one chat or text completion request whose JSON body is already parsed. */
export async function handleGeneration(
  ctx: SimCallContext,
  kind: GenerationKind,
  body: Record<string, unknown>,
  res: ServerResponse,
  signal: AbortSignal,
): Promise<void> {
  // Time to first token counts from arrival, so the histogram shows the queue wait, as vLLM's does.
  const arrivedAt = performance.now();
  const plan = planRequest(ctx, kind, body);
  if ('status' in plan) {
    sendError(res, plan);
    return;
  }
  const release = await admit(ctx, res, signal);
  if (release === undefined) return;
  let outcome: SlotOutcome = 'aborted';
  try {
    if (signal.aborted) return;
    const run = (onToken: (index: number) => void): Promise<PlayOutcome> => generate(ctx, plan, arrivedAt, onToken, signal);
    outcome = plan.stream ? await streamTokens(ctx, kind, plan, res, run) : await answerOnce(ctx, kind, plan, res, run);
  } finally {
    release(outcome);
  }
}

/** Plays one admitted request's tokens: prefix-cache lookup, KV hold, then the timing model's schedule. */
async function generate(
  ctx: SimCallContext,
  plan: Plan,
  arrivedAt: number,
  onToken: (index: number) => void,
  signal: AbortSignal,
): Promise<PlayOutcome> {
  const promptTokens = plan.promptTokens.length;
  // The lookup happens when prefill starts, as in vLLM's scheduler, and blocks are inserted once
  // computed: a twin prompt admitted after this one's first token hits, one admitted during its
  // prefill does not.
  const hashes = blockHashes(plan.promptTokens);
  const cachedTokens = ctx.prefixCache.lookup(hashes, promptTokens);
  const kv = ctx.kv.hold(promptTokens);
  const schedule = ctx.timing.plan({ promptTokens, cachedTokens, outputTokens: plan.tokens, running: () => ctx.scheduler.running });
  try {
    return await playTokens(
      schedule,
      (index) => {
        if (index === 0) {
          // Blocks are reusable once computed, i.e. when prefill has produced the first token.
          ctx.prefixCache.insert(hashes);
          ctx.ttft.observe((performance.now() - arrivedAt) / 1000);
        }
        kv.grow();
        onToken(index);
      },
      signal,
    );
  } finally {
    kv.release();
  }
}

function usageOf(plan: Plan): { prompt_tokens: number; completion_tokens: number; total_tokens: number } {
  const promptTokens = plan.promptTokens.length;
  return { prompt_tokens: promptTokens, completion_tokens: plan.tokens, total_tokens: promptTokens + plan.tokens };
}

/** Plays the admitted request, calling `onToken` as each token exists; bound to its plan and signal. */
type Run = (onToken: (index: number) => void) => Promise<PlayOutcome>;

async function answerOnce(ctx: SimCallContext, kind: GenerationKind, plan: Plan, res: ServerResponse, run: Run): Promise<SlotOutcome> {
  const write = createTokenWriter(plan.prompt);
  const parts: string[] = [];
  if ((await run((index) => parts.push(write(index)))) === 'aborted') return 'aborted';
  const text = parts.join('');
  const choice =
    kind === 'chat'
      ? { index: 0, message: { role: 'assistant', content: text }, logprobs: null, finish_reason: plan.finishReason }
      : { index: 0, text, logprobs: null, finish_reason: plan.finishReason };
  sendJson(res, 200, {
    id: newId(kind === 'chat' ? 'chatcmpl' : 'cmpl', ctx.options.random),
    object: kind === 'chat' ? 'chat.completion' : 'text_completion',
    created: createdAt(ctx.options),
    model: plan.model,
    choices: [choice],
    usage: usageOf(plan),
  });
  return 'completed';
}

async function streamTokens(ctx: SimCallContext, kind: GenerationKind, plan: Plan, res: ServerResponse, run: Run): Promise<SlotOutcome> {
  const head = {
    id: newId(kind === 'chat' ? 'chatcmpl' : 'cmpl', ctx.options.random),
    object: kind === 'chat' ? 'chat.completion.chunk' : 'text_completion',
    created: createdAt(ctx.options),
    model: plan.model,
  };
  // OpenAI sends `usage: null` on every chunk but the last when usage was asked for.
  const tail = plan.includeUsage ? { usage: null } : {};
  const event = (choice: Record<string, unknown>): string =>
    `data: ${JSON.stringify({ ...head, choices: [{ index: 0, ...choice, logprobs: null }], ...tail })}\n\n`;
  // Headers go out after admission, so a full queue can still be a 429 and a queued wait shows
  // in the time to first byte, where a gateway measuring the engine can see it.
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  res.flushHeaders();
  const write = createTokenWriter(plan.prompt);
  const outcome = await run((index) => {
    const text = write(index);
    const delta = index === 0 ? { role: 'assistant', content: text } : { content: text };
    res.write(event(kind === 'chat' ? { delta, finish_reason: null } : { text, finish_reason: null }));
  });
  if (outcome === 'aborted') return 'aborted';
  res.write(event(kind === 'chat' ? { delta: {}, finish_reason: plan.finishReason } : { text: '', finish_reason: plan.finishReason }));
  if (plan.includeUsage) res.write(`data: ${JSON.stringify({ ...head, choices: [], usage: usageOf(plan) })}\n\n`);
  res.end('data: [DONE]\n\n');
  return 'completed';
}
