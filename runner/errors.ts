/**
 * Runner errors. Codes are stable and listed in docs/errors.md.
 */
import { errorClass } from '../placer/kernel/index.ts';
import { EngineErrorCode, UNAUTHORIZED_CODE } from './protocol/index.ts';

/** Every slot holds a call, or the runner is draining or its engine not ready: nothing ran (503). */
export class RunnerBusyError extends errorClass('RUNNER_BUSY', 503, 'service_unavailable_error') {}

/**
 * A call without the credential that says it came from a gateway (401): no signature, one made
 * with another secret, one over another call, a deadline long past, or (under mutual TLS) no
 * client certificate. Nothing ran; the refusal is counted in /status (`calls.unauthorized`).
 */
export class RunnerUnauthorizedError extends errorClass(UNAUTHORIZED_CODE, 401, 'invalid_request_error') {}

/** A runner option is missing or out of range. */
export class RunnerConfigError extends errorClass('RUNNER_INVALID_OPTION', 500, 'server_error') {}

/**
 * The engine failed after the runner committed to the call: the engine may have run it, so
 * the gateway must not send it anywhere else.
 */
export class EngineFailedError extends errorClass(EngineErrorCode.failed, 502, 'server_error') {}

/** The engine did not answer within the call's deadline. */
export class EngineTimeoutError extends errorClass(EngineErrorCode.timeout, 504, 'timeout_error') {}

/**
 * The engine refused a detached call (429 or 503) after the runner had answered 202: nothing
 * ran, and the call's result says so.
 */
export class EngineBusyError extends errorClass(EngineErrorCode.busy, 503, 'service_unavailable_error') {}

/**
 * The call's body is larger than the runner's maxBodyBytes (413). Nothing reached the engine;
 * every runner with the same bound would refuse it too.
 */
export class RunnerBodyTooLargeError extends errorClass('RUNNER_BODY_TOO_LARGE', 413, 'invalid_request_error') {}

/**
 * The call's body did not arrive within the runner's bodyReadTimeout, or paused longer than its
 * bodyIdleTimeout (408). Nothing reached the engine; the slot it held is free again.
 */
export class RunnerBodyTimeoutError extends errorClass('RUNNER_BODY_TIMEOUT', 408, 'invalid_request_error') {}

/**
 * The class of an error about one line of a text the runner reads (an engine's metrics page,
 * nvidia-smi's output): `line` is the line's 1-based number, and the message names `source`'s
 * line and the problem and quotes the line, cut to `quoteMax` characters.
 */
export function lineErrorClass(code: string, status: number, source: string, quoteMax = Number.POSITIVE_INFINITY) {
  return class extends errorClass(code, status, 'server_error') {
    constructor(
      readonly line: number,
      problem: string,
      text: string,
    ) {
      const quote = text.length > quoteMax ? `${text.slice(0, quoteMax - 3)}...` : text;
      super(`${source} line ${line}: ${problem}: ${JSON.stringify(quote)}`);
    }
  };
}

/** nvidia-smi printed something other than the CSV asked for. */
export class NvidiaSmiParseError extends lineErrorClass('RUNNER_NVIDIA_SMI_PARSE', 500, 'nvidia-smi output') {}

/** nvidia-smi is installed but failed or hung (a driver problem, usually), so the GPUs are unknown. */
export class NvidiaSmiFailedError extends errorClass('RUNNER_NVIDIA_SMI_FAILED', 500, 'server_error') {}
