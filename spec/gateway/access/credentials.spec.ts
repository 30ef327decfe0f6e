/**
 * gateway/access/credentials.ts: the scope check as a table (every scope × every kind of caller,
 * open and closed to clients), who a credential names, and how a bearer token is read.
 */
import { describe, expect, it } from 'vitest';
import { Credentials, bearerToken, credentialId } from '../../../gateway/access/credentials.ts';
import type { RouteScope } from '../../../gateway/access/scopes.ts';
import { CALLERS, KEY_B, OPERATOR, RUNNER, VIEWER, expected, keys } from '../../support/callers.ts';
import type { CallerName } from '../../support/callers.ts';

/** Credentials with an operator token and no runner token or client key, `clients` open or keyed. */
const keyless = (clients: 'open' | 'keys') =>
  new Credentials({ operatorTokens: [OPERATOR], runnerTokens: [], clientKeys: keys(0), clients });

describe('Credentials.admit', () => {
  const closed = new Credentials({
    operatorTokens: [OPERATOR],
    viewerTokens: [VIEWER],
    runnerTokens: [RUNNER],
    clientKeys: keys(2),
    clients: 'keys',
  });
  const scopes: RouteScope[] = [
    { method: 'GET', path: '/p', scope: 'public' },
    { method: 'POST', path: '/c', scope: 'client' },
    { method: 'GET', path: '/c/o', scope: 'client', operatorToo: true },
    { method: 'GET', path: '/o', scope: 'operator' },
    { method: 'POST', path: '/r', scope: 'runner' },
    { method: 'GET', path: '/v', scope: 'viewer' },
  ];
  const outcome = (credentials: Credentials, route: RouteScope, header: string | undefined): string => {
    try {
      return credentials.admit(route, header).kind;
    } catch (error) {
      return String((error as { status: number }).status);
    }
  };

  it.each(scopes.flatMap((route) => Object.keys(CALLERS).map((caller) => [route.path, caller] as const)))(
    'with keys configured, %s × %s',
    (path, caller) => {
      const route = scopes.find((r) => r.path === path)!;
      const want = expected(route, caller as CallerName);
      const got = outcome(closed, route, CALLERS[caller as CallerName]);
      if (want === 'admitted') expect(got).not.toMatch(/^\d+$/);
      else expect(got).toBe(String(want));
    },
  );

  it('names who is calling: the client with its key, the runner with the index of its token, an operator or viewer by its credential id', () => {
    const rotating = new Credentials({
      operatorTokens: [OPERATOR],
      viewerTokens: [VIEWER],
      runnerTokens: [`${RUNNER}-new`, RUNNER],
      clientKeys: keys(2),
      clients: 'keys',
    });
    expect(rotating.admit(scopes[1]!, 'Bearer sk-b-secret')).toEqual({ kind: 'client', key: KEY_B });
    expect(rotating.admit(scopes[4]!, `Bearer ${RUNNER}`)).toEqual({ kind: 'runner', token: 1 });
    expect(rotating.admit(scopes[4]!, `bearer ${RUNNER}-new`)).toEqual({ kind: 'runner', token: 0 });
    expect(rotating.admit(scopes[2]!, `Bearer ${OPERATOR}`)).toEqual({
      kind: 'operator',
      id: credentialId('operator', OPERATOR),
    });
    expect(rotating.admit(scopes[5]!, `Bearer ${VIEWER}`)).toEqual({
      kind: 'viewer',
      id: credentialId('viewer', VIEWER),
    });
    // The id is the kind and 12 hex digits of the token's SHA-256: never the token.
    expect(credentialId('operator', OPERATOR)).toMatch(/^operator:[0-9a-f]{12}$/);
  });

  it('lets anyone call client routes while no key exists, whatever key an SDK sends, and closes them on a keyed gateway', () => {
    const open = keyless('open');
    expect(open.openToClients).toBe(true);
    for (const header of [undefined, 'Bearer sk-anything', 'Basic dXNlcjpwdw=='])
      expect(open.admit(scopes[1]!, header)).toEqual({ kind: 'anonymous' });
    // Operator routes stay closed, and known tokens keep their scope.
    expect(outcome(open, scopes[3]!, undefined)).toBe('401');
    expect(outcome(open, scopes[3]!, 'Bearer sk-anything')).toBe('401');
    expect(outcome(open, scopes[1]!, `Bearer ${OPERATOR}`)).toBe('403');
    // Without a runner token, runner routes say registration is off.
    expect(outcome(open, scopes[4]!, `Bearer ${RUNNER}`)).toBe('404');
    const required = keyless('keys');
    expect(required.openToClients).toBe(false);
    expect(outcome(required, scopes[1]!, undefined)).toBe('401');
    expect(outcome(required, scopes[1]!, 'Bearer sk-anything')).toBe('401');
  });

  it('reads a bearer token in any case of the scheme, and nothing else', () => {
    expect(bearerToken('Bearer abc')).toBe('abc');
    expect(bearerToken('bEaReR  abc ')).toBe('abc');
    for (const header of [undefined, '', 'Bearer', 'Bearer ', 'Basic abc', 'Bearerabc', 'Token abc'])
      expect(bearerToken(header)).toBeUndefined();
  });

  it('refuses to be made without an operator token', () => {
    expect(() => new Credentials({ operatorTokens: [], runnerTokens: [], clients: 'open' })).toThrow(/operator token/);
  });
});
