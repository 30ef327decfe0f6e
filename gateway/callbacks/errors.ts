/**
 * Callback errors. Each has a stable code (to be listed with meaning and fix in docs/errors.md);
 * callers branch on the code, the class, or a refusal's `reason`, never on the message.
 */
import { errorClass } from '../../placer/kernel/index.ts';
import type { SluiceErrorOptions } from '../../placer/kernel/index.ts';

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
export class CallbackRefusedError extends errorClass('CALLBACK_URL_REFUSED', 400, 'invalid_request_error') {
  /** @param reason which check refused the URL */
  constructor(
    readonly reason: RefusalReason,
    message: string,
    options?: SluiceErrorOptions,
  ) {
    super(message, options);
  }
}

/**
 * The webhook signing secret is not a `whsec_`-prefixed base64 key of a usable length. The
 * message never repeats the secret: it would end up in logs.
 */
export class CallbackSecretError extends errorClass('CALLBACK_INVALID_SECRET', 500, 'server_error') {}

/** A callback option (sender or policy) is missing or out of range. */
export class CallbackConfigError extends errorClass('CALLBACK_INVALID_OPTION', 500, 'server_error') {}
