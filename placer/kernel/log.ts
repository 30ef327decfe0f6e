/**
 * The logger contract every sluice module takes through its options. Messages are static
 * lowercase phrases; everything variable goes in fields, so logs can be grepped and parsed.
 */
import { redactUrl } from './redact.ts';
import type { Redact } from './redact.ts';

/** Structured fields attached to a log line. Never put a secret or a whole config here. */
export type LogFields = Record<string, unknown>;

/** A structured logger. Library code gets one through its options and never builds its own. */
export interface Logger {
  debug(msg: string, fields?: LogFields): void;
  info(msg: string, fields?: LogFields): void;
  warn(msg: string, fields?: LogFields): void;
  error(msg: string, fields?: LogFields): void;
  /** A logger that adds `fields` to every line. */
  child(fields: LogFields): Logger;
}

/** Log levels in increasing severity. */
export type LogLevel = 'debug' | 'info' | 'warn' | 'error' | 'silent';

const LEVELS: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40, silent: 100 };

/** True when `value` names a log level. */
export function isLogLevel(value: string): value is LogLevel {
  return Object.hasOwn(LEVELS, value);
}

/** How a log record is written: one JSON object a line, or one readable line. */
export type LogFormat = 'json' | 'pretty';

const FORMATS: readonly LogFormat[] = ['json', 'pretty'];

/** True when `value` names a log format. */
export function isLogFormat(value: string): value is LogFormat {
  return (FORMATS as readonly string[]).includes(value);
}

/** Options of {@link createLogger}. */
export interface LoggerOptions {
  /** @default 'info' */
  level?: LogLevel;
  /** @default 'json' */
  format?: LogFormat;
  /** Takes each line, without its newline. @default a write to stdout */
  write?: (line: string) => void;
  /** Fields on every line. */
  fields?: LogFields;
  /** Hides secrets in each string of a line. @default redactUrl: URL passwords masked */
  redact?: Redact;
}

/**
 * A logger writing one line per record. `json`: `{"time","level","msg",...fields}`, for
 * machines. `pretty`: `08:21:03.123 INFO  gateway listening url=http://… runners=["…"]`, for a
 * person at a terminal: the time of day (UTC), the level, the message, then each field as
 * key=value (a string quoted when it holds a space, a quote or an `=`; anything else as JSON).
 * Errors in fields are flattened to `{name, code, message}` so stack traces do not flood logs.
 * Every string written, nested ones and error messages included, goes through `redact` first:
 * a library's error message can quote a URL with its password, or a secret it was given.
 */
export function createLogger(options: LoggerOptions = {}): Logger {
  const threshold = LEVELS[options.level ?? 'info'];
  const write = options.write ?? ((line: string) => process.stdout.write(`${line}\n`));
  const base = options.fields ?? {};
  const redact = options.redact ?? redactUrl;
  const render = options.format === 'pretty' ? prettyLine : jsonLine;
  const emit = (level: Exclude<LogLevel, 'silent'>, msg: string, fields?: LogFields): void => {
    if (LEVELS[level] < threshold) return;
    const line: LogFields = {};
    for (const source of fields ? [base, fields] : [base]) {
      for (const [k, v] of Object.entries(source)) line[k] = v instanceof Error ? describeError(v) : v;
    }
    try {
      write(render(new Date().toISOString(), level, msg, line, redact));
    } catch {
      // Logging never throws into the caller (a cyclic field, a closed stream).
    }
  };
  return {
    debug: (msg, fields) => emit('debug', msg, fields),
    info: (msg, fields) => emit('info', msg, fields),
    warn: (msg, fields) => emit('warn', msg, fields),
    error: (msg, fields) => emit('error', msg, fields),
    child: (fields) => createLogger({ ...options, fields: { ...base, ...fields } }),
  };
}

/** A {@link createLogger} writing JSON lines. */
export function createJsonLogger(options: Omit<LoggerOptions, 'format'> = {}): Logger {
  return createLogger({ ...options, format: 'json' });
}

/** A JSON.stringify replacer passing every string through `redact`. */
const redacting =
  (redact: Redact) =>
  (_key: string, value: unknown): unknown =>
    typeof value === 'string' ? redact(value) : value;

function jsonLine(time: string, level: string, msg: string, fields: LogFields, redact: Redact): string {
  return JSON.stringify({ time, level, msg, ...fields }, redacting(redact));
}

/** A string left bare in a pretty line: nothing a reader could take for a separator. */
const BARE = /^[^\s"=]+$/;

function prettyLine(time: string, level: string, msg: string, fields: LogFields, redact: Redact): string {
  const pairs = Object.entries(fields).map(([key, value]) => {
    if (typeof value === 'string') {
      const text = redact(value);
      return `${key}=${BARE.test(text) ? text : JSON.stringify(text)}`;
    }
    return `${key}=${JSON.stringify(value, redacting(redact)) ?? String(value)}`;
  });
  // The message is one line whatever a caller passed: a newline would start a record of its own.
  const head = `${time.slice(11, 23)} ${level.toUpperCase().padEnd(5)} ${redact(msg).replace(/\s*\n\s*/g, ' ')}`;
  return pairs.length === 0 ? head : `${head} ${pairs.join(' ')}`;
}

/** A logger that drops everything; the default for library code used without one. */
export const silentLogger: Logger = {
  debug: () => {},
  info: () => {},
  warn: () => {},
  error: () => {},
  child: () => silentLogger,
};

function describeError(error: Error): LogFields {
  const code = (error as { code?: unknown }).code;
  return { name: error.name, message: error.message, ...(code === undefined ? {} : { code }) };
}
