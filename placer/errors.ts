/** The placement errors: what the walk and the placers' options throw. */
import { errorClass } from './kernel/index.ts';
import type { SluiceErrorOptions } from './kernel/index.ts';

/** No runner committed to the call before the placer deadline. */
export class PlacerTimeoutError extends errorClass('PLACER_TIMEOUT', 503, 'service_unavailable_error') {
  /** @param attempts runner offers made during the walk */
  constructor(
    message: string,
    readonly attempts: number,
  ) {
    super(message);
  }
}

/**
 * The client went away (or the call was cancelled) before a runner committed. Its status, 499,
 * is nginx's "client closed request": only ever logged, never sent.
 */
export class PlacerAbortedError extends errorClass('PLACER_ABORTED', 499, 'invalid_request_error') {
  /** @param attempts runner offers made during the walk */
  constructor(
    message: string,
    readonly attempts: number,
    options?: SluiceErrorOptions,
  ) {
    super(message, options);
  }
}

/** The runner pool could not list runners; the walk does not retry it. */
export class PlacerPoolError extends errorClass('PLACER_POOL_FAILED', 500, 'server_error') {}

/** A placer option is out of range. */
export class PlacerConfigError extends errorClass('PLACER_INVALID_OPTION', 500, 'server_error') {}

/** `--placer` names no built-in placer, and no package or module resolves from it. */
export class PlacerNotFoundError extends errorClass('PLACER_NOT_FOUND', 500, 'server_error') {}
