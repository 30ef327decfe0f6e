/**
 * What a sluice command is: a settings table and a run function that starts the piece and
 * returns how to stop it. Each command lives in its own file; commands.ts lists them.
 */
import type { Logger } from '../../placer/kernel/index.ts';
import type { Redact } from '../../placer/kernel/index.ts';
import type { EnvScheme, Setting, SettingType } from './settings.ts';
import { SettingsError, flagOf } from './settings.ts';

/** What a command's run function gets. */
export interface CommandContext {
  values: Record<string, unknown>;
  positionals: string[];
  env: NodeJS.ProcessEnv;
  logger: Logger;
  /** Hides the secret settings' values in text a command prints itself, as the logger does. */
  redact: Redact;
  /** Set for one-shot commands: aborted on SIGINT/SIGTERM so the command can stop what it started. */
  signal?: AbortSignal;
}

/**
 * How a started command is stopped: called on SIGTERM/SIGINT. `done`, when given, settles when
 * the piece stopped by itself (a runner drained at a gateway's request), and the process exits.
 */
export type Stop = (() => Promise<void>) & { done?: Promise<void> };

/** A sluice command; its `envPrefix` (EnvScheme) names its environment variables when its keys mean something else elsewhere. */
export interface Command extends EnvScheme {
  summary: string;
  /** Positional arguments shown in the usage line. */
  args?: string;
  settings: readonly Setting[];
  /**
   * A command that finishes on its own (bench): run resolves when the work is done, main calls
   * the returned function once and exits instead of waiting for a signal.
   */
  oneShot?: boolean;
  /** Starts the piece; resolves with its graceful stop once it is serving. */
  run(ctx: CommandContext): Promise<Stop>;
}

/**
 * The settings of `keys` that were given (setting keys are option names), so that the library
 * applies its own defaults to the rest.
 */
export function givenValues(values: Record<string, unknown>, keys: readonly string[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const key of keys) if (values[key] !== undefined) out[key] = values[key];
  return out;
}

/**
 * The settings of `renames` that were given, each under the option it sets (`{ label: 'labels' }`:
 * --label sets `labels`), so that the library applies its own defaults to the rest.
 */
export function givenAs(
  values: Record<string, unknown>,
  renames: Readonly<Record<string, string>>,
): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [key, option] of Object.entries(renames)) if (values[key] !== undefined) out[option] = values[key];
  return out;
}

/**
 * Refuses a secret given both inline (`key`) and as a file (`fileKey`): it comes from one or the other.
 * @throws SettingsError naming both flags.
 */
export function oneOf(values: Record<string, unknown>, key: string, fileKey: string): void {
  if (values[key] !== undefined && values[fileKey] !== undefined)
    throw new SettingsError(`give ${flagOf(key)} or ${flagOf(fileKey)}, not both`);
}

/**
 * The secrets of `key`, one or several: the lines of `<key>File` when that is given (read by
 * `readLines`, the one reader of secret files), else the value of `key` as a list; undefined when
 * neither is given.
 * @throws SettingsError when both are given.
 */
export function secretLines(
  values: Record<string, unknown>,
  key: string,
  readLines: (option: string, path: string) => string[],
): string[] | undefined {
  const fileKey = `${key}File`;
  oneOf(values, key, fileKey);
  const file = values[fileKey] as string | undefined;
  if (file !== undefined) return readLines(fileKey, file);
  const given = values[key] as string | string[] | undefined;
  if (given === undefined) return undefined;
  return Array.isArray(given) ? given : [given];
}

/** The settings every command that serves shares; the command line's own, so they keep a default here. */
export const logLevel: Setting = {
  key: 'logLevel',
  type: 'string',
  default: 'info',
  description: 'debug, info, warn, error or silent',
};
/**
 * How log lines are written, for every command: no default of its own, since it depends on where
 * the lines go (main: pretty on a terminal, JSON otherwise).
 */
export const logFormat: Setting = {
  key: 'logFormat',
  type: 'string',
  defaultText: 'pretty on a terminal, else json',
  description: 'pretty (one readable line a record) or json (one JSON object a line)',
};
export const host: Setting = {
  key: 'host',
  type: 'string',
  default: '127.0.0.1',
  description: 'interface to listen on',
};
export const port = (def: number): Setting => ({
  key: 'port',
  type: 'integer',
  default: def,
  description: 'port to listen on (0 picks a free one)',
  envAliases: ['PORT'],
});

/**
 * Settings whose default is the library's, read from `defaults` under the setting's own key, so
 * that a flag cannot show the default of another option:
 * `const g = settingsOf(gatewayDefaults); g('callTimeout', 'duration', 'execution limit ...')`.
 */
export function settingsOf<D extends object>(
  defaults: D,
): (key: keyof D & string, type: SettingType, description: string) => Setting {
  return (key, type, description) => ({
    key,
    type,
    libraryDefault: defaults[key] as Setting['libraryDefault'],
    description,
  });
}
