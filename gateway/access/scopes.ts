/**
 * Who may call which route. Every route of the gateway belongs to exactly one scope, listed in
 * {@link ROUTE_SCOPES}; the gateway refuses to start with a route the table does not name, so a
 * new route cannot be added without deciding who may call it.
 *
 * - `public`: anyone (health probes, the dashboard's page, which holds no data).
 * - `client`: inference calls and the caller's own detached calls, with a client key, or with
 *   nothing on a gateway started open to clients (no keys file, no key source, keys not required).
 * - `viewer`: what can be read without changing anything (metrics and stats, the runner list,
 *   the queue, deployments), with the viewer token or the operator token. Prometheus and the
 *   dashboard need only this.
 * - `operator`: every change (drains, keys, deployments) and the key list, with the operator token.
 * - `runner`: registration and heartbeats, with a runner token.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { REGISTER_PATH } from '../../runner/protocol/index.ts';
import { OPENAI_CALL_ROUTES } from '../http/index.ts';

/** The kinds of caller a route may be meant for. */
export type Scope = 'public' | 'client' | 'viewer' | 'operator' | 'runner';

/** Per-key limits; each absent limit is no limit. */
export interface KeyLimits {
  /** Requests a minute. */
  readonly requestsPerMinute?: number;
  /** Prompt and completion tokens a minute. */
  readonly tokensPerMinute?: number;
  /** Calls in flight at once (sync and detached). */
  readonly concurrentCalls?: number;
  /** Bytes of detached results kept in the store at once. */
  readonly storedBytes?: number;
  /**
   * With tokensPerMinute: the max_tokens a call that names none is given (written into its
   * body), and so the output it is reserved at. @default 4096 (token-budget.ts), at most tokensPerMinute
   */
  readonly defaultMaxTokens?: number;
}

/** A client key as the gateway knows it: never the key itself, which only its holder has. */
export interface ClientKey {
  /**
   * A stable id that is not the secret (safe in logs and records): it owns the key's detached
   * calls, scopes its Idempotency-Keys and names its limit counters.
   */
  readonly id: string;
  /** What the operator called it. */
  readonly name: string;
  /** The models the key may call; absent, every model. */
  readonly models?: readonly string[];
  readonly limits: KeyLimits;
}

/** Where client keys are looked up; the key ring (gateway/access/keys.ts) is one. */
export interface ClientKeys {
  /** The key a presented bearer token is, or undefined when it is none of them. */
  lookup(token: string): ClientKey | undefined;
  /** How many keys there are; a keyed gateway with none refuses every client call. */
  readonly size: number;
  /**
   * False while the keys cannot be read (their store does not answer), so a token not found may
   * be a key made since the last read; absent, always readable.
   */
  readonly available?: boolean;
}

/**
 * Who is calling, as the credential on the request says.
 * - `anonymous`: no credential (a public route, or a client route while the gateway is open).
 * - `client`: a client key.
 * - `operator`: an operator token; `id` names which (gateway/access/credentials.ts,
 *   `credentialId`), for audit lines, and is never the token.
 * - `viewer`: a viewer token, with its `id` likewise.
 * - `runner`: a runner token; `token` is which of the configured runner tokens it is (they are a
 *   list so that a token can be rotated without downtime), so a runner id stays bound to one.
 */
export type Caller =
  | { readonly kind: 'anonymous' }
  | { readonly kind: 'client'; readonly key: ClientKey }
  | { readonly kind: 'operator'; readonly id: string }
  | { readonly kind: 'viewer'; readonly id: string }
  | { readonly kind: 'runner'; readonly token: number };

/** The one anonymous caller. */
export const ANONYMOUS: Caller = Object.freeze({ kind: 'anonymous' });

/** One route of the gateway and who may call it. */
export interface RouteScope {
  readonly method: 'GET' | 'POST' | 'PUT' | 'DELETE';
  /** The path as the router has it (Hono's pattern). */
  readonly path: string;
  readonly scope: Scope;
  /**
   * A client route an operator may also call, on any client's behalf: the detached-call routes,
   * so that an operator can look into or cancel any call.
   */
  readonly operatorToo?: true;
}

