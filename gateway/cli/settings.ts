/**
 * Command-line settings: one table per command gives every setting its flag, environment
 * variable, type, default and help line. Values come from flags, then SLUICE_* variables,
 * then a JSON or YAML file named by --config; a setting none of them gives is left out, so the
 * library's own default applies (the table only shows it, read from the library's defaults
 * object). Only settings that are the command line's own (port, host, log level) have a
 * default here. A bad value stops start-up with one line naming the setting, where it came
 * from, and the value (hidden for a secret).
 */
import { readFileSync } from 'node:fs';
import { REDACTED, parseDataText, redactUrl, urlSecrets } from '../../placer/kernel/index.ts';
import { readSecretLines } from '../access/secrets.ts';

/**
 * How a raw string becomes a value. `duration` is ms: `250`, `250ms`, `30s`, `5m`, `1h`.
 * `json` is an object: inline JSON, or the path of a JSON file, on the command line and in the
 * environment; a nested object in the --config file.
 */
export type SettingType = 'string' | 'integer' | 'number' | 'duration' | 'list' | 'boolean' | 'json';

/** One setting of a command. */
export interface Setting {
  /** Key in the resolved values and in the config file (camelCase). */
  key: string;
  type: SettingType;
  description: string;
  /**
   * The command line's own default, for settings no library option stands behind (port, host,
   * log level): shown in --help and used when nothing else sets the value.
   */
  default?: string | number | boolean | readonly string[];
  /**
   * The library's default for the option this setting feeds, read from its defaults object
   * (gatewayDefaults, runnerDefaults, ...), never written here: --help shows it, and the CLI
   * leaves the option out so the library applies it. A duration is in ms.
   */
  libraryDefault?: string | number | boolean | readonly string[];
  /** What --help says when there is no fixed default, e.g. `from --profile`. */
  defaultText?: string;
  required?: boolean;
  /**
   * The environment variable that sets it, when SLUICE_<KEY> means something else in another
   * command (up's `runners`, a count, is SLUICE_UP_RUNNERS: the gateway's are URLs). One
   * variable means one thing across every command.
   */
  env?: string;
  /** Extra environment variables read after SLUICE_<KEY> (e.g. PORT). */
  envAliases?: readonly string[];
  /**
   * The value is a secret or may hold one, and is never shown: `true` hides it whole (a token);
   * `'url'` shows it with the URL's password masked (`redis://user:***@host:6379`); `'file'`
   * names a file of secrets (gateway/access/secrets.ts): the path is shown, the content never.
   * {@link secretValues} hands the values to the redactor that guards all output.
   */
  secret?: true | 'url' | 'file';
  /** A list flag given twice adds to itself (`--engine-binary a=x --engine-binary b=y`); otherwise the last wins. */
  repeatable?: true;
}

/** A setting could not be read; the message is the whole line to print. */
export class SettingsError extends Error {
  readonly code = 'CLI_INVALID_SETTING';
}

/** The flag for a key: `placerTimeout` -> `--placer-timeout`. */
export function flagOf(key: string): string {
  return `--${key.replace(/[A-Z]|\d+/g, (c) => `-${c.toLowerCase()}`)}`;
}

/**
 * A secret setting and its file twin, `<key>File`: a file of `fileOf` (what it holds, one a line)
 * that only its user may read, given instead of the secret itself. The path is shown, the
 * content never.
 */
export function withSecretFile(setting: Setting, fileOf: string): [Setting, Setting] {
  const file: Setting = {
    key: `${setting.key}File`,
    type: 'string',
    secret: 'file',
    description: `file of ${fileOf}; not readable by other users; instead of ${flagOf(setting.key)}`,
    defaultText: 'none',
  };
  return [setting, file];
}

/**
 * The lingering close's settings (placer/kernel/linger.ts), which the gateway and the runner
 * share, each with its own defaults object (`of`); `lingerTime` says which answers linger.
 */
