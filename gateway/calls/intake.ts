/**
 * The intake of a buffered call: what it asks for, read off its route, body and headers (its
 * function, the body's `user` and prompt, its preference, its turn in the wait queue), and the
 * {@link GatewayCall} made of it for placement and the runner. The agent (agent.ts) runs these
 * in its lifecycle; they write nothing to the client.
 */
import type { IncomingMessage } from 'node:http';
import { invokeRefusal, modelRefusal } from '../access/index.ts';
import type { KeyCall } from '../access/index.ts';
import { LazyAbort } from '../../placer/kernel/index.ts';
import { UnknownModelError } from '../errors.ts';
import {
  affinityKey,
  forwardable,
  INVOKE_TYPE_HEADER,
  parseInferenceBody,
  REQUEST_ID_HEADER,
  routedPath,
  SESSION_HEADER,
} from '../http/index.ts';
import type { CallRoute, GatewayCall, Priority, PromptParts, UsageUnasked } from '../http/index.ts';
import { parsePreference } from '../detached/index.ts';
import type { CallPreference } from '../detached/index.ts';
import { turnOf } from './placement.ts';
import type { Turn } from './placement.ts';

/** A call whose overridable fields the agent still sets (the overrider, startedAt, the deadline). */
export type MutableCall = { -readonly [K in keyof GatewayCall]: GatewayCall[K] };

/** What a call asks for, read off its route, body and headers. */
export interface Asked {
  fn: string;
  user: string | undefined;
  prompt: string | undefined;
  /** The raw prompt fields of a chat or completion call, for its cache view (cache-checks.ts). */
  promptParts: PromptParts | undefined;
  /** How a streamed call leaves its usage unasked (gateway/http/call.ts). */
  usageUnasked: UsageUnasked | undefined;
  preference: CallPreference;
  turn: Turn;
}

/** Who asks, and what the gateway knows, for {@link askOf}. */
export interface AskContext {
  /** The caller's client key, when it has one: its model list applies. */
  key: KeyCall['key'] | undefined;
  /** The id of that key, the caller's flow. */
  client: string | undefined;
  /** Whether a model can be served now or after a cold start. */
  known: (model: string) => boolean;
  defaultPriority: Priority;
}

/**
 * What the call asks for. A key's model list is checked before whether the model exists, so
 * that a model it may not call is refused alike whether it exists or not.
 * @throws SluiceError the refusal of a call that may not or cannot be served
 */
export function askOf(
  route: CallRoute,
  fnParam: string | undefined,
  incoming: IncomingMessage,
  body: Buffer,
  context: AskContext,
): Asked {
  let fn: string;
  let user: string | undefined;
  let prompt: string | undefined;
  let promptParts: PromptParts | undefined;
  let usageUnasked: UsageUnasked | undefined;
  if (route === 'invoke') {
    fn = fnParam ?? '';
    const refusal = invokeRefusal(context.key, fn, body);
    if (refusal) throw refusal;
  } else {
    ({ model: fn, user, prompt, promptParts, usageUnasked } = parseInferenceBody(body, route));
    const refusal = modelRefusal(context.key, fn);
    if (refusal) throw refusal;
    if (!context.known(fn))
      throw new UnknownModelError(`model "${fn}" is not served by any runner; GET /v1/models lists the models`);
  }
  const preference = parsePreference(incoming.headers.prefer, incoming.headers[INVOKE_TYPE_HEADER]);
  const turn = turnOf(incoming, user, context.defaultPriority, context.client);
  return { fn, user, prompt, promptParts, usageUnasked, preference, turn };
}

/** The parts of a call that are not read off the request. */
export interface CallParts {
  id: string;
  requestId: string;
  createdAt: number;
  client: string | undefined;
  /** The body the runner gets: the client's, or one a key's token budget added to. */
  body: Buffer;
  timeout: number;
  /**
   * The client's connection for a sync call, its AbortSignal made on demand; a detached call's
   * own signal.
   */
  abort: LazyAbort | AbortSignal;
}

/** A call's `signal`: its abort's AbortSignal, made the first time it is read (placer/kernel/abort.ts). */
const SIGNAL: PropertyDescriptor = Object.freeze({
  get(this: Pick<MutableCall, 'abort'>): AbortSignal {
    return this.abort instanceof LazyAbort ? this.abort.signal : (this.abort as AbortSignal);
  },
  enumerable: true,
  configurable: true,
});

/** The call as placement and the runner see it, started at its creation until the agent stamps it. */
export function makeCall(
  route: CallRoute,
  fnParam: string | undefined,
  incoming: IncomingMessage,
  asked: Asked,
  parts: CallParts,
): MutableCall {
  const { id, requestId, createdAt, client, body, timeout, abort } = parts;
  const session = incoming.headers[SESSION_HEADER];
  const call: Omit<MutableCall, 'signal'> = {
    id,
    fn: asked.fn,
    key: affinityKey(Array.isArray(session) ? session[0] : session, asked.user, asked.fn),
    type: asked.preference.detached ? 'detached' : 'sync',
    ...(asked.prompt === undefined ? {} : { prompt: asked.prompt }),
    route,
    method: incoming.method ?? 'POST',
    // What the router matched, never the raw target: see gateway/http/front.ts.
    path: routedPath(route, fnParam, incoming.url ?? '/'),
    headers: forwardable(incoming.headers, { [REQUEST_ID_HEADER]: requestId }),
    body,
    createdAt,
    startedAt: createdAt,
    placerDeadline: createdAt,
    timeout,
    abort,
    ...(client === undefined ? {} : { client }),
  };
  // One getter for every call, added as a new property: every call keeps one fast shape (a
  // getter made per call would give each its own, and a data property turned into a getter
  // would leave the object's properties in a dictionary).
  return Object.defineProperty(call, 'signal', SIGNAL) as MutableCall;
}
