/**
 * The credentials a gateway accepts, and the one check every route goes through: which caller a
 * request's `Authorization: Bearer` token makes, and whether that caller may use a route of a
 * given scope. Operator and runner tokens are lists (old and new are both good while one is
 * rotated) compared as SHA-256 digests in constant time; client keys are looked up by the key
 * ring, which holds their hashes only.
 *
 * Whether client routes need a key is decided once, from settings, when the credentials are made
 * ({@link ClientAccess}); never from how many keys there are, so a key set emptied by an edit, a
 * revocation or a flushed store refuses every client call rather than opening the gateway.
 */
import { randomBytes } from 'node:crypto';
import { ForbiddenError, KeysUnavailableError, RegistrationDisabledError, UnauthorizedError } from '../errors.ts';
import { ANONYMOUS } from './scopes.ts';
import { SecretList, secretDigest } from './secrets.ts';
import type { Caller, ClientKeys, RouteScope, Scope } from './scopes.ts';

/**
 * Whether client routes need a key: `open` takes any caller (a key it knows still names the
 * caller), `keys` refuses every caller without a key it knows, however many keys there are.
 */
export type ClientAccess = 'open' | 'keys';

/** Settings of {@link Credentials}. */
export interface CredentialsOptions {
  /** Tokens of the operator scope; at least one. */
  readonly operatorTokens: readonly string[];
  /** Tokens of the viewer scope (read-only operator routes); absent, none. */
  readonly viewerTokens?: readonly string[];
  /** Tokens runners register with; none turns registration off. */
  readonly runnerTokens: readonly string[];
  /** Client keys; absent, none. */
  readonly clientKeys?: ClientKeys | undefined;
  /** Whether client routes need a key; fixed for the credentials' life. */
  readonly clients: ClientAccess;
}

/** A fresh operator or runner token: 32 random bytes, base64url, with a prefix saying what it is. */
export function newToken(prefix: string): string {
  return `${prefix}${randomBytes(32).toString('base64url')}`;
}

/**
 * The id an operator or viewer token is named by in logs and audit lines: its kind and the first
 * 12 hex digits of its SHA-256 (`operator:3f9a…`), as client key ids are made. Never the token;
 * an operator finds which token it is with `printf %s "$TOKEN" | sha256sum | cut -c1-12`.
 */
export function credentialId(kind: 'operator' | 'viewer', token: string): string {
  return `${kind}:${secretDigest(token).toString('hex').slice(0, 12)}`;
}

/** The token of an `Authorization: Bearer <token>` header (the scheme in any case), or undefined. */
export function bearerToken(header: string | undefined): string | undefined {
  if (header === undefined || header.length < 8) return undefined;
  // "Bearer " in any case, without a regular expression or a lower-cased copy per call.
  if ((header.charCodeAt(0) | 0x20) !== 0x62 || header.slice(1, 7).toLowerCase() !== 'earer ') return undefined;
  const token = header.slice(7).trim();
  return token === '' ? undefined : token;
}

/** What the gateway accepts, and the scope check of every route. */
export class Credentials {
  readonly #operators: SecretList;
  readonly #viewers: SecretList;
  /** The callers each operator and viewer token makes, by position, with their credential ids. */
  readonly #operatorCallers: readonly Caller[];
  readonly #viewerCallers: readonly Caller[];
  #runners: SecretList;
  readonly #keys: ClientKeys | undefined;
  readonly #clients: ClientAccess;

