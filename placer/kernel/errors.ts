/**
 * The error base every sluice module extends. Callers branch on `code` (stable, listed in
 * docs/errors.md) or on the class, never on the message.
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
