/** The placement errors: what the walk and the placers' options throw. */
import { SluiceError } from './kernel/index.ts';

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
    super('PLACER_INVALID_OPTION', 500, 'server_error', message, options);
  }
}
