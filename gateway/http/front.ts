/**
 * The gateway's front door: what every request meets before a route sees it, and the answers to
 * requests that never get that far because Node's HTTP parser could not read them.
 *
 * - `x-request-id` on every answer: the client's own when it sent a sane one, else the call id
 *   (set by the agent for calls), else a fresh id.
 * - The request target must be a plain path. The router matches a URL-normalized path, so a
 *   target with dot segments or in absolute-form would be routed on one path and, forwarded as
 *   sent, served on another by the engine behind (which may resolve `..` or decode `%2F`
 *   differently). Such targets are refused before anything else.
 * - Parser errors get the same OpenAI-shaped body as every other refusal, then the connection
 *   closes, since nothing after a framing error can be trusted to be a request.
 */
import { STATUS_CODES } from 'node:http';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { RequestError } from '@hono/node-server';
import { RESPONSE_ALREADY_SENT } from '@hono/node-server/utils/response';
import type { MiddlewareHandler } from 'hono';
import type { Cors } from './cors.ts';
import { REQUEST_ID_HEADER } from './headers.ts';
import type { SluiceError } from '../../placer/kernel/index.ts';
import {
  BadRequestSyntaxError,
  HeadersTimeoutError,
  HeadersTooLargeError,
  InternalError,
  InvalidPathError,
  errorBody,
  errorResponse,
} from '../errors.ts';

type Env = { Bindings: { incoming: IncomingMessage; outgoing: ServerResponse } };

/** Longest client request id kept; a longer one is replaced rather than cut. */
const MAX_REQUEST_ID_LENGTH = 200;
const SANE_REQUEST_ID = new RegExp(`^[\\x21-\\x7e]{1,${MAX_REQUEST_ID_LENGTH}}$`);

/**
 * The client's request id when it is sane (1 to 200 visible ASCII characters, so it is safe in a
 * header, a log line and an engine's log), else undefined.
 */
export function clientRequestId(value: string | string[] | undefined): string | undefined {
  const id = Array.isArray(value) ? value[0] : value;
  return id !== undefined && SANE_REQUEST_ID.test(id) ? id : undefined;
}

