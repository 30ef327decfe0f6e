/**
 * `POST /v1/chat/completions` and `POST /v1/completions`: validate like vLLM, wait for a slot,
 * then produce tokens on the timing model's schedule, either all at once at the end or as
 * server-sent events written the moment each token exists.
 */
import type { ServerResponse } from 'node:http';
import { admit, createdAt, newId, resolveModel, type SimCallContext } from './call.ts';
import { optionalBoolean, optionalInteger, type FieldResult } from './fields.ts';
import { sendError, sendJson } from './http.ts';
import type { PromptBlocks } from './prefix-cache.ts';
import { badRequest, schemaError, type ApiError } from './refusals.ts';
import type { SlotOutcome } from './scheduler.ts';
import { createTokenWriter, renderChatPrompt, renderCompletionPrompt } from './text.ts';
import { playTokens, type PlayOutcome } from './timing.ts';

/** Which OpenAI endpoint a request came to. */
export type GenerationKind = 'chat' | 'text';

/** What one generation request asks for, checked: every route that generates text plans one. */
export interface Plan {
  readonly model: string;
  /** The whole rendered prompt: for chat every message's role and content, in order. */
  readonly prompt: string;
  /** The prompt's token ids and block hashes, as the prefix cache names them. */
  readonly blocks: PromptBlocks;
  /** Tokens each choice produces. */
  readonly tokens: number;
  /** Choices to produce (`n`), decoded side by side. */
  readonly choices: number;
  readonly finishReason: 'length' | 'stop';
  readonly stream: boolean;
  readonly includeUsage: boolean;
}

/** `max_tokens` or `max_completion_tokens`: an integer of at least 1, in vLLM's words. */
function optionalLimit(body: Record<string, unknown>, name: string): FieldResult<number | undefined> {
  const limit = optionalInteger(body, name);
  if (limit.kind === 'ok' && limit.value !== undefined && limit.value < 1) {
    return { kind: 'bad', error: badRequest(`${name} must be at least 1, got ${limit.value}.`, name) };
  }
  return limit;
}

/**
 * `n`, checked as vLLM checks it, plus the simulator's own bound: the choices decode side by
 * side in one batch, so there can be no more of them than the batch holds (`maxNumSeqs`).
 */
function readChoices(ctx: SimCallContext, body: Record<string, unknown>): FieldResult<number> {
  const n = optionalInteger(body, 'n');
  if (n.kind === 'bad') return n;
  const value = n.value ?? 1;
  if (value < 1) return { kind: 'bad', error: badRequest(`n must be at least 1, got ${value}.`, 'n') };
  const most = ctx.options.maxNumSeqs;
  if (value > most)
    return {
      kind: 'bad',
      error: badRequest(`n must be at most ${most} (the engine's max-num-seqs), got ${value}.`, 'n'),
    };
  const bestOf = optionalInteger(body, 'best_of');
  if (bestOf.kind === 'bad') return bestOf;
  // vLLM's V1 engine, the one in use today, refuses best_of outright.
  if (bestOf.value !== undefined && bestOf.value > 1)
    return { kind: 'bad', error: badRequest('vLLM V1 does not yet support best_of.', 'best_of') };
  if (bestOf.value !== undefined && bestOf.value < value) {
    return {
      kind: 'bad',
      error: badRequest(
        `best_of must be greater than or equal to n, got n=${value} and best_of=${bestOf.value}.`,
        'best_of',
      ),
    };
  }
  return { kind: 'ok', value };
}

/**
 * Whether a streamed answer ends with a usage chunk. vLLM reads `stream_options` as an object
 * whose `include_usage` defaults to true, and refuses it on a request that does not stream.
 */
