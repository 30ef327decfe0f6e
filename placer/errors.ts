/**
 * The error base every sluice module extends, and the placement errors. Callers branch on
 * `code` (stable, listed in docs/errors.md) or on the class, never on the message.
 */

/** What a client sees for an error: OpenAI's `error.type`. */
export type ErrorType =
  | 'invalid_request_error'
  | 'not_found_error'
  | 'server_error'
  | 'service_unavailable_error'
  | 'timeout_error';

/** Base class: a stable `code`, the HTTP `status` it maps to, and the client-facing `type`. */
export class SluiceError extends Error {
  readonly code: string;
  readonly status: number;
  readonly type: ErrorType;

  constructor(code: string, status: number, type: ErrorType, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    this.code = code;
    this.status = status;
    this.type = type;
  }
}

/** No runner committed to the call before the placer deadline. */
export class PlacerTimeoutError extends SluiceError {
  /** Runner offers made during the walk. */
  readonly attempts: number;
  constructor(message: string, attempts: number) {
    super('PLACER_TIMEOUT', 503, 'service_unavailable_error', message);
    this.attempts = attempts;
  }
}

/** The client went away (or the call was cancelled) before a runner committed. */
export class PlacerAbortedError extends SluiceError {
  readonly attempts: number;
  constructor(message: string, attempts: number, options?: { cause?: unknown }) {
    // 499 is nginx's "client closed request": the status is only ever logged, never sent.
    super('PLACER_ABORTED', 499, 'invalid_request_error', message, options);
    this.attempts = attempts;
  }
}

/** The runner pool could not list runners; the walk does not retry it. */
export class PlacerPoolError extends SluiceError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('PLACER_POOL_FAILED', 500, 'server_error', message, options);
  }
}

/** A placer option is out of range. */
export class PlacerConfigError extends SluiceError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('PLACER_INVALID_CONFIG', 500, 'server_error', message, options);
  }
}
