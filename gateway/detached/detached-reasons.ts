/**
 * Why a detached call ended, as its record says it: a failed placement, a failure after commit,
 * and the gateway's own reasons for stopping a call (cancel, lifetime, shutdown), carried as
 * abort reasons so the background read can tell them. A runner's reported code is translated
 * by runnerReported (gateway/errors.ts), like a sync call's.
 */
import { SluiceError } from '../../placer/kernel/index.ts';
import {
  CallCancelledError,
  CallExpiredError,
  InternalError,
  RunnerFailedError,
  ShuttingDownError,
} from '../errors.ts';
import type { CallError } from '../store/index.ts';

/** Why placement failed, as the record says it: a SluiceError as the client saw it, anything else as GW_INTERNAL. */
export function placementError(error: Error): CallError {
  // A custom placer's or pool's own message may say more than a client should see (as in the agent's answer).
  return recordError(error instanceof SluiceError ? error : new InternalError());
}

/** A failure after commit as a record's error: its code when it has one, else GW_RUNNER_FAILED_AFTER_COMMIT. */
export function asCallError(error: Error): CallError {
  const code = (error as { code?: unknown }).code;
  return typeof code === 'string'
    ? { code, message: error.message }
    : recordError(new RunnerFailedError(error.message));
}

/** A SluiceError (a stop of the gateway's own, say) as a record's error. */
export function recordError(error: SluiceError): CallError {
  return { code: error.code, message: error.message };
}

/** A cancel (POST .../cancel) stopped the call. */
export const cancelled = () => new CallCancelledError();
/** The call outlived its lifetime, which ended at `at`. */
export const expired = (at: number) => new CallExpiredError(at);
/** The gateway shut down before the call finished. */
export const shutdown = () => new ShuttingDownError('the gateway shut down before the call finished');