  constructor(options: CredentialsOptions) {
    if (options.operatorTokens.length === 0) throw new Error('at least one operator token is needed');
    this.#operators = new SecretList(options.operatorTokens);
    this.#viewers = new SecretList(options.viewerTokens ?? []);
    this.#operatorCallers = options.operatorTokens.map((t) =>
      Object.freeze({ kind: 'operator', id: credentialId('operator', t) }),
    );
    this.#viewerCallers = (options.viewerTokens ?? []).map((t) =>
      Object.freeze({ kind: 'viewer', id: credentialId('viewer', t) }),
    );
    this.#runners = new SecretList(options.runnerTokens);
    this.#keys = options.clientKeys;
    if (options.clients !== 'open' && options.clients !== 'keys')
      throw new Error(`clients must be 'open' or 'keys', got ${String(options.clients)}`);
    this.#clients = options.clients;
  }

  /** True when client routes need no key: the gateway was started open to clients. */
  get openToClients(): boolean {
    return this.#clients === 'open';
  }

  /** True when runners can register (a runner token is set). */
  get registration(): boolean {
    return this.#runners.size > 0;
  }

  /** Replaces the runner tokens, newest first (a rotation step, without a restart). */
  setRunnerTokens(tokens: readonly string[]): void {
    this.#runners = new SecretList(tokens);
  }

  /**
   * The caller a request with this `Authorization` header is, when it may use a route of
   * `route`'s scope; otherwise throws: 401 GW_UNAUTHORIZED without a credential or with one
   * nobody knows, 403 GW_FORBIDDEN with a known credential of another scope, 404
   * GW_REGISTRATION_DISABLED on a runner route of a gateway without runner tokens, 503
   * GW_KEYS_UNAVAILABLE for a token nobody knows on a client route while the keys cannot be read.
   */
  admit(route: Pick<RouteScope, 'scope' | 'operatorToo'>, authorization: string | undefined): Caller {
    const { scope } = route;
    if (scope === 'public') return ANONYMOUS;
    if (scope === 'runner' && !this.registration) throw new RegistrationDisabledError();
    const token = bearerToken(authorization);
    if (token === undefined) {
      if (scope === 'client' && this.openToClients) return ANONYMOUS;
      throw new UnauthorizedError(`${describe(scope)} needs ${credentialOf(scope)} in an Authorization: Bearer header`);
    }
    // Clients are the many: their key is looked up first, at the cost of one hash.
    const key = this.#keys?.lookup(token);
    if (key !== undefined) {
      if (scope === 'client') return { kind: 'client', key };
      throw wrongScope(scope, 'a client key');
    }
    // One hash for every list.
    const given = secretDigest(token);
    const operator = this.#operators.matchDigest(given);
    if (operator !== undefined) {
      // What a viewer may read, an operator may read too.
      if (scope === 'operator' || scope === 'viewer' || route.operatorToo) return this.#operatorCallers[operator]!;
      throw wrongScope(scope, 'an operator token');
    }
    const viewer = this.#viewers.matchDigest(given);
    if (viewer !== undefined) {
      if (scope === 'viewer') return this.#viewerCallers[viewer]!;
      throw wrongScope(scope, 'a viewer token');
    }
    const runner = this.#runners.matchDigest(given);
    if (runner !== undefined) {
      if (scope === 'runner') return { kind: 'runner', token: runner };
      throw wrongScope(scope, 'a runner token');
    }
    // OpenAI's clients always send some key: an open gateway takes whatever they send.
    if (scope === 'client' && this.openToClients) return ANONYMOUS;
    // The token may be a key made since the store was last read: "try again", not "unknown".
    if (scope === 'client' && this.#keys?.available === false) {
      throw new KeysUnavailableError(
        'the client keys cannot be read at the moment, so this key cannot be checked; try again shortly',
        1,
      );
    }
    throw new UnauthorizedError(`the bearer token is not ${credentialOf(scope)} of this gateway`);
  }
}

function describe(scope: Exclude<Scope, 'public'>): string {
  return scope === 'client' ? 'this route' : `this ${scope} route`;
}

function credentialOf(scope: Exclude<Scope, 'public'>): string {
  if (scope === 'viewer') return 'the viewer token or the operator token';
  return scope === 'client' ? 'a client key' : scope === 'operator' ? 'the operator token' : 'a runner token';
}

function wrongScope(scope: Exclude<Scope, 'public'>, held: string): ForbiddenError {
  return new ForbiddenError(`${held} cannot be used on ${describe(scope)}: it needs ${credentialOf(scope)}`);
}
