/**
 * Gateway errors, each with a stable code (listed with meaning and fix in docs/errors.md) and
 * the HTTP status a client gets. The JSON body follows OpenAI's error shape. Each code is one
 * class, declared with the kernel's errorClass over GatewayError.
 */
import type { ServerResponse } from 'node:http';
import { SluiceError, errorClass as kernelErrorClass } from '../placer/kernel/index.ts';
import type { ErrorType, SluiceErrorOptions } from '../placer/kernel/index.ts';
import { EngineErrorCode, UNAUTHORIZED_CODE } from '../runner/protocol/index.ts';
import type { CallError } from './store/index.ts';

/** What a gateway error's constructor takes beside its message. */
interface GatewayErrorOptions extends SluiceErrorOptions {
  /** Added to the response (e.g. Retry-After). */
  headers?: Record<string, string>;
}

/** An error the gateway answers with; `headers` are added to the response (e.g. Retry-After). */
export class GatewayError extends SluiceError {
  readonly headers: Readonly<Record<string, string>>;
  constructor(code: string, status: number, type: ErrorType, message: string, options?: GatewayErrorOptions) {
    super(code, status, type, message, options);
    this.headers = options?.headers ?? {};
  }
}

/** The client-facing type of each status whose type is not the default of its class (see {@link typeOf}). */
const TYPE_OF_STATUS: Readonly<Record<number, ErrorType>> = {
  403: 'permission_error',
  404: 'not_found_error',
  429: 'rate_limit_error',
  503: 'service_unavailable_error',
  504: 'timeout_error',
};

/** OpenAI's error type for `status`: the table's, else a client's fault below 500 and the server's from 500. */
const typeOf = (status: number): ErrorType =>
  TYPE_OF_STATUS[status] ?? (status < 500 ? 'invalid_request_error' : 'server_error');

/**
 * The class of one gateway error code: the kernel's errorClass over GatewayError, whose type is
 * the one its status gives unless `type` names another.
 */
const errorClass = (code: string, status: number, type: ErrorType = typeOf(status)) =>
  kernelErrorClass(code, status, type, GatewayError);

/** Retry-After in seconds. */
const retryAfter = (seconds: number): Record<string, string> => ({ 'retry-after': String(seconds) });

/** Retry-After in seconds, and `connection: close`: for an answer given without reading the body. */
const retryAfterAndClose = (seconds: number): Record<string, string> => ({
  'retry-after': String(seconds),
  connection: 'close',
});

/** The body is not valid JSON (400). */
export class InvalidJsonError extends errorClass('GW_INVALID_JSON', 400) {}
/** The body is JSON but not an object, or a field has the wrong type (400). */
export class InvalidBodyError extends errorClass('GW_INVALID_BODY', 400) {}
/** The body names no `model` (400). */
export class MissingModelError extends errorClass('GW_MISSING_MODEL', 400) {}
/** No runner in the pool serves the model (404). */
export class UnknownModelError extends errorClass('GW_UNKNOWN_MODEL', 404) {}
/** The body is larger than maxBodyBytes (413). */
export class BodyTooLargeError extends errorClass('GW_BODY_TOO_LARGE', 413) {}
/** The client did not finish sending the body within bodyReadTimeout (408). */
export class BodyTimeoutError extends errorClass('GW_BODY_TIMEOUT', 408) {}
/** No route for this method and path (404). */
export class RouteNotFoundError extends errorClass('GW_ROUTE_NOT_FOUND', 404) {}
/**
 * The request target is not a plain path: absolute-form, `*`, a fragment, malformed
 * percent-encoding, or a `.`/`..` segment (percent-encoded ones and ones behind an encoded
 * slash included) that would route the gateway and the engine differently (400).
 */
export class InvalidPathError extends errorClass('GW_INVALID_PATH', 400) {}
/**
 * The request could not be read as HTTP/1.1: Node's parser refused it (bad chunked encoding,
 * Content-Length beside Transfer-Encoding, a malformed request line or header), or its target or
 * Host header does not form a URL (400). The connection is closed after the answer.
 */