export function lingerSettings(
  of: (key: 'lingerTime' | 'lingerIdleTimeout' | 'lingerMaxBytes', type: SettingType, description: string) => Setting,
  lingerTime: string,
): Setting[] {
  return [
    of('lingerTime', 'duration', lingerTime),
    of('lingerIdleTimeout', 'duration', 'the longest silence while lingering after such an answer'),
    of('lingerMaxBytes', 'integer', 'the most bytes read and discarded while lingering after such an answer'),
  ];
}

/**
 * The environment variable for a key: `placerTimeout` -> `SLUICE_PLACER_TIMEOUT`; under a
 * command's prefix (`BENCH`), `runners` -> `SLUICE_BENCH_RUNNERS`.
 */
export function envOf(key: string, prefix?: string): string {
  const name = key.replace(/[A-Z]|\d+/g, (c) => `_${c}`).toUpperCase();
  return prefix === undefined ? `SLUICE_${name}` : `SLUICE_${prefix}_${name}`;
}

/** The environment variables that set `s`, in the order they are read, under a command's `prefix`. */
export function envNamesOf(s: Setting, prefix?: string): string[] {
  return [s.env ?? envOf(s.key, prefix), ...(s.envAliases ?? [])];
}

/**
 * How a command reads its environment. The gateway, the runner, the simulated engine and `up`
 * (what containers and manifests set) read SLUICE_<KEY>; a command whose keys mean something
 * else (the bench's `runners` is a count) reads SLUICE_<PREFIX>_<KEY>, its config file included.
 */
export interface EnvScheme {
  /** The command's own part of its variables' names: `BENCH` for SLUICE_BENCH_RUNNERS. */
  envPrefix?: string;
}

/** What {@link resolveSettings} found. */
export interface Resolved {
  values: Record<string, unknown>;
  /** Arguments that were not flags (e.g. a bench scenario name). */
  positionals: string[];
  help: boolean;
}

/**
 * Resolves a command's settings from argv, env and the config file.
 * @throws SettingsError with a one-line message for the first bad setting.
 */
export function resolveSettings(
  settings: readonly Setting[],
  argv: readonly string[],
  env: NodeJS.ProcessEnv,
  scheme: EnvScheme = {},
): Resolved {
  const prefix = scheme.envPrefix;
  const byFlag = new Map(settings.map((s) => [flagOf(s.key), s]));
  const fromFlags = new Map<string, string>();
  const positionals: string[] = [];
  let configPath = env[envOf('config', prefix)];
  let help = false;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '--help' || arg === '-h') {
      help = true;
      continue;
    }
    if (!arg.startsWith('--')) {
      positionals.push(arg);
      continue;
    }
    const eq = arg.indexOf('=');
    const flag = eq === -1 ? arg : arg.slice(0, eq);
    const setting = byFlag.get(flag);
    if (flag !== '--config' && !setting) throw new SettingsError(`unknown flag ${flag}; --help lists the flags`);
    let value: string | undefined = eq === -1 ? undefined : arg.slice(eq + 1);
    if (value === undefined) {
      if (setting?.type === 'boolean' && (argv[i + 1] === undefined || argv[i + 1]!.startsWith('--'))) value = 'true';
      else {
        value = argv[++i];
        // A flag never takes the next flag as its value: `--host --port 1` is a missing host.
        if (value === undefined || value.startsWith('--')) throw new SettingsError(`${flag} needs a value`);
      }
    }
    if (flag === '--config') configPath = value;
    else if (setting!.repeatable && fromFlags.has(setting!.key))
      fromFlags.set(setting!.key, `${fromFlags.get(setting!.key)},${value}`);
    else fromFlags.set(setting!.key, value);
  }
  if (help) return { values: {}, positionals, help };

  const file = configPath ? readConfigFile(configPath, settings) : {};
  const values: Record<string, unknown> = {};
  for (const s of settings) {
    const flag = flagOf(s.key);
    const envName = envNamesOf(s, prefix).find((name) => env[name] !== undefined && env[name] !== '');
    if (fromFlags.has(s.key)) values[s.key] = parse(s, fromFlags.get(s.key)!, flag);
    else if (envName) values[s.key] = parse(s, env[envName]!, envName);
    else if (Object.hasOwn(file, s.key)) values[s.key] = parseJson(s, file[s.key], `${s.key} in ${configPath}`);
    else if (typeof s.default === 'string') values[s.key] = parse(s, s.default, `default of ${flag}`);
    else if (s.default !== undefined) values[s.key] = s.default;
    else if (s.required)
      throw new SettingsError(
        `${flag} is required (or ${envNamesOf(s, prefix)[0]}, or "${s.key}" in --config); --help describes it`,
      );
  }
  return { values, positionals, help };
}