function readIncludeUsage(body: Record<string, unknown>, stream: boolean): FieldResult<boolean> {
  const options = body.stream_options;
  if (options === undefined || options === null) return { kind: 'ok', value: false };
  if (typeof options !== 'object' || Array.isArray(options)) {
    return {
      kind: 'bad',
      error: schemaError({
        field: 'stream_options',
        kind: 'model_type',
        msg: 'Input should be a valid dictionary or instance of StreamOptions',
        input: options,
      }),
    };
  }
  const fields = options as Record<string, unknown>;
  // Python's truthiness: an empty object does not count as given.
  if (!stream && Object.keys(fields).length > 0) {
    return {
      kind: 'bad',
      error: schemaError({
        kind: 'value_error',
        msg: 'Value error, Stream options can only be defined when `stream=True`.',
        input: body,
        param: 'stream_options',
      }),
    };
  }
  const include = fields.include_usage;
  if (include !== undefined && include !== null && typeof include !== 'boolean') {
    return {
      kind: 'bad',
      error: schemaError({
        field: 'stream_options.include_usage',
        kind: 'bool_type',
        msg: 'Input should be a valid boolean',
        input: include,
      }),
    };
  }
  return { kind: 'ok', value: stream && include !== false && include !== null };
}

function planRequest(ctx: SimCallContext, kind: GenerationKind, body: Record<string, unknown>): Plan | ApiError {
  const model = resolveModel(ctx.options, body);
  if (model.kind === 'bad') return model.error;
  let prompt: string | undefined;
  if (kind === 'chat') {
    if (!Array.isArray(body.messages)) {
      return body.messages === undefined
        ? schemaError({ field: 'messages', kind: 'missing', msg: 'Field required', input: body })
        : schemaError({
            field: 'messages',
            kind: 'list_type',
            msg: 'Input should be a valid list',
            input: body.messages,
          });
    }
    if (body.messages.length === 0) return badRequest('messages must be a non-empty array', 'messages');
    prompt = renderChatPrompt(body.messages);
  } else {
    prompt = renderCompletionPrompt(body.prompt);
    if (prompt === undefined) {
      return schemaError({
        field: 'prompt',
        kind: 'union_type',
        msg: 'Input should be a string, a list of strings, a list of token ids or a list of token-id lists',
        input: body.prompt,
      });
    }
  }
  // max_completion_tokens is the newer name; vLLM prefers it when both are sent.
  const newer = optionalLimit(body, 'max_completion_tokens');
  if (newer.kind === 'bad') return newer.error;
  const older = optionalLimit(body, 'max_tokens');
  if (older.kind === 'bad') return older.error;
  const limit = newer.value ?? older.value;
  const streamField = optionalBoolean(body, 'stream');
  if (streamField.kind === 'bad') return streamField.error;
  const stream = streamField.value === true;
  const includeUsage = readIncludeUsage(body, stream);
  if (includeUsage.kind === 'bad') return includeUsage.error;
  const choices = readChoices(ctx, body);
  if (choices.kind === 'bad') return choices.error;
  const natural = ctx.options.outputTokens;
  // ignore_eos is vLLM's benchmark switch: the model never stops early, so max_tokens is exact.
  const tokens = limit === undefined ? natural : body.ignore_eos === true ? limit : Math.min(limit, natural);
  return {
    model: model.model,
    prompt,
    blocks: ctx.namer.blocksOf(prompt),
    tokens,
    choices: choices.value,
    finishReason: limit !== undefined && tokens === limit ? 'length' : 'stop',
    stream,
    includeUsage: includeUsage.value,
  };
}

/** Serves one request whose JSON body is already parsed. */
export type JsonHandler = (body: Record<string, unknown>, res: ServerResponse, signal: AbortSignal) => Promise<void>;

/** The handler of chat (`kind` chat) or text completion (`kind` text) requests. */
export function generationHandler(ctx: SimCallContext, kind: GenerationKind): JsonHandler {
  return plannedHandler(
    ctx,
    (body) => planRequest(ctx, kind, body),
    (plan, _body, res) => (run) => (plan.stream ? streamTokens : answerOnce)(ctx, kind, plan, res, run),
  );
}

/**
 * A handler that plans each request with `planOf` (answering its refusal, if any), then admits
 * it, plays it and lets the responder `respondTo` made for the plan before admission write the
 * answer as it plays; the slot is released with the outcome the responder returns. Time to first
 * token counts from arrival, before planning, so the histogram shows the queue wait, as vLLM's does.
 */
