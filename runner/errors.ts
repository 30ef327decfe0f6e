/**
 * Runner errors. Codes are stable and listed in docs/errors.md.
 */
import { SluiceError } from '../placer/kernel/index.ts';

/** A runner option is missing or out of range. */
export class RunnerConfigError extends SluiceError {
  constructor(message: string) {
    super('RUNNER_INVALID_OPTION', 500, 'server_error', message);
  }
}

/**
 * The engine failed after the runner committed to the call: the engine may have run it, so
 * the gateway must not send it anywhere else.
 */
export class EngineFailedError extends SluiceError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('RUNNER_ENGINE_FAILED', 502, 'server_error', message, options);
  }
}

/** The engine did not answer within the call's deadline. */
export class EngineTimeoutError extends SluiceError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('RUNNER_ENGINE_TIMEOUT', 504, 'timeout_error', message, options);
  }
}

/**
 * The engine refused a detached call (429 or 503) after the runner had answered 202: nothing
 * ran, and the call's result says so.
 */
export class EngineBusyError extends SluiceError {
  constructor(message: string) {
    super('RUNNER_ENGINE_BUSY', 503, 'service_unavailable_error', message);
  }
}

/**
 * The call's body is larger than the runner's maxBodyBytes (413). Nothing reached the engine;
 * every runner with the same bound would refuse it too.
 */
export class RunnerBodyTooLargeError extends SluiceError {
  constructor(message: string) {
    super('RUNNER_BODY_TOO_LARGE', 413, 'invalid_request_error', message);
  }
}
