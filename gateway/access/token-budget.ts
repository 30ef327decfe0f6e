/**
 * A call's worst case in tokens, for a key with tokensPerMinute: what admission reserves before
 * the engine runs, and what the engine is asked so that its usage can settle the reservation.
 *
 * The output bound is the call's own `max_tokens` (`max_completion_tokens`, `max_output_tokens`
 * on /v1/responses) times its `n`; a call that names none gets the key's default cap written
 * into its body, so the reservation is a bound the engine keeps and not a guess. A streamed
 * chat or text completion that did not ask for `stream_options.include_usage` is sent with it,
 * so its usage is measured like any other call's, and the relay strips the usage the client did
 * not ask for from its stream (usage-strip.ts).
 *
 * Bodies are edited as text where they can be (a field appended before the closing brace), so
 * the rest of the client's JSON reaches the engine byte for byte (a 64-bit seed keeps its
 * digits); only a body whose `stream_options` must change is parsed and written again.
 */
import type { CallRoute, UsageUnasked } from '../http/index.ts';

/**
 * Output tokens a call that names no max_tokens is capped at, when its key sets no
 * defaultMaxTokens: a common default output limit of chat engines. Size a key's own
 * defaultMaxTokens to the longest answer its clients expect; it is also capped at the key's
 * tokensPerMinute, which no call could exceed anyway.
 */
export const DEFAULT_MAX_TOKENS = 4096;

/** What {@link tokenBudget} decided for one call. */
export interface TokenBudget {
  /** The most output tokens the call may produce: its output bound times its choices. */
  readonly outputTokens: number;
  /** The body to send: the client's own, or one with the output cap or the usage request added. */
  readonly body: Buffer;
  /** True when the engine was asked for a usage chunk the client did not ask for. */
  readonly stripUsage: boolean;
}

/** Where each route names its output bound and choices. */
const OUTPUT_FIELDS: Partial<
  Record<CallRoute, { fields: readonly string[]; inject: string; choices: boolean; usage: boolean }>
> = {
  // max_completion_tokens is the newer name; engines prefer it when both are sent.
  chat: { fields: ['max_completion_tokens', 'max_tokens'], inject: 'max_tokens', choices: true, usage: true },
  completions: { fields: ['max_tokens'], inject: 'max_tokens', choices: true, usage: true },
  // A response's stream always ends with its usage (response.completed).
  responses: { fields: ['max_output_tokens'], inject: 'max_output_tokens', choices: false, usage: false },
};

/**
 * The worst case of a call on `route` with `body`, for a key whose tokensPerMinute is `limit`
 * and whose default cap is `defaultMaxTokens` (absent: {@link DEFAULT_MAX_TOKENS}). A body that
 * is not a JSON object is left as it is (the engine answers it), counted at the cap; an
 * embedding produces no output; an /invoke body is read but never changed, since its API is
 * the function's own.
 */
export function tokenBudget(
  route: CallRoute,
  body: Buffer,
  limit: number,
  defaultMaxTokens = DEFAULT_MAX_TOKENS,
): TokenBudget {
  const cap = Math.max(1, Math.min(defaultMaxTokens, limit));
  if (route === 'embeddings') return { outputTokens: 0, body, stripUsage: false };
  const json = parseObject(body);
  if (route === 'invoke' || json === undefined) {
    const bound =
      json === undefined ? undefined : firstCount(json, ['max_completion_tokens', 'max_tokens', 'max_output_tokens']);
    return { outputTokens: (bound ?? cap) * choicesOf(json), body, stripUsage: false };
  }
  const shape = OUTPUT_FIELDS[route]!;
  const given = firstCount(json, shape.fields);
  const choices = shape.choices ? choicesOf(json) : 1;
  // A bound given but not a count is the engine's to refuse; the cap is not added beside it.
  const named = shape.fields.some((field) => json[field] !== undefined && json[field] !== null);
  const added: Record<string, unknown> = {};
  if (!named) added[shape.inject] = cap;
  let stripUsage = false;
  const options = json.stream_options;
  if (shape.usage && json.stream === true && !(isObject(options) && options.include_usage === true)) {
    stripUsage = true;
    if (options === undefined || options === null) added.stream_options = { include_usage: true };
    else if (isObject(options))
      return {
        outputTokens: (given ?? cap) * choices,
        body: rewritten(json, { ...added, stream_options: { ...options, include_usage: true } }),
        stripUsage,
      };
    // stream_options of another type is the engine's to refuse, as the client sent it.
    else stripUsage = false;
  }
  return { outputTokens: (given ?? cap) * choices, body: appended(body, added), stripUsage };
}

/**
 * `body`, a streamed chat or completion that left its usage unasked (`how`), asking for it: the
 * field appended as text when the body names no `stream_options`, the body written again with the
 * client's other options kept when it does. The relay strips that usage from the client's stream.
 */
export function withUsageAsked(body: Buffer, how: UsageUnasked): Buffer {
  if (how === 'no-options') return appended(body, { stream_options: { include_usage: true } });
  const json = parseObject(body);
  const options = json?.stream_options;
  return json && isObject(options) ? rewritten(json, { stream_options: { ...options, include_usage: true } }) : body;
}

/** The body as a JSON object, or undefined when it is not one. */
function parseObject(body: Buffer): Record<string, unknown> | undefined {
  try {
    const json: unknown = JSON.parse(body.toString('utf8'));
    return isObject(json) ? json : undefined;
  } catch {
    return undefined;
  }
}

function isObject(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

/** The first of `fields` holding a positive integer. */
function firstCount(json: Record<string, unknown>, fields: readonly string[]): number | undefined {
  for (const field of fields) {
    const value = json[field];
    if (typeof value === 'number' && Number.isSafeInteger(value) && value >= 1) return value;
  }
  return undefined;
}

/** `n` when it is a positive integer, else 1 (an engine refuses a bad one before producing anything). */
function choicesOf(json: Record<string, unknown> | undefined): number {
  const n = json?.n;
  return typeof n === 'number' && Number.isSafeInteger(n) && n >= 1 ? n : 1;
}

/** `body` with `fields` appended before its closing brace; `body` itself when there are none. */
function appended(body: Buffer, fields: Record<string, unknown>): Buffer {
  const names = Object.keys(fields);
  if (names.length === 0) return body;
  let end = body.length - 1;
  while (end > 0 && body[end] !== 0x7d) end--;
  let last = end - 1;
  while (last > 0 && (body[last] === 0x20 || body[last] === 0x0a || body[last] === 0x0d || body[last] === 0x09)) last--;
  // `{}` takes no comma before the first field.
  const comma = body[last] === 0x7b ? '' : ',';
  const text = names.map((name) => `${JSON.stringify(name)}:${JSON.stringify(fields[name])}`).join(',');
  return Buffer.concat([body.subarray(0, end), Buffer.from(comma + text), body.subarray(end)]);
}

/** `json` with `fields` set, written again. */
function rewritten(json: Record<string, unknown>, fields: Record<string, unknown>): Buffer {
  return Buffer.from(JSON.stringify({ ...json, ...fields }));
}