export function plannedHandler(
  ctx: SimCallContext,
  planOf: (body: Record<string, unknown>) => Plan | ApiError,
  respondTo: (plan: Plan, body: Record<string, unknown>, res: ServerResponse) => (run: Run) => Promise<SlotOutcome>,
): JsonHandler {
  return async (body, res, signal) => {
    const arrivedAt = performance.now();
    const plan = planOf(body);
    if ('status' in plan) {
      sendError(res, plan);
      return;
    }
    const respond = respondTo(plan, body, res);
    const release = await admit(ctx, res, signal);
    if (release === undefined) return;
    let outcome: SlotOutcome = 'aborted';
    try {
      if (signal.aborted) return;
      outcome = await respond((onToken) => generate(ctx, plan, arrivedAt, onToken, signal));
    } finally {
      release(outcome);
    }
  };
}

/** How one admitted request played out: its outcome and the prompt tokens the cache served. */
export interface Played {
  readonly outcome: PlayOutcome;
  readonly cachedTokens: number;
}

/**
 * Plays one admitted request's tokens: prefix-cache lookup, KV hold, then the timing model's
 * schedule. The `n` choices share the prompt's prefill and decode side by side, one token each
 * per step, as vLLM's parallel sampling runs them; each holds its own KV blocks for what it generates.
 */
async function generate(
  ctx: SimCallContext,
  plan: Plan,
  arrivedAt: number,
  onToken: (index: number) => void,
  signal: AbortSignal,
): Promise<Played> {
  const { blocks } = plan;
  const promptTokens = blocks.tokenIds.length;
  // The lookup happens when prefill starts, as in vLLM's scheduler, and blocks are inserted once
  // computed: a twin prompt admitted after this one's first token hits, one admitted during its
  // prefill does not.
  const cachedTokens = ctx.prefixCache.lookup(blocks.keys, promptTokens);
  // The prompt's blocks are held once: the choices share them through the prefix cache.
  const holds = Array.from({ length: plan.choices }, (_, choice) => ctx.kv.hold(choice === 0 ? promptTokens : 0));
  const schedule = ctx.timing.plan({
    promptTokens,
    cachedTokens,
    outputTokens: plan.tokens,
    running: () => ctx.scheduler.running,
  });
  try {
    const outcome = await playTokens(
      schedule,
      (index) => {
        if (index === 0) {
          // Blocks are reusable once computed, i.e. when prefill has produced the first token.
          storeBlocks(ctx, blocks);
          ctx.ttft.observe((performance.now() - arrivedAt) / 1000);
        }
        for (const hold of holds) hold.grow();
        onToken(index);
      },
      signal,
    );
    return { outcome, cachedTokens };
  } finally {
    for (const hold of holds) hold.release();
  }
}

/**
 * Inserts a computed prompt's blocks into the cache and tells the newly stored ones, a
 * BlockStored event per run of consecutive blocks (vLLM tells each request's newly cached
 * blocks with the hash of the block before them, null at the prompt's start).
 */
function storeBlocks(ctx: SimCallContext, blocks: PromptBlocks): void {
  const { blockSize } = ctx.options;
  // A block the same insert evicted again (a cache smaller than the prompt) is not told as stored.
  const added = ctx.prefixCache.insert(blocks.keys).filter((index) => ctx.prefixCache.has(blocks.keys[index]!));
  let start = 0;
  while (start < added.length) {
    let end = start + 1;
    while (end < added.length && added[end] === added[end - 1]! + 1) end += 1;
    const first = added[start]!;
    const last = added[end - 1]!;
    ctx.events.stored({
      hashes: blocks.hashes.slice(first, last + 1),
      parent: first === 0 ? null : blocks.hashes[first - 1]!,
      tokenIds: blocks.tokenIds.slice(first * blockSize, (last + 1) * blockSize),
      blockSize,
    });
    start = end;
  }
}

/** OpenAI's usage block. */
interface Usage {
  readonly prompt_tokens: number;
  readonly completion_tokens: number;
  readonly total_tokens: number;
  readonly prompt_tokens_details?: { readonly cached_tokens: number };
}

/**
 * Usage over every choice: vLLM counts each choice's tokens as completion tokens. With
 * `enablePromptTokensDetails`, the prompt tokens the prefix cache served, as vLLM reports them.
 */