/** Every route of the gateway, with its scope. docs/api.md lists the same table. */
export const ROUTE_SCOPES: readonly RouteScope[] = [
  ...Object.keys(OPENAI_CALL_ROUTES).map((path): RouteScope => ({ method: 'POST', path, scope: 'client' })),
  { method: 'POST', path: '/invoke/:fn', scope: 'client' },
  { method: 'GET', path: '/v1/models', scope: 'client' },
  { method: 'GET', path: '/v1/models/:id{.+}', scope: 'client' },
  { method: 'GET', path: '/v1/calls/:id', scope: 'client', operatorToo: true },
  { method: 'GET', path: '/v1/calls/:id/result', scope: 'client', operatorToo: true },
  { method: 'POST', path: '/v1/calls/:id/cancel', scope: 'client', operatorToo: true },
  // Files and batches: a key uploads and creates its own; an operator may look into and cancel any.
  { method: 'POST', path: '/v1/files', scope: 'client' },
  { method: 'GET', path: '/v1/files', scope: 'client', operatorToo: true },
  { method: 'GET', path: '/v1/files/:id', scope: 'client', operatorToo: true },
  { method: 'GET', path: '/v1/files/:id/content', scope: 'client', operatorToo: true },
  { method: 'DELETE', path: '/v1/files/:id', scope: 'client', operatorToo: true },
  { method: 'POST', path: '/v1/batches', scope: 'client' },
  { method: 'GET', path: '/v1/batches', scope: 'client', operatorToo: true },
  { method: 'GET', path: '/v1/batches/:id', scope: 'client', operatorToo: true },
  { method: 'POST', path: '/v1/batches/:id/cancel', scope: 'client', operatorToo: true },
  { method: 'POST', path: REGISTER_PATH, scope: 'runner' },
  { method: 'POST', path: '/v1/runners/:id/heartbeat', scope: 'runner' },
  { method: 'POST', path: '/v1/runners/:id/cache', scope: 'runner' },
  { method: 'DELETE', path: '/v1/runners/:id', scope: 'runner' },
  { method: 'GET', path: '/v1/runners', scope: 'viewer' },
  { method: 'POST', path: '/v1/runners/drain', scope: 'operator' },
  { method: 'POST', path: '/v1/runners/:id/drain', scope: 'operator' },
  { method: 'GET', path: '/v1/queue', scope: 'viewer' },
  { method: 'GET', path: '/v1/stats', scope: 'viewer' },
  { method: 'GET', path: '/metrics', scope: 'viewer' },
  { method: 'POST', path: '/v1/keys', scope: 'operator' },
  { method: 'GET', path: '/v1/keys', scope: 'operator' },
  { method: 'GET', path: '/v1/keys/:id', scope: 'operator' },
  { method: 'DELETE', path: '/v1/keys/:id', scope: 'operator' },
  { method: 'GET', path: '/v1/deployments', scope: 'viewer' },
  { method: 'GET', path: '/v1/deployments/:model{.+}', scope: 'viewer' },
  { method: 'PUT', path: '/v1/deployments/:model{.+}', scope: 'operator' },
  { method: 'DELETE', path: '/v1/deployments/:model{.+}', scope: 'operator' },
  { method: 'GET', path: '/healthz', scope: 'public' },
  { method: 'GET', path: '/readyz', scope: 'public' },
  // The dashboard's page, style and script hold no data: its figures come from the viewer routes above.
  { method: 'GET', path: '/dashboard', scope: 'public' },
  { method: 'GET', path: '/dashboard/dashboard.css', scope: 'public' },
  { method: 'GET', path: '/dashboard/dashboard.js', scope: 'public' },
];

/** The gateway's Hono environment: Node's request and response, and who is calling. */
export type GatewayEnv = {
  Bindings: { incoming: IncomingMessage; outgoing: ServerResponse };
  Variables: { caller: Caller };
};
