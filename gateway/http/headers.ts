/**
 * The headers a client of the gateway speaks, beyond HTTP's own, and which of them stop at the
 * gateway. The headers between gateway and runner are the wire's (runner/protocol/).
 */
import type { IncomingMessage } from 'node:http';
import { withoutHopByHop } from '../../runner/protocol/index.ts';

/** Response header (and request header, when the client sends its own) naming the request. */
export const REQUEST_ID_HEADER = 'x-request-id';
/** Header naming the invoke type, as Fn had it: `sync` or `detached` (see detached/prefer.ts). */
export const INVOKE_TYPE_HEADER = 'sluice-invoke-type';
/** Header naming where to POST a detached call's result when it finishes. */
export const CALLBACK_URL_HEADER = 'sluice-callback-url';
/** The IETF draft's header: the same key and payload return the first detached call. */
export const IDEMPOTENCY_KEY_HEADER = 'idempotency-key';
/** Header a client sets to keep a conversation on one runner (hashing placers). */
export const SESSION_HEADER = 'sluice-session';
/** The request header naming a call's priority class; absent, the gateway's defaultPriority. */
export const PRIORITY_HEADER = 'sluice-priority';
/** The request header naming a call's flow; absent, the body's `user`, else the client address. */
export const FLOW_HEADER = 'sluice-flow';

/**
 * Request headers that are the gateway's business only: they steer placement and detached
 * calls (and their place in the wait queue), a callback URL may carry a token, and
 * `authorization` holds the client's key, which is the gateway's to check and nobody else's to
 * see (a key an engine wants is the runner's to send); `origin` is for the gateway's CORS, which
 * an engine's own (vLLM's `--allowed-origins`) must not answer over. Runners and engines never
 * see them.
 */
const GATEWAY_ONLY_HEADERS: ReadonlySet<string> = new Set([
  'authorization',
  'origin',
  'prefer',
  INVOKE_TYPE_HEADER,
  CALLBACK_URL_HEADER,
  IDEMPOTENCY_KEY_HEADER,
  SESSION_HEADER,
  PRIORITY_HEADER,
  FLOW_HEADER,
]);

/** The client's headers as the runner gets them: no hop-by-hop and no gateway-only ones. */
export function forwardable(
  headers: IncomingMessage['headers'],
  add?: Readonly<Record<string, string>>,
): Record<string, string | string[]> {
  return withoutHopByHop(headers, { drop: GATEWAY_ONLY_HEADERS, ...(add ? { add } : {}) });
}
