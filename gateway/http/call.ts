/**
 * The call as the gateway carries it: what the placer sees (RunnerCall) plus the buffered
 * request the runner will get, and the timestamps of Fn's lifecycle; the routes it comes in on,
 * its priority class and how it ended. Every room speaks of calls in these words, so they sit in
 * the lowest room.
 */
import { randomFillSync } from 'node:crypto';
import type { AbortWatch } from '../../placer/kernel/index.ts';
import type { CallType, RunnerCall } from '../../placer/types.ts';
import { InvalidBodyError, InvalidJsonError, MissingModelError } from '../errors.ts';

/** Which gateway route the call came in on. */
export type CallRoute = 'chat' | 'completions' | 'embeddings' | 'responses' | 'invoke';

/** The OpenAI call routes, by path; every one takes POST with the model in the JSON body. */
export const OPENAI_CALL_ROUTES: Readonly<Record<string, Exclude<CallRoute, 'invoke'>>> = {
  '/v1/chat/completions': 'chat',
  '/v1/completions': 'completions',
  '/v1/embeddings': 'embeddings',
  '/v1/responses': 'responses',
};

/**
 * The call route a POST to `target` is, or undefined when it is none: the one match of the
 * gateway's call routes, made by its server on the request target before anything else runs
 * (no Fetch Request is built for a call). It reads the path as the router would (strict,
 * case-sensitive; a percent-encoded path decoded as Hono decodes it, `%2F` and `%25` kept, then
 * the `/invoke/:fn` segment decoded whole), so a call is served alike whichever way its path is
 * spelled. The target has passed the front door (gateway/http/front.ts): a plain path, its
 * percent-encoding well formed.
 */
export function callRouteOf(target: string): { route: CallRoute; fn: string | undefined } | undefined {
  const query = target.indexOf('?');
  const raw = query === -1 ? target : target.slice(0, query);
  const path = raw.includes('%') ? routerPath(raw) : raw;
  const route = OPENAI_CALL_ROUTES[path];
  if (route !== undefined) return { route, fn: undefined };
  if (!path.startsWith('/invoke/')) return undefined;
  const fn = path.slice('/invoke/'.length);
  if (fn === '' || fn.includes('/')) return undefined;
  return { route: 'invoke', fn: fn.includes('%') ? decodeSegment(fn) : fn };
}

/** A percent-encoded path as Hono's router reads it: decodeURI, with `%25` kept encoded. */
function routerPath(path: string): string {
  return tryDecode(path.includes('%25') ? path.replace(/%25/g, '%2525') : path, decodeURI);
}

/** A path segment decoded as Hono decodes a parameter. */
function decodeSegment(segment: string): string {
  return tryDecode(segment, decodeURIComponent);
}

/** `decoder(text)`; when it throws, each run of escapes that decodes is decoded, the rest kept (Hono's tryDecode). */
function tryDecode(text: string, decoder: (text: string) => string): string {
  try {
    return decoder(text);
  } catch {
    return text.replace(/(?:%[0-9A-Fa-f]{2})+/g, (run) => {
      try {
        return decoder(run);
      } catch {
        return run;
      }
    });
  }
}

const ROUTE_PATHS = Object.fromEntries(
  Object.entries(OPENAI_CALL_ROUTES).map(([path, route]) => [route, path]),
) as Record<Exclude<CallRoute, 'invoke'>, string>;

/**
 * The path a call is sent to the runner on: the one the router matched, spelled canonically,
 * with the client's query string (if any) as it came. Never the raw target, which the router
 * saw only after normalizing it; see gateway/http/front.ts.
 * @param fn the `/invoke/:fn` parameter as the router decoded it
 * @param target the request target as the client sent it, for its query
 */
export function routedPath(route: CallRoute, fn: string | undefined, target: string): string {
  const path = route === 'invoke' ? `/invoke/${encodeURIComponent(fn ?? '')}` : ROUTE_PATHS[route];
  const query = target.indexOf('?');
  return query === -1 ? path : path + target.slice(query);
}

/**
 * How a call ended, for counters, the latency histogram and after-call listeners. `cancelled`
 * is spelled as a detached call's status is; its counter and metric label keep Fn's `canceled`
 * (see gateway/observe/metrics.ts).
 */
export type CallOutcome = 'completed' | 'cancelled' | 'timeouts' | 'errors' | 'server_busy';

