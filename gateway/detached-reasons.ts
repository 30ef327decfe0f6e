/**
 * Why a detached call ended, as its record says it: the codes and messages for a runner's
 * reported failure, a failed placement, and the gateway's own reasons for stopping a call
 * (cancel, lifetime, shutdown), carried as abort reasons so the background read can tell them.
 */
import { SluiceError } from '../placer/kernel/index.ts';
import type { CallError } from './store/types.ts';

/**
 * The error a detached call's record gets for a code its runner reported: the runner's code as it
 * is (unlike a sync call's, which the gateway maps to its own), so a client reading the record
 * learns what the runner saw.
 */
export function reportedFailure(code: string, runner: string | undefined): CallError {
  const what =
    code === 'RUNNER_ENGINE_TIMEOUT' ? 'stopped the call at the end of its budget'
    : code === 'RUNNER_ENGINE_BUSY' ? 'was refused by its engine after it had accepted the call; nothing ran'
    : 'reported that its engine failed after it took the call; it was not retried because it may have run';
  return { code, message: `runner ${runner} ${what} (${code})` };
}

/** Why placement failed, as the record says it: a SluiceError as the client saw it, anything else as GW_INTERNAL. */
export function placementError(error: Error): CallError {
  // A custom placer's or pool's own message may say more than a client should see (as in the agent's answer).
  return error instanceof SluiceError ? { code: error.code, message: error.message } : { code: 'GW_INTERNAL', message: 'internal gateway error' };
}

/** A failure after commit as a record's error: its code when it has one. */
export function asCallError(error: Error): CallError {
  const code = (error as { code?: unknown }).code;
  return { code: typeof code === 'string' ? code : 'GW_RUNNER_FAILED_AFTER_COMMIT', message: error.message };
}

/** An abort reason carrying the code the call's record gets. */
export class CallStop extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** The error a record gets for a stop of the gateway's own. */
export function stopError(stop: CallStop): CallError {
  return { code: stop.code, message: stop.message };
}

/** A cancel (POST .../cancel) stopped the call. */
export const cancelled = () => new CallStop('GW_CALL_CANCELLED', 'the call was cancelled');
/** The call outlived its lifetime, which ended at `at`. */
export const expired = (at: number) => new CallStop('GW_CALL_EXPIRED', `the call outlived its lifetime (until ${new Date(at).toISOString()})`);
/** The gateway shut down before the call finished. */
export const shutdown = () => new CallStop('GW_SHUTTING_DOWN', 'the gateway shut down before the call finished');
