/**
 * `POST /v1/embeddings`, as vLLM serves it for an embedding model: input as text or token ids,
 * one or many; `encoding_format` float or base64 (the OpenAI SDK asks for base64 unless told
 * otherwise, and decodes whatever comes back as base64); `dimensions` cut as a matryoshka model
 * cuts; and a usage block. The call takes a slot and one prefill time, like any other.
 */
import type { ServerResponse } from 'node:http';
import { admit, createdAt, newId, resolveModel, type SimCallContext } from './call.ts';
import { optionalChoice, optionalInteger } from './fields.ts';
import { sendError, sendJson } from './http.ts';
import { badRequest, schemaError, type ApiError } from './refusals.ts';
import { countTokens, EMBEDDING_DIMENSIONS, embeddingToBase64, embedText } from './text.ts';
import { sleep } from './timing.ts';

/** The encodings the simulator can answer in; vLLM's newer binary ones are refused. */
export const ENCODING_FORMATS = ['float', 'base64'] as const;

/** One input to embed: the text its vector is derived from, and its length in tokens. */
interface EmbeddingInput {
  readonly text: string;
  readonly tokens: number;
}

interface EmbeddingRequest {
  readonly model: string;
  readonly inputs: readonly EmbeddingInput[];
  readonly encoding: (typeof ENCODING_FORMATS)[number];
  readonly dimensions: number;
}

const SHAPES = 'a string, a list of strings, a list of token ids or a list of token-id lists';

/** A list of token ids as one input; a token id is a non-negative integer. */
function tokenIds(ids: readonly unknown[]): EmbeddingInput | ApiError {
  for (const id of ids) {
    if (typeof id !== 'number' || !Number.isSafeInteger(id)) {
      return schemaError({ field: 'input', kind: 'int_type', msg: `Input should be ${SHAPES}`, input: id });
    }
    if (id < 0) return badRequest(`Token id ${id} is out of vocabulary`, 'input');
  }
  if (ids.length === 0) return badRequest('input must not hold an empty list of token ids', 'input');
  // Ids become space-separated numbers, as completions prompts do, so each id counts as one token.
  return { text: ids.join(' '), tokens: ids.length };
}

/** The four shapes of `input` vLLM accepts, each read into inputs. */
function readInputs(input: unknown): readonly EmbeddingInput[] | ApiError {
  if (typeof input === 'string') return [{ text: input, tokens: countTokens(input) }];
  if (!Array.isArray(input))
    return schemaError({ field: 'input', kind: 'union_type', msg: `Input should be ${SHAPES}`, input });
  if (input.length === 0) return badRequest('input must hold at least one item', 'input');
  if (input.every((item) => typeof item === 'string'))
    return input.map((text: string) => ({ text, tokens: countTokens(text) }));
  if (input.every((item) => typeof item === 'number')) {
    const one = tokenIds(input);
    return 'status' in one ? one : [one];
  }
  if (input.every((item) => Array.isArray(item))) {
    const inputs: EmbeddingInput[] = [];
    for (const ids of input as unknown[][]) {
      const one = tokenIds(ids);
      if ('status' in one) return one;
      inputs.push(one);
    }
    return inputs;
  }
  return schemaError({ field: 'input', kind: 'union_type', msg: `Input should be ${SHAPES}`, input });
}

/** Reads and checks an embeddings request as vLLM would, or returns the refusal. */
function readEmbeddingRequest(ctx: SimCallContext, body: Record<string, unknown>): EmbeddingRequest | ApiError {
  const model = resolveModel(ctx.options, body);
  if (model.kind === 'bad') return model.error;
  const encoding = optionalChoice(body, 'encoding_format', ENCODING_FORMATS);
  if (encoding.kind === 'bad') return encoding.error;
  const dimensions = optionalInteger(body, 'dimensions');
  if (dimensions.kind === 'bad') return dimensions.error;
  // vLLM's wording for the lower bound; the upper bound is the model's own length.
  if (dimensions.value !== undefined && dimensions.value < 1)
    return badRequest('Dimensions must be greater than 0', 'dimensions');
  if (dimensions.value !== undefined && dimensions.value > EMBEDDING_DIMENSIONS) {
    return badRequest(
      `Model "${model.model}" has ${EMBEDDING_DIMENSIONS} dimensions; dimensions must be at most ${EMBEDDING_DIMENSIONS}, got ${dimensions.value}`,
      'dimensions',
    );
  }
  const inputs = readInputs(body.input);
  if ('status' in inputs) return inputs;
  return {
    model: model.model,
    inputs,
    encoding: encoding.value ?? 'float',
    dimensions: dimensions.value ?? EMBEDDING_DIMENSIONS,
  };
}

/** Serves an embeddings request: one vector per input, after one prefill time for all of them. */
export async function handleEmbeddings(
  ctx: SimCallContext,
  body: Record<string, unknown>,
  res: ServerResponse,
  signal: AbortSignal,
): Promise<void> {
  const request = readEmbeddingRequest(ctx, body);
  if ('status' in request) {
    sendError(res, request);
    return;
  }
  const promptTokens = request.inputs.reduce((sum, input) => sum + input.tokens, 0);
  const release = await admit(ctx, res, signal);
  if (release === undefined) return;
  let completed = false;
  try {
    // Embedding is one forward pass: the prefill delay alone, which the timing model owns.
    // No prefix cache: pooling models in vLLM usually run without it.
    const prefill = ctx.timing.plan({ promptTokens, outputTokens: 1, running: ctx.scheduler.running }).delayBefore(0);
    if (!(await sleep(prefill, signal))) return;
    sendJson(res, 200, {
      id: newId('embd', ctx.options.random),
      object: 'list',
      created: createdAt(ctx.options),
      model: request.model,
      data: request.inputs.map((input, index) => {
        const vector = embedText(input.text, request.dimensions);
        return {
          index,
          object: 'embedding',
          embedding: request.encoding === 'base64' ? embeddingToBase64(vector) : vector,
        };
      }),
      usage: { prompt_tokens: promptTokens, total_tokens: promptTokens },
    });
    completed = true;
  } finally {
    release(completed ? 'completed' : 'aborted');
  }
}
