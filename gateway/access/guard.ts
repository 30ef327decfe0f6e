/**
 * The scope check of the routes the router serves: one middleware that finds the route a
 * request matched, looks up its scope in the route table, and admits the caller (or refuses the
 * request) before any handler runs. Call routes the server hands to the agent directly are
 * admitted by the server with the same {@link Credentials.admit}.
 */
import type { Hono, MiddlewareHandler } from 'hono';
import { matchedRoutes } from 'hono/route';
import { telemetryPath } from '../../placer/kernel/index.ts';
import type { Logger } from '../../placer/kernel/index.ts';
import { UnauthorizedError } from '../errors.ts';
import type { Credentials } from './credentials.ts';
import type { GatewayEnv, RouteScope } from './scopes.ts';

/** The scope of a route the table does not list: closed to all but operators. */
const UNLISTED: RouteScope = Object.freeze({ method: 'GET', path: '', scope: 'operator' });

const routeKey = (method: string, path: string): string => `${method} ${path}`;

/**
 * Middleware admitting every routed request by its route's scope; sets the `caller` variable
 * the handlers read. A request no route matches passes on, to the not-found answer.
 */
export function accessGuard(
  credentials: Credentials,
  table: readonly RouteScope[],
  logger: Logger,
): MiddlewareHandler<GatewayEnv> {
  const scopes = new Map(table.map((route) => [routeKey(route.method, route.path), route]));
  return async function accessGuard(c, next) {
    // Middlewares are registered for every method ('ALL'); the first route proper is the one that answers.
    const route = matchedRoutes(c).find((r) => r.method !== 'ALL');
    // A route added to the app after the gateway was built has no entry: it is an operator's.
    const scope = route === undefined ? undefined : (scopes.get(routeKey(route.method, route.path)) ?? UNLISTED);
    if (scope !== undefined) {
      try {
        c.set('caller', credentials.admit(scope, c.req.header('authorization')));
      } catch (error) {
        // Control routes' refusals are worth an operator's look; the token is never logged, as a
        // near-miss token in a log is a leaked one.
        if (error instanceof UnauthorizedError && scope.scope !== 'client') {
          logger.warn('credential refused', {
            method: c.req.method,
            path: telemetryPath(c.req.path),
            scope: scope.scope,
            remote: c.env.incoming.socket.remoteAddress,
          });
        }
        throw error;
      }
    }
    await next();
  };
}

/** The routes of `app` the table gives no scope, as "METHOD path"; empty when every route has one. */
export function unscopedRoutes(app: Pick<Hono<GatewayEnv>, 'routes'>, table: readonly RouteScope[]): string[] {
  const known = new Set(table.map((route) => routeKey(route.method, route.path)));
  const missing = new Set<string>();
  for (const route of app.routes) {
    if (route.method !== 'ALL' && !known.has(routeKey(route.method, route.path)))
      missing.add(routeKey(route.method, route.path));
  }
  return [...missing];
}