export class BadRequestSyntaxError extends errorClass('GW_BAD_REQUEST_SYNTAX', 400) {}
/** The request's header section is larger than Node's limit: 16 KiB unless node runs with `--max-http-header-size` (431). */
export class HeadersTooLargeError extends errorClass('GW_HEADERS_TOO_LARGE', 431) {}
/** The client did not finish sending the request's headers in time (408). */
export class HeadersTimeoutError extends errorClass('GW_HEADERS_TIMEOUT', 408) {}

/** The Prefer header or sluice-invoke-type is malformed (400). */
export class InvalidPreferError extends errorClass('GW_INVALID_PREFER', 400) {}
/** A detached call's Idempotency-Key is not 1 to 255 visible ASCII characters (400). */
export class InvalidIdempotencyKeyError extends errorClass('GW_INVALID_IDEMPOTENCY_KEY', 400) {}
/** A detached call names a callback URL, and this gateway has callbacks off (400). */
export class CallbacksDisabledError extends errorClass('GW_CALLBACKS_DISABLED', 400) {}
/** A CORS preflight from an origin not in --cors-origins (403); answered with no CORS header. */
export class CorsOriginRefusedError extends errorClass('GW_CORS_ORIGIN_REFUSED', 403) {}
/** A call route was used with another method than POST (405); answered with `Allow: POST`. */
export class MethodNotAllowedError extends errorClass('GW_METHOD_NOT_ALLOWED', 405) {}
/** No detached call with this id in the store: unknown, or its result expired (404). */
export class CallNotFoundError extends errorClass('GW_CALL_NOT_FOUND', 404) {}
/** A detached call ended without a stored result (404). */
export class NoResultError extends errorClass('GW_NO_RESULT', 404) {}
/** The result of a detached call still queued or running was asked for (409). */
export class CallNotFinishedError extends errorClass('GW_CALL_NOT_FINISHED', 409) {}
/** An Idempotency-Key already used for another request (422). */
export class IdempotencyKeyReusedError extends errorClass('GW_IDEMPOTENCY_KEY_REUSED', 422) {}

/** The first call with this Idempotency-Key is still being placed (409, Retry-After: 1). */
export class IdempotencyInProgressError extends errorClass('GW_IDEMPOTENCY_IN_PROGRESS', 409) {
  constructor(message: string) {
    super(message, { headers: retryAfter(1) });
  }
}

/** A registration or heartbeat body is not what the wire contract says (400). */
export class InvalidRegistrationError extends errorClass('GW_INVALID_REGISTRATION', 400) {}
/** A drain interval that is not a whole number of ms in range (400). */
export class InvalidDrainError extends errorClass('GW_INVALID_DRAIN', 400) {}
/** A cache feed update body that is not what the wire contract says (400). */
export class InvalidCacheUpdateError extends errorClass('GW_INVALID_CACHE_UPDATE', 400) {}
/** A cache feed update that does not follow the last one taken: a gap in seq, an unknown epoch (409). */
export class CacheFeedOutOfOrderError extends errorClass('GW_CACHE_FEED_OUT_OF_ORDER', 409) {}
/** No registered runner under this id (404). */
export class RunnerNotFoundError extends errorClass('GW_RUNNER_NOT_FOUND', 404) {}

/** The runner routes on a gateway started without a runner token (404). */
export class RegistrationDisabledError extends errorClass('GW_REGISTRATION_DISABLED', 404) {
  constructor() {
    super('runner registration is off on this gateway: start it with --runner-token');
  }
}

/**
 * A route that needs a credential, called without one or with a token this gateway does not know
 * (401). Answered with `www-authenticate: Bearer`, as RFC 6750 asks.
 */
export class UnauthorizedError extends errorClass('GW_UNAUTHORIZED', 401) {
  constructor(message = 'missing or unknown credential') {
    super(message, { headers: { 'www-authenticate': 'Bearer' } });
  }
}

/**
 * A known credential used where it does not belong (403): a client key on an operator route, a
 * runner token on a client route, a key calling a model outside its allow-list, a runner token
 * used for a runner id bound to another token (docs/runners.md, "Registration rules").
 */
export class ForbiddenError extends errorClass('GW_FORBIDDEN', 403) {}

