/**
 * The bench driver's coded errors. They extend SluiceError so the CLI prints them as one line
 * and exits 2 (a bad invocation), the same as a bad setting; a benchmark that fails while it
 * runs (a service that would not start) throws a plain Error and exits 1.
 *
 * Codes (stable, never reused):
 * - `BENCH_INVALID_OPTION`: an option is missing, of the wrong type or out of its bounds.
 * - `BENCH_TARGET_NOT_LOCAL`: a load target is not http on 127.0.0.1 or localhost.
 * - `BENCH_UNKNOWN_SCENARIO`: `sluice bench` was given no scenario or one it does not know.
 */
import { SluiceError, errorClass } from '../../placer/index.ts';

/** Base of the bench driver's errors. The HTTP status is never sent: the driver serves nothing. */
export class BenchError extends SluiceError {}

/** A bench or load option is out of range; the message names the option and the bad value. */
export class BenchOptionError extends errorClass('BENCH_INVALID_OPTION', 400, 'invalid_request_error', BenchError) {
  /** @param option the option at fault, as named in the options object (and, kebab-cased, on the command line) */
  constructor(
    readonly option: string,
    message: string,
  ) {
    super(message);
  }
}

/**
 * A load target outside this machine. The driver can send tens of thousands of requests a
 * second; pointing it at someone else's host by a typo would be an attack, so it refuses.
 */
export class BenchTargetError extends errorClass('BENCH_TARGET_NOT_LOCAL', 400, 'invalid_request_error', BenchError) {}

/** `sluice bench` named no scenario, or one that does not exist. */
export class UnknownScenarioError extends errorClass(
  'BENCH_UNKNOWN_SCENARIO',
  400,
  'invalid_request_error',
  BenchError,
) {}