function usageOf(ctx: SimCallContext, plan: Plan, cachedTokens: number): Usage {
  const promptTokens = plan.blocks.tokenIds.length;
  const completionTokens = plan.tokens * plan.choices;
  return {
    prompt_tokens: promptTokens,
    completion_tokens: completionTokens,
    total_tokens: promptTokens + completionTokens,
    ...(ctx.options.enablePromptTokensDetails ? { prompt_tokens_details: { cached_tokens: cachedTokens } } : {}),
  };
}

/** Plays the admitted request, calling `onToken` as each step's tokens exist; bound to its plan and signal. */
export type Run = (onToken: (index: number) => void) => Promise<Played>;

/** Writes the answer to a played request: whole once it is done, or streamed as it is played. */
type Respond = (
  ctx: SimCallContext,
  kind: GenerationKind,
  plan: Plan,
  res: ServerResponse,
  run: Run,
) => Promise<SlotOutcome>;

/** The fields every answer and every stream chunk opens with; `object` names which it is. */
function headOf(ctx: SimCallContext, kind: GenerationKind, plan: Plan, object: string) {
  return {
    id: newId(kind === 'chat' ? 'chatcmpl' : 'cmpl', ctx.options.random),
    object,
    created: createdAt(ctx.options),
    model: plan.model,
  };
}

/** One token writer per choice, each with its own words. */
export function writersFor(plan: Plan): Array<(index: number) => string> {
  return Array.from({ length: plan.choices }, (_, choice) => createTokenWriter(plan.prompt, choice));
}

const answerOnce: Respond = async (ctx, kind, plan, res, run) => {
  const writers = writersFor(plan);
  const parts: string[][] = writers.map(() => []);
  const played = await run((index) => writers.forEach((write, choice) => parts[choice]!.push(write(index))));
  if (played.outcome === 'aborted') return 'aborted';
  const choices = parts.map((words, index) => {
    const text = words.join('');
    return kind === 'chat'
      ? { index, message: { role: 'assistant', content: text }, logprobs: null, finish_reason: plan.finishReason }
      : { index, text, logprobs: null, finish_reason: plan.finishReason };
  });
  sendJson(res, 200, {
    ...headOf(ctx, kind, plan, kind === 'chat' ? 'chat.completion' : 'text_completion'),
    choices,
    usage: usageOf(ctx, plan, played.cachedTokens),
  });
  return 'completed';
};

const streamTokens: Respond = async (ctx, kind, plan, res, run) => {
  const head = headOf(ctx, kind, plan, kind === 'chat' ? 'chat.completion.chunk' : 'text_completion');
  // OpenAI sends `usage: null` on every chunk but the last when usage was asked for.
  const tail = plan.includeUsage ? { usage: null } : {};
  // One choice per chunk, named by its index, as vLLM streams parallel samples.
  const event = (index: number, choice: Record<string, unknown>): string =>
    `data: ${JSON.stringify({ ...head, choices: [{ index, ...choice, logprobs: null }], ...tail })}\n\n`;
  // Headers go out after admission, so a full queue can still be a 429 and a queued wait shows
  // in the time to first byte, where a gateway measuring the engine can see it.
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  res.flushHeaders();
  const writers = writersFor(plan);
  const played = await run((index) => {
    writers.forEach((write, choice) => {
      const text = write(index);
      const delta = index === 0 ? { role: 'assistant', content: text } : { content: text };
      res.write(event(choice, kind === 'chat' ? { delta, finish_reason: null } : { text, finish_reason: null }));
    });
  });
  if (played.outcome === 'aborted') return 'aborted';
  for (let choice = 0; choice < plan.choices; choice += 1) {
    res.write(
      event(
        choice,
        kind === 'chat'
          ? { delta: {}, finish_reason: plan.finishReason }
          : { text: '', finish_reason: plan.finishReason },
      ),
    );
  }
  if (plan.includeUsage)
    res.write(`data: ${JSON.stringify({ ...head, choices: [], usage: usageOf(ctx, plan, played.cachedTokens) })}\n\n`);
  res.end('data: [DONE]\n\n');
  return 'completed';
};