/** How a setting's value is quoted in a message: as JSON, a secret hidden or its URL password masked. */
export function showSetting(s: Setting, value: unknown): string {
  if (s.secret === 'url' && typeof value === 'string') return JSON.stringify(redactUrl(value));
  if (s.secret === 'file') return JSON.stringify(value);
  if (s.secret) return `${REDACTED} (hidden: a secret)`;
  return JSON.stringify(value);
}

/**
 * The secrets among resolved `values`: each secret setting's value, and the password of each
 * URL-valued one, for a redactor to look for in anything printed.
 */
export function secretValues(settings: readonly Setting[], values: Record<string, unknown>): string[] {
  const found: string[] = [];
  for (const s of settings) {
    const value = values[s.key];
    if (!s.secret || value === undefined) continue;
    for (const item of Array.isArray(value) ? value : [value]) {
      if (typeof item !== 'string') continue;
      if (s.secret === 'url') found.push(...urlSecrets(item));
      else if (s.secret === 'file') found.push(...fileSecrets(item));
      else found.push(item);
    }
  }
  return found;
}

/**
 * The secrets in a secret file, for the redactor; none when it cannot be used, which the
 * command that reads it reports itself.
 */
function fileSecrets(path: string): string[] {
  try {
    return readSecretLines('secret file', path);
  } catch {
    return [];
  }
}

/** The --help text: usage, then every flag with its env variable and default. */
export function formatHelp(
  usage: string,
  summary: string,
  settings: readonly Setting[],
  scheme: EnvScheme = {},
): string {
  const prefix = scheme.envPrefix;
  const rows = settings.map((s) => {
    const left = `  ${flagOf(s.key)} <${s.type}>`;
    const shown = s.default ?? s.libraryDefault;
    const def = s.required
      ? 'required'
      : shown !== undefined
        ? `default ${s.secret === true ? REDACTED : s.secret === 'url' ? redactUrl(formatDefault(s, shown)) : formatDefault(s, shown)}`
        : `default ${s.defaultText ?? 'none'}`;
    return `${left.padEnd(40)} ${s.description} (${def}; env ${envNamesOf(s, prefix).join(', ')})`;
  });
  return [
    `usage: ${usage}`,
    '',
    summary,
    '',
    'flags:',
    ...rows,
    `  ${'--config <path>'.padEnd(38)} JSON or YAML file of settings keyed by name, e.g. {"${settings[0]?.key ?? 'port'}": ...} (env ${envOf('config', prefix)})`,
    `  ${'--help'.padEnd(38)} this text`,
    '',
    'Precedence: flags, then environment, then the config file, then defaults.',
    'Durations take ms, s, m or h (a bare number is ms).',
  ].join('\n');
}

/** A default as a user would type it: a list comma-separated, a duration in ms in its largest whole unit. */
export function formatDefault(s: Setting, value: string | number | boolean | readonly string[]): string {
  if (Array.isArray(value)) return value.join(',');
  if (s.type === 'duration' && typeof value === 'number') return formatDuration(value);
  return String(value);
}

/** `3600000` -> `1h`, `360000` -> `360s`, `10` -> `10ms`: what the duration parser reads back, as the tables always wrote them. */
export function formatDuration(ms: number): string {
  if (ms !== 0 && ms % 3_600_000 === 0) return `${ms / 3_600_000}h`;
  if (ms !== 0 && ms % 1000 === 0) return `${ms / 1000}s`;
  return `${ms}ms`;
}

