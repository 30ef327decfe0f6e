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

/**
 * A logger writing one JSON object per line: `{"time","level","msg",...fields}`.
 * Errors in fields are flattened to `{name, code, message}` so stack traces do not flood logs.
 * Every string written, nested ones and error messages included, goes through `redact` first:
 * a library's error message can quote a URL with its password, or a secret it was given.
 */
export function createJsonLogger(
  options: {
    level?: LogLevel;
    write?: (line: string) => void;
    fields?: LogFields;
    /** Hides secrets in each string of a line. @default redactUrl: URL passwords masked */
    redact?: Redact;
  } = {},
): Logger {
  const threshold = LEVELS[options.level ?? 'info'];
  const write = options.write ?? ((line: string) => process.stdout.write(`${line}\n`));
  const base = options.fields ?? {};
  const redact = options.redact ?? redactUrl;
  const replacer = (_key: string, value: unknown): unknown => (typeof value === 'string' ? redact(value) : value);
  const emit = (level: Exclude<LogLevel, 'silent'>, msg: string, fields?: LogFields): void => {
    if (LEVELS[level] < threshold) return;
    const line: LogFields = { time: new Date().toISOString(), level, msg };
    for (const source of fields ? [base, fields] : [base]) {
      for (const [k, v] of Object.entries(source)) line[k] = v instanceof Error ? describeError(v) : v;
    }
    try {
      write(JSON.stringify(line, replacer));
    } catch {
      // Logging never throws into the caller (a cyclic field, a closed stream).
    }
  };
  return {
    debug: (msg, fields) => emit('debug', msg, fields),
    info: (msg, fields) => emit('info', msg, fields),
    warn: (msg, fields) => emit('warn', msg, fields),
    error: (msg, fields) => emit('error', msg, fields),
    child: (fields) => createJsonLogger({ ...options, fields: { ...base, ...fields } }),
  };
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
