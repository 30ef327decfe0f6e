/**
 * Callback errors. Each has a stable code (to be listed with meaning and fix in docs/errors.md);
 * callers branch on the code, the class, or a refusal's `reason`, never on the message.
 */
import { SluiceError } from '../../placer/kernel/index.ts';

/** Why a callback URL was refused; stable tokens a caller may branch on. */
export type RefusalReason =
  | 'invalid-url'
  | 'scheme'
  | 'userinfo'
  | 'not-allowlisted'
  | 'unresolvable'
  | 'special-address';

/**
 * A callback URL the policy will not deliver to (400): it is malformed, not on the allowlist,
 * or points (directly or through DNS) at an address the gateway must not reach.
 */
export class CallbackRefusedError extends SluiceError {
  /** Which check refused the URL. */
  readonly reason: RefusalReason;
  constructor(reason: RefusalReason, message: string, options?: { cause?: unknown }) {
    super('CALLBACK_URL_REFUSED', 400, 'invalid_request_error', message, options);
    this.reason = reason;
  }
}

/**
 * The webhook signing secret is not a `whsec_`-prefixed base64 key of a usable length. The
 * message never repeats the secret: it would end up in logs.
 */
export class CallbackSecretError extends SluiceError {
  constructor(message: string) {
    super('CALLBACK_INVALID_SECRET', 500, 'server_error', message);
  }
}

/** A callback option (sender or policy) is missing or out of range. */
export class CallbackConfigError extends SluiceError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('CALLBACK_INVALID_OPTION', 500, 'server_error', message, options);
  }
}