/**
 * A fault that was not meant to reach a client (500). The message is always the same: the
 * detail (which may hold anything, a secret included) goes to the log, never to the client.
 */
export class InternalError extends errorClass('GW_INTERNAL', 500) {
  constructor(options?: SluiceErrorOptions) {
    super('internal gateway error', options);
  }
}

/**
 * The gateway is shutting down (503): it takes no new calls, and, as a detached call's stop
 * reason, it ended a call still running when its drain time ran out.
 */
export class ShuttingDownError extends errorClass('GW_SHUTTING_DOWN', 503) {
  constructor(message = 'the gateway is shutting down; retry on another gateway') {
    super(message, { headers: retryAfterAndClose(1) });
  }
}

/** A cancel (POST /v1/calls/{id}/cancel) ended a detached call; a record's error, never an answer. */
export class CallCancelledError extends errorClass('GW_CALL_CANCELLED', 499) {
  constructor(message = 'the call was cancelled') {
    super(message);
  }
}

/** A detached call outlived its lifetime, which ended at `at` (ms since the epoch); a record's error. */
export class CallExpiredError extends errorClass('GW_CALL_EXPIRED', 504) {
  constructor(at: number) {
    super(`the call outlived its lifetime (until ${new Date(at).toISOString()})`);
  }
}

/**
 * The gateway that owned a detached call did not finish it within its lifetime and is presumed
 * gone; a record's error, written by whichever gateway found it.
 */
export class OwnerLostError extends errorClass('GW_OWNER_LOST', 502) {}

/**
 * A detached call's answer grew past maxResultBytes: the gateway stopped reading and kept
 * nothing; a record's error.
 */
export class ResultTooLargeError extends errorClass('GW_RESULT_TOO_LARGE', 502) {
  constructor(maxResultBytes: number) {
    super(`the result is larger than maxResultBytes (${maxResultBytes} bytes); it was not kept`);
  }
}

/**
 * The store refused a finished call's result for another reason than room (a custom store's
 * refusal, a bug), so the call ends `failed` without it; a record's error.
 */
export class ResultNotStoredError extends errorClass('GW_RESULT_NOT_STORED', 502) {}

/**
 * The engine answered a detached call with a status of 400 or more; its answer is kept as the
 * result, and this is the record's error.
 */
export class EngineErrorStatusError extends errorClass('GW_ENGINE_ERROR', 502) {
  constructor(status: number) {
    super(`the engine answered ${status}`);
  }
}

/**
 * A detached call's record error, as a SluiceError: the code is the record's own (any code of
 * the record list in docs/errors.md, a runner's included), so that an after-call listener and an
 * abort reason carry it. Never answered to a client. The one gateway error whose code is not
 * fixed, so it extends GatewayError itself.
 */
export class RecordedError extends GatewayError {
  constructor(error: CallError) {
    super(error.code, 502, 'server_error', error.message);
  }
}

/**
 * The gateway already holds maxInFlight calls (503): refused at once, before or right after the
 * body, so the client (or a load balancer) can try another gateway.
 */
export class OverloadedError extends errorClass('GW_OVERLOADED', 503) {
  constructor(maxInFlight: number, retryAfterSeconds: number) {
    super(`the gateway is at maxInFlight (${maxInFlight} calls); retry shortly`, {
      headers: retryAfter(retryAfterSeconds),
    });
  }
}

/**
 * The wait queue is at `maxQueued` calls, the call's model at `maxQueuedPerModel`, or its flow
 * at `maxQueuedPerFlow` (503): every runner is busy and the call was refused at once rather
 * than queued past the bound.
 */
export class QueueFullError extends errorClass('GW_QUEUE_FULL', 503) {
  constructor(scope: 'total' | 'model' | 'flow', limit: number, retryAfterSeconds: number) {
    const what =
      scope === 'total'
        ? `the gateway's wait queue is full (maxQueued ${limit} calls)`
        : scope === 'model'
          ? `this model already has ${limit} calls waiting (maxQueuedPerModel)`
          : `this flow already has ${limit} calls waiting (maxQueuedPerFlow)`;
    super(`${what} and every runner is busy; retry shortly`, { headers: retryAfter(retryAfterSeconds) });
  }
}

