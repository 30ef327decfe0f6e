/**
 * The kernel: what every part of sluice shares and nothing else. The error base, the logger,
 * option validation, reading a file's JSON list, the clock, seeded randomness, full-jitter backoff, secret redaction, the
 * lingering close of the gateway's and the runner's HTTP/1.1 servers, and starting Node scripts
 * as child processes that report where they listen (the CLI, the bench and the specs all do).
 * It imports nothing from the rest of the tree; runner/, placer/ and gateway/ all build on it
 * (docs/architecture.md).
 */
export type { ErrorType, SluiceErrorOptions } from './errors.ts';
export { SluiceError, errorClass } from './errors.ts';
export type { LogFields, LogFormat, Logger, LoggerOptions, LogLevel } from './log.ts';
export { createJsonLogger, createLogger, isLogFormat, isLogLevel, silentLogger } from './log.ts';
export { formatMs } from './durations.ts';
export type { Checks, Fail, IntegerBounds, NumberBounds, Resolved, Rule } from './validate.ts';
export {
  MAX_TIMER_MS,
  RUNNER_TOKEN_MIN_LENGTH,
  checkFunction,
  checkInteger,
  checkLogger,
  checkMs,
  checkNumber,
  checkRunnerToken,
  checksFor,
  checksWith,
  resolveOptions,
  rule,
  show,
} from './validate.ts';
export type { DataListEntry, DataListFault } from './data-list.ts';
export { cappedProblems, dataListEntries } from './data-list.ts';
export type { DataFormat, ParsedData } from './data-text.ts';
export { dataFormatOf, parseDataText } from './data-text.ts';
export type { AbortWatch } from './abort.ts';
export { LazyAbort } from './abort.ts';
export type { Clock } from './clock.ts';
export { systemClock } from './clock.ts';
export { drawIndex, drawWeighted, seededRandom } from './random.ts';
export type { BackoffSteps } from './backoff.ts';
export { fullJitterBackoff } from './backoff.ts';
export type { Redact } from './redact.ts';
export { MIN_SCRUBBED_LENGTH, REDACTED, createRedactor, redactUrl, telemetryPath, urlSecrets } from './redact.ts';
export type { LingerBounds, LingerEnd, LingerOptions, LingerOutcome, Lingering } from './linger.ts';
export { lingerAfterAnswer, lingerDefaults, lingerEarlyAnswers } from './linger.ts';
export type { AnyServerResponse } from './response-end.ts';
export { cutShort, onCutShort } from './response-end.ts';
export type { ChildScript, ChildService, StartOptions, StartService } from './processes.ts';
export { freePort, reportListening, serviceStarter, startChild } from './processes.ts';
export type { KvEventSockets, RunnerArgs, SimEngineArgs } from './service-args.ts';
export { KV_HASH_SEED, kvEventSockets, runnerArgs, simEngineArgs } from './service-args.ts';
