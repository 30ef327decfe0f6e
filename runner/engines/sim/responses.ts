/**
 * `POST /v1/responses`, OpenAI's Responses API as vLLM serves it for text: `input` (a string, or
 * a list of messages), `instructions` (a system message before them), `max_output_tokens`, and
 * `stream`. The answer is one `response` object, or a stream of typed server-sent events from
 * `response.created` to `response.completed` (`response.incomplete` when `max_output_tokens` cut
 * it), usage in the last. The prompt renders as the chat call it stands for, so a conversation
 * keeps its cached prefix whichever of the two routes it takes.
 */
import type { ServerResponse } from 'node:http';
import { createdAt, newId, resolveModel, type SimCallContext } from './call.ts';
import { optionalBoolean, optionalInteger } from './fields.ts';
import { plannedHandler, writersFor, type JsonHandler, type Plan, type Run } from './generate.ts';
import { sendJson } from './http.ts';
import { badRequest, schemaError, type ApiError } from './refusals.ts';
import type { SlotOutcome } from './scheduler.ts';
import { renderChatPrompt } from './text.ts';

/** The messages a Responses body stands for: `instructions` as the system message, then `input`. */
function messagesOf(body: Record<string, unknown>): unknown[] | ApiError {
  const { input, instructions } = body;
  if (instructions !== undefined && instructions !== null && typeof instructions !== 'string')
    return schemaError({
      field: 'instructions',
      kind: 'string_type',
      msg: 'Input should be a valid string',
      input: instructions,
    });
  const messages: unknown[] = typeof instructions === 'string' ? [{ role: 'system', content: instructions }] : [];
  if (typeof input === 'string') messages.push({ role: 'user', content: input });
  else if (Array.isArray(input)) {
    // Items without a role (tool calls and their outputs) carry no text for a text-only model.
    for (const item of input) if (typeof item === 'object' && item !== null && 'role' in item) messages.push(item);
  } else
    return input === undefined
      ? schemaError({ field: 'input', kind: 'missing', msg: 'Field required', input: body })
      : schemaError({ field: 'input', kind: 'union_type', msg: 'Input should be a string or a list', input });
  if (messages.length === 0) return badRequest('input must hold at least one message', 'input');
  return messages;
}

/** The plan of a Responses body, or the refusal to answer with. */
function planResponse(ctx: SimCallContext, body: Record<string, unknown>): Plan | ApiError {
  const model = resolveModel(ctx.options, body);
  if (model.kind === 'bad') return model.error;
  const messages = messagesOf(body);
  if (!Array.isArray(messages)) return messages;
  const limit = optionalInteger(body, 'max_output_tokens');
  if (limit.kind === 'bad') return limit.error;
  if (limit.value !== undefined && limit.value < 1)
    return badRequest(`max_output_tokens must be at least 1, got ${limit.value}.`, 'max_output_tokens');
  const stream = optionalBoolean(body, 'stream');
  if (stream.kind === 'bad') return stream.error;
  const prompt = renderChatPrompt(messages);
  const natural = ctx.options.outputTokens;
  const tokens = limit.value === undefined ? natural : Math.min(limit.value, natural);
  return {
    model: model.model,
    prompt,
    blocks: ctx.namer.blocksOf(prompt),
    tokens,
    choices: 1,
    finishReason: limit.value !== undefined && tokens === limit.value ? 'length' : 'stop',
    stream: stream.value === true,
    includeUsage: true,
  };
}

/** The handler of Responses requests. */
export function responsesHandler(ctx: SimCallContext): JsonHandler {
  return plannedHandler(
    ctx,
    (body) => planResponse(ctx, body),
    (plan, body, res) => {
      const shape = new ResponseShape(ctx, plan, body);
      return (run) => (plan.stream ? streamResponse : answerResponse)(shape, res, run);
    },
  );
}

/** The Responses API's usage block. */
interface ResponsesUsage {
  readonly input_tokens: number;
  readonly output_tokens: number;
  readonly total_tokens: number;
  readonly output_tokens_details: { readonly reasoning_tokens: number };
  readonly input_tokens_details?: { readonly cached_tokens: number };
}

/** The fields of one answer's `response` object and its message item, as it stands at each event. */
class ResponseShape {
  readonly #ctx: SimCallContext;
  readonly #plan: Plan;
  readonly #head: Record<string, unknown>;
  readonly itemId: string;

