/**
 * The operator dashboard: GET /dashboard serves one HTML page, and /dashboard/dashboard.css and
 * /dashboard/dashboard.js its style and script, all shipped with sluice in `static/` (no build
 * step, nothing fetched from elsewhere). The page holds no data, so these routes are public; the
 * script reads the viewer routes (/v1/runners, /v1/stats, /v1/queue, /v1/deployments) with the
 * token typed in (the viewer token is enough), as any script of theirs would.
 */
import { readFileSync } from 'node:fs';
import type { Hono } from 'hono';
import type { GatewayEnv } from '../../access/index.ts';
import { RouteNotFoundError } from '../../errors.ts';

/** The dashboard's files: path under the gateway, file in `static/`, content type. */
export const DASHBOARD_FILES = Object.freeze([
  { path: '/dashboard', file: 'index.html', type: 'text/html; charset=utf-8' },
  { path: '/dashboard/dashboard.css', file: 'dashboard.css', type: 'text/css; charset=utf-8' },
  { path: '/dashboard/dashboard.js', file: 'dashboard.js', type: 'text/javascript; charset=utf-8' },
] as const);

/**
 * What every dashboard answer carries. The policy allows the page's own script, style and
 * requests only: a runner id or model name that held markup could not load anything, and the
 * page cannot be framed (no clickjacking of the token field).
 */
const HEADERS: Readonly<Record<string, string>> = Object.freeze({
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  // Served again after an upgrade of sluice rather than from a stale cache.
  'cache-control': 'no-cache',
});

/**
 * Adds the dashboard's routes. The files are read once, here, from `static/` beside this module
 * (`npm run build` copies them next to the compiled one). A build made without them still starts
 * and serves traffic: the gateway's work is the calls, and its dashboard answers 404 saying why.
 */
export function registerDashboardRoutes(app: Hono<GatewayEnv>): void {
  for (const { path, file, type } of DASHBOARD_FILES) {
    let body: string | undefined;
    try {
      body = readFileSync(new URL(`./static/${file}`, import.meta.url), 'utf8');
    } catch {
      body = undefined;
    }
    app.get(path, (c) => {
      if (body === undefined)
        throw new RouteNotFoundError(
          `the dashboard's ${file} is not beside this build of the gateway (gateway/observe/dashboard/static/); npm run build copies it`,
        );
      return c.body(body, 200, { ...HEADERS, 'content-type': type });
    });
  }
}