/**
 * A call for a deployed model with no replica, whose last start failed with nothing else
 * starting (503): the call is answered at once rather than wait out its deadline. The message
 * names the model and the failure's reason (never the profile's args or env values); Retry-After
 * is the time until the reconciler's next attempt, or `retryAfter` when none is due.
 */
export class DeploymentFailedError extends errorClass('GW_DEPLOYMENT_FAILED', 503) {
  constructor(model: string, reason: string, retryAfterSeconds: number, nextAttempt: boolean) {
    const when = nextAttempt
      ? `the next start is in about ${retryAfterSeconds} s`
      : 'no start is due until the deployment changes';
    super(
      `model ${JSON.stringify(model)} has no replica: its last start failed (${reason}) and none is starting; ${when}`,
      { headers: retryAfter(retryAfterSeconds) },
    );
  }
}

/** The `sluice-priority` header names no priority class (400). */
export class InvalidPriorityError extends errorClass('GW_INVALID_PRIORITY', 400) {}

/**
 * The detached-call store does not answer (or failed in a way no store error describes), so a
 * detached call cannot be kept and is refused before any runner works on it (503). As a
 * record's error: the call's record reached the store after its client was answered 503.
 */
export class DetachedStoreUnavailableError extends errorClass('GW_STORE_UNAVAILABLE', 503) {
  constructor(message: string, options?: { cause?: unknown; retryAfter?: number }) {
    super(message, {
      ...(options?.cause === undefined ? {} : { cause: options.cause }),
      ...(options?.retryAfter === undefined ? {} : { headers: retryAfter(options.retryAfter) }),
    });
  }
}

/**
 * The gateway already receives maxUploads bodies (503). The body is not read, so the connection
 * is closed.
 */
export class UploadsFullError extends errorClass('GW_UPLOADS_FULL', 503) {
  constructor(maxUploads: number, retryAfterSeconds: number) {
    super(`the gateway is receiving maxUploads (${maxUploads}) request bodies already; retry shortly`, {
      headers: retryAfterAndClose(retryAfterSeconds),
    });
  }
}

/**
 * This client address already sends maxUploadsPerClient bodies (429). The body is not read, so
 * the connection is closed.
 */
export class TooManyUploadsError extends errorClass('GW_TOO_MANY_UPLOADS', 429, 'service_unavailable_error') {
  constructor(maxUploadsPerClient: number, retryAfterSeconds: number) {
    super(
      `this client address is sending maxUploadsPerClient (${maxUploadsPerClient}) request bodies already; finish those first`,
      {
        headers: retryAfterAndClose(retryAfterSeconds),
      },
    );
  }
}

/**
 * This client address already holds maxConnectionsPerClient connections (429): the first
 * request on one more is answered with this, and the connection closed.
 */
export class TooManyConnectionsError extends errorClass('GW_TOO_MANY_CONNECTIONS', 429, 'service_unavailable_error') {
  constructor(maxConnectionsPerClient: number, retryAfterSeconds: number) {
    super(
      `this client address holds maxConnectionsPerClient (${maxConnectionsPerClient}) connections already; reuse them`,
      {
        headers: retryAfterAndClose(retryAfterSeconds),
      },
    );
  }
}

/**
 * The detached-call store holds so many results that one more of the largest size would not
 * fit (--max-stored-bytes): new detached calls are refused until results expire (503). As a
 * record's error (no `retryAfterSeconds`): a finished call's result did not fit.
 */
export class DetachedStoreFullError extends errorClass('GW_STORE_FULL', 503) {
  constructor(message: string, retryAfterSeconds?: number) {
    super(message, retryAfterSeconds === undefined ? {} : { headers: retryAfter(retryAfterSeconds) });
  }
}

/**
 * The runner committed to the call and then failed (502). The call may have run, so it was not
 * sent anywhere else; retrying is the client's decision.
 */
export class RunnerFailedError extends errorClass('GW_RUNNER_FAILED_AFTER_COMMIT', 502) {}

/**
 * A runner refused the call as not from a gateway (its RUNNER_UNAUTHORIZED, 502): this gateway's
 * call secret or TLS is not the runner's. Nothing ran; the client's own credential is not at
 * fault, so it never sees a 401 for it.
 */