/** How a finished call went, for after-call listeners. */
export interface CallResult {
  outcome: CallOutcome;
  /** HTTP status the client got (0 when the client was gone before any). */
  status: number;
  /** Runner that committed to the call, when one did. */
  runner?: string;
  /** Execution time the runner reported, in ms. */
  execMs?: number;
  /** End of the response minus startedAt, in ms. */
  totalMs: number;
  /** What the platform added, in ms: totalMs minus execMs. */
  latencyMs: number;
  error?: Error;
}

/** The priority classes a call names in `sluice-priority`, most urgent first. */
export const PRIORITIES = ['interactive', 'batch'] as const;
/** A call's priority class: `interactive` calls are always woken before `batch` ones. */
export type Priority = (typeof PRIORITIES)[number];

/** True when `value` names a priority class. */
export function isPriority(value: unknown): value is Priority {
  return (PRIORITIES as readonly unknown[]).includes(value);
}

/** A call in the gateway. Fields an overrider may change are not readonly until placement. */
export interface GatewayCall extends RunnerCall {
  readonly route: CallRoute;
  readonly method: string;
  /** Path and query sent to the runner: the path the router matched, the query as the client sent it. */
  readonly path: string;
  /** Client headers to forward (hop-by-hop ones removed). */
  readonly headers: Readonly<Record<string, string | string[]>>;
  readonly body: Buffer;
  /** When the request arrived (ms since epoch). */
  readonly createdAt: number;
  /** When the body was buffered and the call handed to placement; latency counts from here. */
  readonly startedAt: number;
  /** Execution limit, in ms, from commit; sent to the runner as an absolute deadline. */
  readonly timeout: number;
  /**
   * The id of the client key that sent the call (never the key itself); absent for a call
   * without one. It owns the call's detached record and Idempotency-Key.
   */
  readonly client?: string;
  /**
   * What the gateway checks and waits on for the call's abort: `signal` is made from it only when
   * something asks for a real AbortSignal (placer/kernel/abort.ts).
   */
  readonly abort: AbortWatch;
}

/** What the call overrider may change before placement. */
export interface CallOverride {
  fn?: string;
  key?: string;
  timeout?: number;
}

/**
 * The body's prompt fields as the client sent them, for naming the prompt in an engine's tokens
 * (gateway/tokens): a chat's `messages`, a completion's `prompt`.
 */
export interface PromptParts {
  readonly messages?: unknown;
  readonly prompt?: unknown;
}

/** What the gateway learned from the body of a /v1 call. */
export interface ParsedBody {
  model: string;
  /** The body's `user` field, when a string: a per-end-user affinity key. */
  user?: string;
  /**
   * The prompt as text, for prefix-affinity placement: every chat message's role and content in
   * order (text parts of multi-part content only), a completion's prompt, or a response's
   * instructions and input rendered as chat messages.
   */
  prompt?: string;
  /** The raw prompt fields of a chat or completion call; absent on other routes. */
  promptParts?: PromptParts;
  /** How a streamed chat or completion leaves its usage unasked; absent when it asks or does not stream. */
  usageUnasked?: UsageUnasked;
}

/**
 * A streamed chat or completion that did not ask for its closing usage chunk: `no-options` names
 * no `stream_options`, `options` names an object without `include_usage: true`. A
 * `stream_options` of another type is the engine's to refuse, so it is neither.
 */
export type UsageUnasked = 'no-options' | 'options';

/**
 * Parses a /v1 body just enough to find the model and affinity key; `route` says where the
 * prompt is (`input` and `instructions` on /v1/responses, `messages` or `prompt` elsewhere).
 */
export function parseInferenceBody(body: Buffer, route: CallRoute = 'chat'): ParsedBody {
  let json: unknown;
  try {
    json = JSON.parse(body.toString('utf8'));
  } catch (error) {
    throw new InvalidJsonError(`request body is not valid JSON: ${(error as Error).message}`, { cause: error });
  }
  if (json === null || typeof json !== 'object' || Array.isArray(json)) {
    throw new InvalidBodyError('request body must be a JSON object');
  }
  const { model, user, messages, prompt, input, instructions, stream } = json as Record<string, unknown>;
  if (model === undefined || model === null || model === '') {
    throw new MissingModelError('request body has no "model"; name the model to call');
  }
  if (typeof model !== 'string') throw new InvalidBodyError(`"model" must be a string, got ${typeof model}`);
  const text = route === 'responses' ? renderResponsesPrompt(input, instructions) : renderPrompt(messages, prompt);
  return {
    model,
    ...(typeof user === 'string' && user !== '' ? { user } : {}),
    ...(text ? { prompt: text } : {}),
    ...(route === 'chat' && messages !== undefined ? { promptParts: { messages } } : {}),
    ...(route === 'completions' && prompt !== undefined ? { promptParts: { prompt } } : {}),
    ...usageUnaskedOf(route, stream, (json as Record<string, unknown>).stream_options),
  };
}

