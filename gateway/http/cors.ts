/**
 * CORS, so that browser apps (the OpenAI SDK or the AI SDK in a page) can call the gateway: off
 * unless origins are given. A request from an allowed origin gets `Access-Control-Allow-Origin`
 * on its answer, whatever answers it (a route, a call and its stream, a refusal), and the
 * headers a client reads exposed; a preflight is answered here, before any credential is
 * checked, since a browser sends none with it. A disallowed origin gets no CORS header (the
 * browser then keeps the answer from the page), and its preflight a 403 that says why.
 *
 * Headers are set on Node's response before anything answers, as x-request-id is: Node merges
 * them into whatever status line and headers the route or the call path writes later.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { CorsOriginRefusedError, errorBody } from '../errors.ts';

/** Every origin: `--cors-origins '*'`. */
export const ANY_ORIGIN = '*';

/** `scheme://host[:port]`, as a browser sends it in `Origin`: no path, no trailing slash. */
const ORIGIN = /^https?:\/\/[a-z0-9.-]+(?::\d{1,5})?$|^https?:\/\/\[[0-9a-f:.]+\](?::\d{1,5})?$/i;

/** A header list a preflight may ask for: names, comma-separated. */
const HEADER_LIST = /^[!#$%&'*+.^_`|~0-9a-z-]+(?:\s*,\s*[!#$%&'*+.^_`|~0-9a-z-]+)*$/i;

/** Longest Access-Control-Request-Headers echoed back; a browser's is far shorter. */
const MAX_REQUESTED_HEADERS = 2048;

/** The methods the gateway's routes take. */
const METHODS = 'GET, POST, PUT, DELETE';

/** How long a browser may keep a preflight's answer, in seconds (Chromium keeps it 2 h at most). */
const MAX_AGE_S = 7200;

/**
 * The answer headers a page may read: the call's ids and cold start, a detached call's result
 * and status, rate limits as OpenAI names them, and when to retry.
 */
export const EXPOSED_HEADERS: readonly string[] = Object.freeze([
  'x-request-id',
  'retry-after',
  'location',
  'sluice-call-id',
  'sluice-cold-start',
  'sluice-engine-id',
  'sluice-error',
  'sluice-result-status',
  'sluice-result-content-type',
  'sluice-runner-id',
  'sluice-callbacks',
  ...['limit', 'remaining', 'reset'].flatMap((part) =>
    ['requests', 'tokens'].map((window) => `x-ratelimit-${part}-${window}`),
  ),
]);
const EXPOSED = EXPOSED_HEADERS.join(', ');

/**
 * The origins as given, checked: `*`, or origins as a browser sends them
 * (`https://app.example.com`, `http://localhost:5173`).
 * @returns why the list is refused, or undefined when it is fine.
 */
export function corsOriginsProblem(origins: readonly unknown[]): string | undefined {
  for (const [i, origin] of origins.entries()) {
    if (origin === ANY_ORIGIN) continue;
    if (typeof origin !== 'string' || !ORIGIN.test(origin))
      return `corsOrigins[${i}] must be "*" or an origin such as https://app.example.com (scheme, host, port; no path), got ${JSON.stringify(origin)}`;
  }
  return undefined;
}

/** The gateway's CORS, for origins already checked by {@link corsOriginsProblem}. */
export class Cors {
  readonly #any: boolean;
  readonly #origins: ReadonlySet<string>;

  constructor(origins: readonly string[]) {
    this.#any = origins.includes(ANY_ORIGIN);
    // Browsers send the scheme and host in lower case.
    this.#origins = new Set(origins.map((origin) => origin.toLowerCase()));
  }

  /** Whether `origin` may read the gateway's answers. */
  allows(origin: string): boolean {
    return this.#any || this.#origins.has(origin.toLowerCase());
  }

  /**
   * Meets a request before anything else: a preflight is answered here (204, or 403 for an
   * origin not allowed) and `'answered'` returned; any other request from an allowed origin gets
   * its CORS headers set on `out`, for whatever answers it.
   */
  meet(incoming: IncomingMessage, out: ServerResponse): 'answered' | undefined {
    // Every answer depends on the Origin once CORS is on: a cache must not give one origin's to another.
    out.setHeader('vary', 'Origin');
    const origin = incoming.headers.origin;
    const preflight = incoming.method === 'OPTIONS' && incoming.headers['access-control-request-method'] !== undefined;
    if (origin === undefined || !this.allows(origin)) {
      if (!preflight) return undefined;
      refusePreflight(out, origin);
      return 'answered';
    }
    // Any origin is `*`, not the origin echoed: nothing the gateway answers depends on cookies.
    out.setHeader('access-control-allow-origin', this.#any ? ANY_ORIGIN : origin);
    if (!preflight) {
      out.setHeader('access-control-expose-headers', EXPOSED);
      return undefined;
    }
    answerPreflight(incoming, out);
    return 'answered';
  }
}

function answerPreflight(incoming: IncomingMessage, out: ServerResponse): void {
  const requested = incoming.headers['access-control-request-headers'];
  const headers: Record<string, string | number> = {
    'access-control-allow-methods': METHODS,
    'access-control-max-age': MAX_AGE_S,
    vary: 'Origin, Access-Control-Request-Method, Access-Control-Request-Headers',
    'content-length': 0,
  };
  // The headers asked for are echoed (the OpenAI SDK sends x-stainless-* ones of its own): every
  // header is the gateway's to accept or refuse, after the preflight, as without CORS.
  if (requested !== undefined && requested.length <= MAX_REQUESTED_HEADERS && HEADER_LIST.test(requested))
    headers['access-control-allow-headers'] = requested;
  out.writeHead(204, headers);
  out.end();
}

function refusePreflight(out: ServerResponse, origin: string | undefined): void {
  const refusal = new CorsOriginRefusedError(
    origin === undefined
      ? 'a CORS preflight must carry an Origin header'
      : `origin ${JSON.stringify(origin.slice(0, 200))} is not allowed to call this gateway from a browser; the gateway's --cors-origins lists those that are`,
  );
  const body = errorBody(refusal);
  out.writeHead(refusal.status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  out.end(body);
}