export class RunnerRefusedGatewayError extends errorClass('GW_RUNNER_UNAUTHORIZED', 502) {}

/**
 * A runner that took the call went silent (504): no acknowledgement for responseTimeout before
 * its status line, or no bytes for streamIdleTimeout between chunks. The call may have run, so it
 * was not sent anywhere else.
 */
export class RunnerStalledError extends errorClass('GW_RUNNER_STALLED', 504) {}

/**
 * The call could not be put on the wire at all (400): the HTTP client refused the request
 * before sending a byte, so no runner saw it and none would take it.
 */
export class RequestNotForwardableError extends errorClass('GW_REQUEST_NOT_FORWARDABLE', 400) {}

/** The call ran past its execution timeout (504). */
export class CallTimeoutError extends errorClass('GW_CALL_TIMEOUT', 504) {}

/** A before-call listener or the call overrider threw something that is not a SluiceError (500). */
export class ListenerFailedError extends errorClass('GW_LISTENER_FAILED', 500) {}

/**
 * The client key is over one of its limits (429): requests or tokens per minute, concurrent
 * calls, or stored detached-result bytes. Answered with Retry-After and, for the per-minute
 * limits, the `x-ratelimit-*` headers; nothing was counted or run.
 */
export class RateLimitedError extends errorClass('GW_RATE_LIMITED', 429) {
  constructor(message: string, headers: Record<string, string>) {
    super(message, { headers });
  }
}

/** No client key with this id (404), on the operator's /v1/keys routes. */
export class KeyNotFoundError extends errorClass('GW_KEY_NOT_FOUND', 404) {}

/** A key from the keys file was asked to be deleted through the API (409): edit the file instead. */
export class KeyInFileError extends errorClass('GW_KEY_IN_FILE', 409) {}

/**
 * The keys file (--keys) cannot be read or is not a list of valid keys: the message names each
 * entry and field at fault. At start-up the gateway refuses to start; on a reload it keeps the
 * keys it had.
 */
export class KeysFileError extends errorClass('GW_INVALID_KEYS_FILE', 500) {}

/**
 * A keyed gateway cannot read its key store (503), so a presented token it does not know may be
 * a key made since its last read: refused with Retry-After rather than told it is unknown.
 */
export class KeysUnavailableError extends errorClass('GW_KEYS_UNAVAILABLE', 503) {
  constructor(message: string, retryAfterSeconds: number) {
    super(message, { headers: retryAfter(retryAfterSeconds) });
  }
}

/**
 * A key was asked to be made on a gateway started open to clients (409): it would not close the
 * gateway, which is open or keyed by its start-up settings only. Restart it with --require-keys.
 */
export class ClientsOpenError extends errorClass('GW_CLIENTS_OPEN', 409) {}

/**
 * A deployment given to PUT /v1/deployments/{model} is not valid (400). The message lists every
 * problem, and the answer's `problems` holds them one per entry.
 */
export class InvalidDeploymentError extends errorClass('GW_INVALID_DEPLOYMENT', 400) {
  /** Every problem found, one line each, naming the model and the field. */
  readonly problems: readonly string[];
  constructor(problems: readonly string[]) {
    super(`invalid deployment: ${problems.join('; ')}`);
    this.problems = Object.freeze([...problems]);
  }
}

/** No deployment of this model (404), on the operator's /v1/deployments routes. */
export class DeploymentNotFoundError extends errorClass('GW_DEPLOYMENT_NOT_FOUND', 404) {}

/** A deployment from the deployments file was to be replaced or deleted through the API (409): edit the file instead. */
export class DeploymentInFileError extends errorClass('GW_DEPLOYMENT_IN_FILE', 409) {}

/**
 * The deployments file (--deployments) cannot be read or holds invalid deployments: the gateway
 * does not start. The message has one line per problem, each naming the file, the entry and the
 * field; `problems` holds the same lines.
 */
export class DeploymentsFileError extends errorClass('GW_INVALID_DEPLOYMENTS_FILE', 500) {
  /** One line per problem, each starting with the file's name. */
  readonly problems: readonly string[];
  constructor(problems: readonly string[], options?: SluiceErrorOptions) {
    super(problems.join('\n'), options);
    this.problems = Object.freeze([...problems]);
  }