  constructor(ctx: SimCallContext, plan: Plan, body: Record<string, unknown>) {
    this.#ctx = ctx;
    this.#plan = plan;
    const { random } = ctx.options;
    // OpenAI's Responses ids join prefix and digits with an underscore (`resp_...`, `msg_...`).
    this.itemId = newId('msg', random).replace('-', '_');
    this.#head = {
      id: newId('resp', random).replace('-', '_'),
      object: 'response',
      created_at: createdAt(ctx.options),
      model: plan.model,
      instructions: typeof body.instructions === 'string' ? body.instructions : null,
      max_output_tokens: typeof body.max_output_tokens === 'number' ? body.max_output_tokens : null,
      parallel_tool_calls: true,
      previous_response_id: null,
      temperature: typeof body.temperature === 'number' ? body.temperature : 1,
      top_p: typeof body.top_p === 'number' ? body.top_p : 1,
      tool_choice: 'auto',
      tools: [],
      text: { format: { type: 'text' } },
      truncation: 'disabled',
      metadata: {},
    };
  }

  /** Writes the answer's token at each index: the same words a chat call's first choice gets. */
  writer(): (index: number) => string {
    return writersFor(this.#plan)[0]!;
  }

  /** Whether `max_output_tokens` cut the answer short. */
  get cut(): boolean {
    return this.#plan.finishReason === 'length';
  }

  /** The message item holding `text`; `done` once the answer is whole. */
  item(text: string | undefined, done: boolean): Record<string, unknown> {
    return {
      type: 'message',
      id: this.itemId,
      status: done ? (this.cut ? 'incomplete' : 'completed') : 'in_progress',
      role: 'assistant',
      content: text === undefined ? [] : [this.part(text)],
    };
  }

  /** The output text part holding `text`. */
  part(text: string): Record<string, unknown> {
    return { type: 'output_text', text, annotations: [] };
  }

  /** The response in progress, before any output. */
  started(): Record<string, unknown> {
    return { ...this.#head, status: 'in_progress', error: null, incomplete_details: null, output: [], usage: null };
  }

  /** The finished response holding `text`, with its usage. */
  finished(text: string, cachedTokens: number): Record<string, unknown> {
    return {
      ...this.#head,
      status: this.cut ? 'incomplete' : 'completed',
      error: null,
      incomplete_details: this.cut ? { reason: 'max_output_tokens' } : null,
      output: [this.item(text, true)],
      usage: this.#usage(cachedTokens),
    };
  }

  #usage(cachedTokens: number): ResponsesUsage {
    const input = this.#plan.blocks.tokenIds.length;
    return {
      input_tokens: input,
      output_tokens: this.#plan.tokens,
      total_tokens: input + this.#plan.tokens,
      output_tokens_details: { reasoning_tokens: 0 },
      ...(this.#ctx.options.enablePromptTokensDetails ? { input_tokens_details: { cached_tokens: cachedTokens } } : {}),
    };
  }
}

/** Answers with the whole `response` object once every token is played. */
async function answerResponse(shape: ResponseShape, res: ServerResponse, run: Run): Promise<SlotOutcome> {
  const write = shape.writer();
  const words: string[] = [];
  const played = await run((index) => words.push(write(index)));
  if (played.outcome === 'aborted') return 'aborted';
  sendJson(res, 200, shape.finished(words.join(''), played.cachedTokens));
  return 'completed';
}

/** Streams the typed events, a `response.output_text.delta` per token as it exists. */
async function streamResponse(shape: ResponseShape, res: ServerResponse, run: Run): Promise<SlotOutcome> {
  let sequence = 0;
  const event = (type: string, fields: Record<string, unknown>): void => {
    res.write(`event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: sequence, ...fields })}\n\n`);
    sequence += 1;
  };
  const at = { item_id: shape.itemId, output_index: 0, content_index: 0 };
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  event('response.created', { response: shape.started() });
  event('response.in_progress', { response: shape.started() });
  event('response.output_item.added', { output_index: 0, item: shape.item(undefined, false) });
  event('response.content_part.added', { ...at, part: shape.part('') });
  const write = shape.writer();
  const words: string[] = [];
  const played = await run((index) => {
    const delta = write(index);
    words.push(delta);
    event('response.output_text.delta', { ...at, delta, logprobs: [] });
  });
  if (played.outcome === 'aborted') return 'aborted';
  const text = words.join('');
  event('response.output_text.done', { ...at, text, logprobs: [] });
  event('response.content_part.done', { ...at, part: shape.part(text) });
  event('response.output_item.done', { output_index: 0, item: shape.item(text, true) });
  const finished = shape.finished(text, played.cachedTokens);
  event(shape.cut ? 'response.incomplete' : 'response.completed', { response: finished });
  res.end();
  return 'completed';
}
