/**
 * The error base every sluice module extends, and the one way to declare a coded error class.
 * Callers branch on `code` (stable, listed in docs/errors.md) or on the class, never on the
 * message.
 */
/** What a client sees for an error: OpenAI's `error.type`. */
export type ErrorType =
  | 'invalid_request_error'
  | 'not_found_error'
  | 'permission_error'
  | 'server_error'
  | 'service_unavailable_error'
  | 'timeout_error';

/** What every sluice error's constructor takes beside its message. */
export interface SluiceErrorOptions {
  /** The error this one wraps. */
  cause?: unknown;
}

/** Base class: a stable `code`, the HTTP `status` it maps to, and the client-facing `type`. */
export class SluiceError extends Error {
  readonly code: string;
  readonly status: number;
  readonly type: ErrorType;

  constructor(code: string, status: number, type: ErrorType, message: string, options?: SluiceErrorOptions) {
    super(message, options);
    this.name = new.target.name;
    this.code = code;
    this.status = status;
    this.type = type;
  }
}

/** A base {@link errorClass} can extend: SluiceError or a subclass with SluiceError's constructor. */
type ErrorBase<E extends SluiceError, O extends SluiceErrorOptions> = new (
  code: string,
  status: number,
  type: ErrorType,
  message: string,
  options?: O,
) => E;

/** A class made by {@link errorClass}: its code, status and type are fixed, so it takes a message. */
type ErrorClass<E extends SluiceError, O extends SluiceErrorOptions> = new (message: string, options?: O) => E;

/**
 * The class of one error code, to extend under the error's own name:
 * `export class CallNotFoundError extends errorClass('GW_CALL_NOT_FOUND', 404, 'not_found_error') {}`.
 * Each subclass keeps its own `instanceof` and its `name` (SluiceError takes it from `new.target`);
 * one with extra fields or a message of its own adds a constructor calling `super(message, options)`.
 * `base` is the area's own base (GatewayError, say) when it has one; its options are the
 * constructor's options.
 */
export function errorClass(code: string, status: number, type: ErrorType): ErrorClass<SluiceError, SluiceErrorOptions>;
export function errorClass<E extends SluiceError, O extends SluiceErrorOptions>(
  code: string,
  status: number,
  type: ErrorType,
  base: ErrorBase<E, O>,
): ErrorClass<E, O>;
export function errorClass(
  code: string,
  status: number,
  type: ErrorType,
  base: ErrorBase<SluiceError, SluiceErrorOptions> = SluiceError,
): ErrorClass<SluiceError, SluiceErrorOptions> {
  return class extends base {
    constructor(message: string, options?: SluiceErrorOptions) {
      super(code, status, type, message, options);
    }
  };
}
