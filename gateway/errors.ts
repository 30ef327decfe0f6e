/**
 * Gateway errors, each with a stable code (listed with meaning and fix in docs/errors.md) and
 * the HTTP status a client gets. The JSON body follows OpenAI's error shape.
 */
import { SluiceError } from '../placer/kernel/index.ts';
import type { ErrorType } from '../placer/kernel/index.ts';

/** An error the gateway answers with; `headers` are added to the response (e.g. Retry-After). */
export class GatewayError extends SluiceError {
  readonly headers: Readonly<Record<string, string>>;
  constructor(
    code: string,
    status: number,
    type: ErrorType,
    message: string,
    options?: { cause?: unknown; headers?: Record<string, string> },
  ) {
    super(code, status, type, message, options);
    this.headers = options?.headers ?? {};
  }
}

const invalid = (code: string, status: number) =>
  class extends GatewayError {
    constructor(message: string, options?: { cause?: unknown }) {
      super(code, status, status === 404 ? 'not_found_error' : 'invalid_request_error', message, options);
    }
  };

/** The body is not valid JSON (400). */
export class InvalidJsonError extends invalid('GW_INVALID_JSON', 400) {}
/** The body is JSON but not an object, or a field has the wrong type (400). */
export class InvalidBodyError extends invalid('GW_INVALID_BODY', 400) {}
/** The body names no `model` (400). */
export class MissingModelError extends invalid('GW_MISSING_MODEL', 400) {}
/** No runner in the pool serves the model (404). */
export class UnknownModelError extends invalid('GW_UNKNOWN_MODEL', 404) {}
/** The body is larger than maxBodyBytes (413). */
export class BodyTooLargeError extends invalid('GW_BODY_TOO_LARGE', 413) {}
/** The client did not finish sending the body within bodyReadTimeout (408). */
export class BodyTimeoutError extends invalid('GW_BODY_TIMEOUT', 408) {}
/** No route for this method and path (404). */
export class RouteNotFoundError extends invalid('GW_ROUTE_NOT_FOUND', 404) {}
/**
 * The request target is not a plain path: absolute-form, `*`, a fragment, malformed
 * percent-encoding, or a `.`/`..` segment (percent-encoded ones and ones behind an encoded
 * slash included) that would route the gateway and the engine differently (400).
 */
export class InvalidPathError extends invalid('GW_INVALID_PATH', 400) {}
/**
 * The request could not be read as HTTP/1.1: Node's parser refused it (bad chunked encoding,
 * Content-Length beside Transfer-Encoding, a malformed request line or header), or its target or
 * Host header does not form a URL (400). The connection is closed after the answer.
 */
export class BadRequestSyntaxError extends invalid('GW_BAD_REQUEST_SYNTAX', 400) {}
/** The request's header section is larger than Node's limit: 16 KiB unless node runs with `--max-http-header-size` (431). */
export class HeadersTooLargeError extends invalid('GW_HEADERS_TOO_LARGE', 431) {}
/** The client did not finish sending the request's headers in time (408). */
export class HeadersTimeoutError extends invalid('GW_HEADERS_TIMEOUT', 408) {}

/** The gateway is shutting down and takes no new calls (503). */
export class ShuttingDownError extends GatewayError {
  constructor() {
    super('GW_SHUTTING_DOWN', 503, 'service_unavailable_error', 'the gateway is shutting down; retry on another gateway', {
      headers: { 'retry-after': '1', connection: 'close' },
    });
  }
}

/**
 * The gateway already holds maxInFlight calls (503): refused at once, before or right after the
 * body, so the client (or a load balancer) can try another gateway.
 */
export class OverloadedError extends GatewayError {
  constructor(maxInFlight: number, retryAfter: number) {
    super('GW_OVERLOADED', 503, 'service_unavailable_error', `the gateway is at maxInFlight (${maxInFlight} calls); retry shortly`, {
      headers: { 'retry-after': String(retryAfter) },
    });
  }
}

/**
 * The detached-call store does not answer (or failed in a way no store error describes), so a
 * detached call cannot be kept and is refused before any runner works on it (503).
 */
export class DetachedStoreUnavailableError extends GatewayError {
  constructor(message: string, options?: { cause?: unknown; retryAfter?: number }) {
    super('GW_STORE_UNAVAILABLE', 503, 'service_unavailable_error', message, {
      ...(options?.cause === undefined ? {} : { cause: options.cause }),
      ...(options?.retryAfter === undefined ? {} : { headers: { 'retry-after': String(options.retryAfter) } }),
    });
  }
}