/** `{usageUnasked}` for a streamed chat or completion that did not ask for usage, else nothing. */
function usageUnaskedOf(route: CallRoute, stream: unknown, options: unknown): { usageUnasked?: UsageUnasked } {
  if (stream !== true || (route !== 'chat' && route !== 'completions')) return {};
  if (options === undefined || options === null) return { usageUnasked: 'no-options' };
  if (typeof options !== 'object' || Array.isArray(options)) return {};
  return (options as { include_usage?: unknown }).include_usage === true ? {} : { usageUnasked: 'options' };
}

/**
 * The prompt text a prefix cache would see; undefined when there is none to read. Exported so the
 * placement simulator hands placers the very string this gateway would.
 */
export function renderPrompt(messages: unknown, prompt: unknown): string | undefined {
  if (Array.isArray(messages)) {
    let out = '';
    for (const m of messages as Array<{ role?: unknown; content?: unknown }>) {
      if (!m || typeof m !== 'object') continue;
      out += `${String(m.role ?? '')}: `;
      if (typeof m.content === 'string') out += m.content;
      else if (Array.isArray(m.content)) {
        for (const part of m.content as Array<{ type?: unknown; text?: unknown }>)
          if (typeof part?.text === 'string') out += part.text;
      }
      out += '\n';
    }
    return out || undefined;
  }
  if (typeof prompt === 'string') return prompt;
  if (Array.isArray(prompt) && prompt.every((p) => typeof p === 'string')) return prompt.join('\n');
  return undefined;
}

/**
 * The prompt text of a /v1/responses body, rendered as {@link renderPrompt} renders the chat
 * call it stands for, so a conversation keeps its prefix whichever of the two routes it uses:
 * `instructions` as a system message, then `input` (a string is one user message; a list holds
 * messages whose content is a string or parts with `text`). Input items without a role (tool
 * calls and their outputs) are left out. Undefined when there is no text.
 */
export function renderResponsesPrompt(input: unknown, instructions: unknown): string | undefined {
  const messages: Array<{ role: unknown; content: unknown }> = [];
  if (typeof instructions === 'string' && instructions !== '') messages.push({ role: 'system', content: instructions });
  if (typeof input === 'string') messages.push({ role: 'user', content: input });
  else if (Array.isArray(input)) {
    for (const item of input as Array<{ role?: unknown; content?: unknown }>) {
      if (item && typeof item === 'object' && typeof item.role === 'string')
        messages.push({ role: item.role, content: item.content });
    }
  }
  return messages.length > 0 ? renderPrompt(messages, undefined) : undefined;
}

/**
 * The affinity key for hashing placers: the `sluice-session` header when present, else the
 * body's `user`, else the function, so one conversation keeps landing where its cache is.
 */
export function affinityKey(session: string | undefined, user: string | undefined, fn: string): string {
  return session || user || fn;
}

/** Random bytes drawn in bulk: one system call per 409 ids rather than one per id. */
const pool = Buffer.alloc(4096);
let poolOffset = pool.length;

/**
 * A UUIDv7 (RFC 9562): 48-bit ms timestamp then random bits, so ids sort by creation time.
 * The default is Date.now() because the id carries a wall-clock epoch by definition; the gateway
 * passes its own clock's reading.
 */
export function uuidv7(now: number = Date.now()): string {
  if (poolOffset + 10 > pool.length) {
    randomFillSync(pool);
    poolOffset = 0;
  }
  const bytes = Buffer.allocUnsafe(16);
  pool.copy(bytes, 6, poolOffset, poolOffset + 10);
  poolOffset += 10;
  bytes.writeUIntBE(Math.floor(now), 0, 6);
  bytes[6] = (bytes[6]! & 0x0f) | 0x70;
  bytes[8] = (bytes[8]! & 0x3f) | 0x80;
  const hex = bytes.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

export type { CallType };
