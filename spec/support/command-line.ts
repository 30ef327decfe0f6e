/** Command lines for the sluice child processes the integration and fault specs start. */

/** Flag values by flag name without its dashes; a number is written as it prints. */
export type FlagValues = Readonly<Record<string, string | number>>;

/** `--name value` for each entry, in the record's order. */
export function flags(values: FlagValues): string[] {
  return Object.entries(values).flatMap(([name, value]) => [`--${name}`, String(value)]);
}

/**
 * The argv of a sluice command (`gateway`, `runner`, `sim-engine`) listening on a port the system
 * picks (`--port 0`), with `values` as flags and `rest` after them as given.
 */
export function commandLine(command: string, values: FlagValues = {}, rest: readonly string[] = []): string[] {
  return [command, '--port', '0', ...flags(values), ...rest];
}