/** What a path must hold for any check of {@link requestTargetProblem} to apply. */
const UNUSUAL_PATH = /\/\.|[%\\#]/;

/**
 * Why `target` (a request line's target, as Node read it) may not be routed, or undefined when
 * it is a plain path. Refused: anything not starting with `/` (absolute-form, `*`), a fragment,
 * a backslash, malformed percent-encoding, and `.` or `..` segments, also when percent-encoded or when an
 * encoded slash or backslash (`%2F`, `%5C`) would make one for a server that decodes before it
 * splits. The query is not looked at: it is passed on as it is and routes nothing.
 */
export function requestTargetProblem(target: string): string | undefined {
  if (!target.startsWith('/'))
    return 'the request target must be a path starting with "/"; absolute-form and "*" targets are refused';
  const query = target.indexOf('?');
  const path = query === -1 ? target : target.slice(0, query);
  // The usual path, checked without splitting or decoding: a dot segment starts right after a
  // "/", and nothing else below can apply without a "%", "\\" or "#".
  if (!UNUSUAL_PATH.test(path)) return undefined;
  if (path.includes('#')) return 'the request target carries a fragment ("#")';
  // Not a URL character; some servers take it for "/", so it could make a dot segment.
  if (path.includes('\\')) return 'the path has a backslash';
  for (const segment of path.split('/')) {
    if (segment === '') continue;
    let decoded: string;
    try {
      decoded = decodeURIComponent(segment);
    } catch {
      return 'the path has malformed percent-encoding';
    }
    for (const piece of decoded.split(/[/\\]/)) {
      if (piece === '.' || piece === '..') return 'the path has a "." or ".." segment (percent-encoded ones included)';
    }
  }
  return undefined;
}

/** Requests {@link admit} already let through. */
const admitted = new WeakSet<IncomingMessage>();

/** What {@link admit} made of a request: let through, answered already (a CORS preflight), or refused. */
export type Admission = { kind: 'through' } | { kind: 'answered' } | { kind: 'refused'; error: SluiceError };

const THROUGH: Admission = Object.freeze({ kind: 'through' });
const ANSWERED: Admission = Object.freeze({ kind: 'answered' });

/**
 * What every request meets before routing: sets `x-request-id` on the response (unless already
 * set; the agent later replaces it with the call id on call routes when the client sent none),
 * then meets CORS when it is on (a preflight is answered; an allowed origin's headers set for any
 * answer, refusals included), then refuses a target that is not a plain path or an HTTP/1.1
 * request without a Host header.
 */
export function admit(incoming: IncomingMessage, out: ServerResponse, options: FrontDoorOptions): Admission {
  // The gateway's own server admits before Hono runs (guardListener); frontDoor then has nothing to do.
  if (admitted.has(incoming)) return THROUGH;
  admitted.add(incoming);
  // Set on the Node response, not on Hono's: call routes write to it directly, and Node merges
  // it into whatever status line and headers any route writes.
  if (!out.hasHeader(REQUEST_ID_HEADER))
    out.setHeader(REQUEST_ID_HEADER, clientRequestId(incoming.headers[REQUEST_ID_HEADER]) ?? options.newId());
  if (options.cors !== undefined && options.cors.meet(incoming, out) === 'answered') return ANSWERED;
  const target = incoming.url ?? '';
  const problem = requestTargetProblem(target);
  if (problem !== undefined)
    return { kind: 'refused', error: new InvalidPathError(`${problem}: ${JSON.stringify(target)}`) };
  if (incoming.httpVersion === '1.1' && incoming.headers.host === undefined) {
    return { kind: 'refused', error: new BadRequestSyntaxError('an HTTP/1.1 request must carry a Host header') };
  }
  return THROUGH;
}

/** Options of {@link frontDoor} and {@link guardListener}. */
export interface FrontDoorOptions {
  /** Makes the id of a request that is not a call and came without a sane id of its own. */
  newId: () => string;
  /** The gateway's CORS (gateway/http/cors.ts). @default none: no CORS header, preflights routed as any request */
  cors?: Cors | undefined;
}

/** Hono middleware, run first on every route: {@link admit}, answering its refusal. */
export function frontDoor(options: FrontDoorOptions): MiddlewareHandler<Env> {
  return async function frontDoor(c, next) {
    const admission = admit(c.env.incoming, c.env.outgoing, options);
    if (admission.kind === 'answered') return RESPONSE_ALREADY_SENT;
    if (admission.kind === 'refused') return errorResponse(c, admission.error);
    await next();
  };
}

/**
 * Wraps a Node request listener with {@link admit}. @hono/node-server makes a URL of the target
 * before Hono runs and answers a bare 400 when it cannot (`*`, say), so the gateway's own
 * server checks here first; {@link frontDoor} checks again for an app embedded elsewhere.
 */
export function guardListener(
  listener: (incoming: IncomingMessage, out: ServerResponse) => unknown,
  options: FrontDoorOptions,
): (incoming: IncomingMessage, out: ServerResponse) => void {
  return function guarded(incoming, out) {
    const admission = admit(incoming, out, options);
    if (admission.kind === 'through') {
      void listener(incoming, out);
      return;
    }
    if (admission.kind === 'answered') return;
    const refusal = admission.error;
    const body = errorBody(refusal);
    out.writeHead(refusal.status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
    out.end(body);
  };
}

/** What Node passes to a server's 'clientError' listener. */
type ClientError = Error & { code?: string; reason?: string };

/** The refusal a parser error gets, by the error's code, as Node's own default handler sorts them. */
export function clientErrorRefusal(error: ClientError): SluiceError {
  const detail = `${error.code ?? 'unknown'}: ${error.reason ?? error.message}`;
  switch (error.code) {
    case 'HPE_HEADER_OVERFLOW':
      return new HeadersTooLargeError(
        `the request's headers are larger than this server accepts (${detail}); send fewer or shorter headers`,
      );
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return new HeadersTimeoutError("the request's headers did not arrive in time; the connection is closed");
    default:
      return new BadRequestSyntaxError(
        `the request could not be parsed as HTTP/1.1 (${detail}); the connection is closed`,
      );
  }
}

/**
 * A server's 'clientError' listener: answers a request Node's parser refused with an
 * OpenAI-shaped error, `connection: close` and an `x-request-id`, then destroys the socket.
 * Writes nothing when the socket cannot take it (the client reset it) or when a response on
 * it has already begun, since bytes in the middle of an answer would corrupt it.
 */
export function answerClientError(newId: () => string): (error: ClientError, socket: Duplex) => void {
  return function answerClientError(error, socket) {
    // Node's own handler makes the same check: the response in flight on this socket, if any.
    const pending = (socket as Duplex & { _httpMessage?: ServerResponse | null })._httpMessage ?? undefined;
    if (error.code === 'ECONNRESET' || !socket.writable || pending?.headersSent) {
      socket.destroy();
      return;
    }
    const refusal = clientErrorRefusal(error);
    const body = errorBody(refusal);
    // A request whose headers were read already has its id (a framing error in the body).
    const known = pending?.getHeader(REQUEST_ID_HEADER);
    const id = typeof known === 'string' ? known : newId();
    socket.write(
      `HTTP/1.1 ${refusal.status} ${STATUS_CODES[refusal.status] ?? ''}\r\n` +
        'content-type: application/json\r\n' +
        `content-length: ${Buffer.byteLength(body)}\r\n` +
        `${REQUEST_ID_HEADER}: ${id}\r\n` +
        'connection: close\r\n\r\n' +
        body,
    );
    socket.destroy();
  };
}

/**
 * The error handler of @hono/node-server's request listener: it refuses, before Hono runs, a
 * target or Host header it cannot turn into a URL (a backslash in the path, say), with a bare
 * 400 by default. This gives those the same body as every other refusal. Any other error
 * thrown that far out is the gateway's own fault: 500, logged by `onInternal`.
 */
export function requestErrorResponse(
  newId: () => string,
  onInternal: (error: unknown) => void,
): (error: unknown) => Response {
  return (error) => {
    let refusal: SluiceError;
    if (error instanceof RequestError) {
      refusal = new BadRequestSyntaxError(`the request target or Host header does not form a URL (${error.message})`);
    } else {
      onInternal(error);
      refusal = new InternalError();
    }
    return new Response(errorBody(refusal), {
      status: refusal.status,
      headers: { 'content-type': 'application/json', [REQUEST_ID_HEADER]: newId(), connection: 'close' },
    });
  };
}