/**
 * The gateway already receives maxUploads bodies (503). The body is not read, so the connection
 * is closed.
 */
export class UploadsFullError extends GatewayError {
  constructor(maxUploads: number, retryAfter: number) {
    super('GW_UPLOADS_FULL', 503, 'service_unavailable_error', `the gateway is receiving maxUploads (${maxUploads}) request bodies already; retry shortly`, {
      headers: { 'retry-after': String(retryAfter), connection: 'close' },
    });
  }
}

/**
 * This client address already sends maxUploadsPerClient bodies (429). The body is not read, so
 * the connection is closed.
 */
export class TooManyUploadsError extends GatewayError {
  constructor(maxUploadsPerClient: number, retryAfter: number) {
    super('GW_TOO_MANY_UPLOADS', 429, 'service_unavailable_error', `this client address is sending maxUploadsPerClient (${maxUploadsPerClient}) request bodies already; finish those first`, {
      headers: { 'retry-after': String(retryAfter), connection: 'close' },
    });
  }
}

/**
 * This client address already holds maxConnectionsPerClient connections (429): the first
 * request on one more is answered with this, and the connection closed.
 */
export class TooManyConnectionsError extends GatewayError {
  constructor(maxConnectionsPerClient: number, retryAfter: number) {
    super('GW_TOO_MANY_CONNECTIONS', 429, 'service_unavailable_error', `this client address holds maxConnectionsPerClient (${maxConnectionsPerClient}) connections already; reuse them`, {
      headers: { 'retry-after': String(retryAfter), connection: 'close' },
    });
  }
}

/**
 * The detached-call store holds so many results that one more of the largest size would not
 * fit (--max-stored-bytes): new detached calls are refused until results expire (503).
 */
export class DetachedStoreFullError extends GatewayError {
  constructor(message: string, retryAfter: number) {
    super('GW_STORE_FULL', 503, 'service_unavailable_error', message, { headers: { 'retry-after': String(retryAfter) } });
  }
}

/**
 * The runner committed to the call and then failed (502). The call may have run, so it was not
 * sent anywhere else; retrying is the client's decision.
 */
export class RunnerFailedError extends GatewayError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('GW_RUNNER_FAILED_AFTER_COMMIT', 502, 'server_error', message, options);
  }
}

/**
 * A runner that took the call went silent (504): no acknowledgement for responseTimeout before
 * its status line, or no bytes for streamIdleTimeout between chunks. The call may have run, so it
 * was not sent anywhere else.
 */
export class RunnerStalledError extends GatewayError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('GW_RUNNER_STALLED', 504, 'timeout_error', message, options);
  }
}

/**
 * The call could not be put on the wire at all (400): the HTTP client refused the request
 * before sending a byte, so no runner saw it and none would take it.
 */
export class RequestNotForwardableError extends GatewayError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('GW_REQUEST_NOT_FORWARDABLE', 400, 'invalid_request_error', message, options);
  }
}

/** The call ran past its execution timeout (504). */
export class CallTimeoutError extends GatewayError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('GW_CALL_TIMEOUT', 504, 'timeout_error', message, options);
  }
}

/** A before-call listener or the call overrider threw something that is not a SluiceError (500). */
export class ListenerFailedError extends GatewayError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('GW_LISTENER_FAILED', 500, 'server_error', message, options);
  }
}

/** A gateway option is missing or out of range. */
export class GatewayConfigError extends GatewayError {
  constructor(message: string) {
    super('GW_INVALID_OPTION', 500, 'server_error', message);
  }
}

/**
 * The response a Hono route answers `error` with: its status, its headers and `headers`, and
 * the body of {@link errorBody}.
 */
export function errorResponse(
  c: { body(data: string, status: number, headers: Record<string, string>): Response },
  error: SluiceError,
  headers: Record<string, string> = {},
): Response {
  const own = error instanceof GatewayError ? error.headers : {};
  return c.body(errorBody(error), error.status, { 'content-type': 'application/json', ...own, ...headers });
}

/** The JSON body a client gets for `error`; `details` add fields beside OpenAI's three. */
export function errorBody(error: SluiceError, details?: Record<string, unknown>): string {
  return JSON.stringify({ error: { message: error.message, type: error.type, code: error.code, ...details } });
}