/** Parses a setting's raw text as a flag would be, for a spec to check --help against the defaults. */
export function parseSetting(s: Setting, raw: string): unknown {
  return parse(s, raw, flagOf(s.key));
}

function readConfigFile(path: string, settings: readonly Setting[]): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    throw new SettingsError(
      `--config ${path}: cannot read it (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`,
    );
  }
  const parsed = parseDataText(text, path);
  if (parsed.kind === 'unparsable')
    throw new SettingsError(`--config ${path}: not valid ${parsed.format} (${parsed.message})`);
  const json = parsed.value;
  if (json === null || typeof json !== 'object' || Array.isArray(json)) {
    throw new SettingsError(`--config ${path}: must hold a ${parsed.format} object of settings`);
  }
  const known = new Set(settings.map((s) => s.key));
  for (const key of Object.keys(json)) {
    if (!known.has(key))
      throw new SettingsError(`--config ${path}: unknown setting "${key}"; --help lists the settings`);
  }
  return json as Record<string, unknown>;
}

function parseJson(s: Setting, value: unknown, where: string): unknown {
  if (s.type === 'json' && value !== null && typeof value === 'object' && !Array.isArray(value)) return value;
  if (s.type === 'list' && Array.isArray(value)) return value.map((v) => String(v));
  if (typeof value === 'string') return parse(s, value, where);
  if (typeof value === 'number' && (s.type === 'integer' || s.type === 'number' || s.type === 'duration'))
    return parse(s, String(value), where);
  if (typeof value === 'boolean' && s.type === 'boolean') return value;
  throw new SettingsError(`invalid ${where}: expected ${describe(s.type)}, got ${showSetting(s, value)}`);
}

function parse(s: Setting, raw: string, where: string): unknown {
  const bad = (): never => {
    throw new SettingsError(`invalid ${where} ${showSetting(s, raw)}: expected ${describe(s.type)}`);
  };
  switch (s.type) {
    case 'string':
      return raw;
    case 'list':
      return raw
        .split(',')
        .map((v) => v.trim())
        .filter((v) => v !== '');
    case 'boolean':
      if (raw === 'true' || raw === '1') return true;
      if (raw === 'false' || raw === '0') return false;
      return bad();
    case 'integer': {
      if (!/^-?\d+$/.test(raw.trim())) return bad();
      return Number(raw);
    }
    case 'number': {
      if (!/^-?\d+(\.\d+)?$/.test(raw.trim())) return bad();
      return Number(raw);
    }
    case 'duration': {
      const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(raw.trim());
      if (!m) return bad();
      const unit = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[(m[2] ?? 'ms') as 'ms'];
      return Math.round(Number(m[1]) * unit);
    }
    case 'json':
      return parseJsonObject(s, raw, where);
  }
}

/** Inline JSON when it looks like an object, else the path of a file holding one. */
function parseJsonObject(s: Setting, raw: string, where: string): Record<string, unknown> {
  const inline = raw.trim().startsWith('{');
  let text = raw;
  if (!inline) {
    try {
      text = readFileSync(raw, 'utf8');
    } catch (error) {
      throw new SettingsError(
        `invalid ${where}: cannot read ${raw} (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`,
      );
    }
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    const source = inline ? 'inline JSON' : raw;
    throw new SettingsError(
      `invalid ${where}: ${source} is not valid JSON (${(error as Error).message.replace(/\s*\n\s*/g, ' ')})`,
    );
  }
  if (json === null || typeof json !== 'object' || Array.isArray(json)) {
    throw new SettingsError(`invalid ${where}: expected a JSON object, got ${showSetting(s, json)}`);
  }
  return json as Record<string, unknown>;
}

function describe(type: SettingType): string {
  return {
    string: 'a string',
    integer: 'an integer',
    number: 'a number',
    duration: 'a duration like 500ms, 30s or 5m',
    list: 'a comma-separated list',
    boolean: 'true or false',
    json: 'a JSON object, inline or in a file',
  }[type];
}
