/**
 * The callers of the access specs: the tokens of each kind, two client keys, the Authorization
 * header each kind of caller sends, and what each gets on a route of each scope.
 */
import type { ClientKey, ClientKeys, RouteScope, Scope } from '../../gateway/access/scopes.ts';

export const OPERATOR = 'operator-token-0123456789abcdef';
export const VIEWER = 'viewer-token-0123456789abcdef';
export const RUNNER = 'runner-token-0123456789abcdef';
export const KEY_A: ClientKey = { id: 'ka', name: 'team a', limits: {} };
export const KEY_B: ClientKey = { id: 'kb', name: 'team b', limits: {} };

/** A key ring of two keys (or none), as the key ring answers. */
export function keys(count: 0 | 2): ClientKeys {
  const ring = new Map(
    count === 2
      ? [
          ['sk-a-secret', KEY_A],
          ['sk-b-secret', KEY_B],
        ]
      : [],
  );
  return { lookup: (token) => ring.get(token), size: ring.size };
}

/** The kinds of caller the issue names, as the Authorization header each sends. */
export const CALLERS = {
  none: undefined,
  client: 'Bearer sk-a-secret',
  'wrong client': 'Bearer sk-nobody-knows-this',
  operator: `Bearer ${OPERATOR}`,
  viewer: `Bearer ${VIEWER}`,
  runner: `Bearer ${RUNNER}`,
  'forged runner': `Bearer ${RUNNER.slice(0, -1)}X`,
} as const;
export type CallerName = keyof typeof CALLERS;

/** What a caller gets on a route of `scope` with keys configured: admitted, or the refusal's status. */
export function expected(route: Pick<RouteScope, 'scope' | 'operatorToo'>, caller: CallerName): 'admitted' | 401 | 403 {
  if (route.scope === 'public') return 'admitted';
  const holds: Record<CallerName, Scope | 'unknown' | 'nothing'> = {
    none: 'nothing',
    client: 'client',
    'wrong client': 'unknown',
    operator: 'operator',
    viewer: 'viewer',
    runner: 'runner',
    'forged runner': 'unknown',
  };
  const held = holds[caller];
  if (held === route.scope || (held === 'operator' && (route.operatorToo || route.scope === 'viewer')))
    return 'admitted';
  return held === 'nothing' || held === 'unknown' ? 401 : 403;
}