  /** The error for `problems` found in `file`, each line naming the file. */
  static of(file: string, problems: readonly string[], options?: SluiceErrorOptions): DeploymentsFileError {
    return new DeploymentsFileError(
      problems.map((problem) => `deployments file ${file}: ${problem}`),
      options,
    );
  }
}

/** A gateway option is missing or out of range. */
export class GatewayConfigError extends errorClass('GW_INVALID_OPTION', 500) {}

/**
 * A secret file (`--runner-token-file`, `--callback-secret-file`) could not be used: unreadable,
 * readable by any user of the machine, or holding no secret. A start-up error; the message names
 * the option and the file, never the content.
 */
export class SecretFileError extends errorClass('GW_SECRET_FILE_INVALID', 500) {}

/**
 * A store failure as a client gets it: a SluiceError as it is (STORE_UNAVAILABLE, say), anything
 * else, such as a custom store's plain Error, as GW_STORE_UNAVAILABLE without its message.
 */
export function storeFailure(error: unknown): SluiceError {
  if (error instanceof SluiceError) return error;
  return new DetachedStoreUnavailableError('the detached-call store is unavailable; retry later', { cause: error });
}

/** What the gateway makes of an engine error code a runner reported (see {@link runnerReported}). */
export interface ReportedFailure {
  /** What a sync call's client gets: the gateway's own code, GW_CALL_TIMEOUT, GW_RUNNER_FAILED_AFTER_COMMIT or GW_RUNNER_UNAUTHORIZED. */
  error: CallTimeoutError | RunnerFailedError | RunnerRefusedGatewayError;
  /**
   * What a detached call's record gets: the runner's code as it is, so that a client reading the
   * record learns what the runner saw.
   */
  record: CallError;
}

/**
 * The one translation of an engine error code (EngineErrorCode, in the `sluice-error` header or
 * trailer) that `runner` reported. `detail` is what the runner said (its error body's message)
 * or what the gateway saw (a body cut short); only the sync client's message carries it.
 */
export function runnerReported(code: string, runner: string | undefined, detail = 'no detail'): ReportedFailure {
  if (code === EngineErrorCode.timeout) {
    return {
      error: new CallTimeoutError(`runner ${runner} stopped the call at its deadline: ${detail}`),
      record: { code, message: `runner ${runner} stopped the call at the end of its budget (${code})` },
    };
  }
  if (code === UNAUTHORIZED_CODE) {
    // The runner does not share this gateway's call secret (or TLS): nothing ran, and the
    // client's own key has nothing to do with it, so it must not see a 401.
    return {
      error: new RunnerRefusedGatewayError(
        `runner ${runner} refused the call as not from a gateway (${code}): ${detail}; nothing ran; the gateway's call secret must be the runners'`,
      ),
      record: { code, message: `runner ${runner} refused the call as not from a gateway (${code}); nothing ran` },
    };
  }
  const what =
    code === EngineErrorCode.busy
      ? 'was refused by its engine after it had accepted the call; nothing ran'
      : 'reported that its engine failed after it took the call; it was not retried because it may have run';
  return {
    error: new RunnerFailedError(
      `runner ${runner} reported ${code} after it took the call: ${detail}; the call was not retried because it may have run`,
    ),
    record: { code, message: `runner ${runner} ${what} (${code})` },
  };
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

/** Writes an error in OpenAI's shape, with the error's own headers (Retry-After and the like). */
export function sendError(
  out: ServerResponse,
  error: SluiceError,
  headers: Record<string, string> = {},
  details?: Record<string, unknown>,
): void {
  if (out.headersSent || out.destroyed) return;
  const extra = error instanceof GatewayError ? error.headers : {};
  const all: Record<string, string> = { 'content-type': 'application/json', ...extra, ...headers };
  // HTTP/2 has no connection header (a stream ends, not the connection); Node would drop it with a warning.
  if (out.req?.httpVersionMajor === 2) delete all.connection;
  out.writeHead(error.status, all);
  out.end(errorBody(error, details));
}
