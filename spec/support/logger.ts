/**
 * A logger for specs that keeps every warning (message and fields) in `warnings` and drops the
 * rest, so a spec can assert what was warned about without parsing log lines.
 */
import type { LogFields, Logger } from '../../placer/kernel/index.ts';

export function warningRecorder(warnings: LogFields[]): Logger {
  const logger: Logger = {
    debug: () => {},
    info: () => {},
    warn: (msg, fields) => warnings.push({ msg, ...fields }),
    error: () => {},
    child: () => logger,
  };
  return logger;
}
