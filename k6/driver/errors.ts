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
import { SluiceError } from '../../placer/kernel/index.ts';

/** Base of the bench driver's errors. The HTTP status is never sent: the driver serves nothing. */
export class BenchError extends SluiceError {
  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(code, 400, 'invalid_request_error', message, options);
  }
}

/** A bench or load option is out of range; the message names the option and the bad value. */
export class BenchOptionError extends BenchError {
  /** The option at fault, as named in the options object (and, kebab-cased, on the command line). */
  readonly option: string;
  constructor(option: string, message: string) {
    super('BENCH_INVALID_OPTION', message);
    this.option = option;
  }
}

/**
 * A load target outside this machine. The driver can send tens of thousands of requests a
 * second; pointing it at someone else's host by a typo would be an attack, so it refuses.
 */
export class BenchTargetError extends BenchError {
  constructor(message: string) {
    super('BENCH_TARGET_NOT_LOCAL', message);
  }
}

/** `sluice bench` named no scenario, or one that does not exist. */
export class UnknownScenarioError extends BenchError {
  constructor(message: string) {
    super('BENCH_UNKNOWN_SCENARIO', message);
  }
}
