import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  SettingsError,
  envOf,
  flagOf,
  formatHelp,
  resolveSettings,
  secretValues,
  showSetting,
} from '../../../gateway/cli/settings.ts';
import type { Setting } from '../../../gateway/cli/settings.ts';

const settings: readonly Setting[] = [
  { key: 'port', type: 'integer', default: 8080, description: 'port to listen on', envAliases: ['PORT'] },
  { key: 'host', type: 'string', default: '127.0.0.1', description: 'interface to listen on' },
  { key: 'placerTimeout', type: 'duration', default: '360s', description: 'how long a call may wait' },
  { key: 'runners', type: 'list', description: 'runner URLs' },
  { key: 'model', type: 'list', default: ['sim-small', 'sim-large'], description: 'models served' },
  { key: 'verbose', type: 'boolean', default: false, description: 'log more' },
];

const dir = mkdtempSync(join(tmpdir(), 'sluice-settings-spec-'));
let files = 0;
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Writes a config file and returns its path. */
function configFile(content: unknown): string {
  const path = join(dir, `config-${++files}.json`);
  writeFileSync(path, typeof content === 'string' ? content : JSON.stringify(content));
  return path;
}

const resolve = (argv: readonly string[], env: NodeJS.ProcessEnv = {}, table: readonly Setting[] = settings) =>
  resolveSettings(table, argv, env);

/** The SettingsError `fn` throws; fails the test when it returns. */
function settingsError(fn: () => unknown): SettingsError {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(SettingsError);
    return error as SettingsError;
  }
  throw new Error('expected a SettingsError');
}

const message = (argv: readonly string[], env: NodeJS.ProcessEnv = {}, table: readonly Setting[] = settings): string =>
  settingsError(() => resolve(argv, env, table)).message;

describe('flagOf and envOf', () => {
  it.each([
    ['port', '--port', 'SLUICE_PORT'],
    ['placerTimeout', '--placer-timeout', 'SLUICE_PLACER_TIMEOUT'],
    ['detachedPlacerTimeout', '--detached-placer-timeout', 'SLUICE_DETACHED_PLACER_TIMEOUT'],
  ])('returns the flag and variable for %s', (key, flag, env) => {
    expect(flagOf(key)).toBe(flag);
    expect(envOf(key)).toBe(env);
  });
});

describe('resolveSettings', () => {
  it('returns the defaults, parsed, when nothing else sets a value', () => {
    const resolved = resolve([]);
    expect(resolved).toEqual({
      values: {
        port: 8080,
        host: '127.0.0.1',
        placerTimeout: 360_000,
        model: ['sim-small', 'sim-large'],
        verbose: false,
      },
      positionals: [],
      help: false,
    });
    expect(Object.hasOwn(resolved.values, 'runners')).toBe(false);
  });

  describe('precedence', () => {
    const file = configFile({ port: 1111, host: 'file.example', placerTimeout: '1s' });

    it('returns the flag when a flag, SLUICE_* variable, config file and default all set the value', () => {
      expect(resolve(['--port', '3333', '--config', file], { SLUICE_PORT: '2222' }).values.port).toBe(3333);
    });

    it('returns the SLUICE_* variable when there is no flag', () => {
      expect(resolve(['--config', file], { SLUICE_PORT: '2222' }).values.port).toBe(2222);
    });

    it('returns the config file value when there is no flag or variable', () => {
      expect(resolve(['--config', file]).values.port).toBe(1111);
    });

    it('returns each setting from its own highest source when sources are mixed', () => {
      const values = resolve(['--host', 'flag.example', '--config', file], { SLUICE_PLACER_TIMEOUT: '2s' }).values;
      expect(values).toMatchObject({ host: 'flag.example', placerTimeout: 2000, port: 1111, verbose: false });
    });

    it('returns the config file named by SLUICE_CONFIG when there is no --config flag', () => {
      expect(resolve([], { SLUICE_CONFIG: file }).values.host).toBe('file.example');
    });

    it('returns the --config file when both --config and SLUICE_CONFIG name one', () => {
      const other = configFile({ host: 'other.example' });
      expect(resolve([`--config=${other}`], { SLUICE_CONFIG: file }).values.host).toBe('other.example');
    });

    it('returns the value of an alias variable (PORT) when SLUICE_PORT is unset or empty', () => {
      expect(resolve([], { PORT: '9000' }).values.port).toBe(9000);
      expect(resolve([], { PORT: '9000', SLUICE_PORT: '' }).values.port).toBe(9000);
    });

    it('returns SLUICE_PORT over the PORT alias, and PORT over the config file', () => {
      expect(resolve([], { PORT: '9000', SLUICE_PORT: '9001' }).values.port).toBe(9001);
      expect(resolve(['--config', file], { PORT: '9000' }).values.port).toBe(9000);
      expect(resolve(['--port', '1'], { PORT: '9000' }).values.port).toBe(1);
    });

    it('returns the default when a variable is set to the empty string', () => {
      expect(resolve([], { SLUICE_HOST: '' }).values.host).toBe('127.0.0.1');
    });
  });

  describe('flags', () => {
    it('returns the value when given as --flag=value', () => {
      expect(resolve(['--port=4000', '--host=a=b']).values).toMatchObject({ port: 4000, host: 'a=b' });
    });

    it('returns non-flag arguments as positionals in order', () => {
      expect(resolve(['overhead', '--port', '1', 'extra']).positionals).toEqual(['overhead', 'extra']);
    });

    it('returns the last value when a flag is repeated', () => {
      expect(resolve(['--port', '1', '--port', '2']).values.port).toBe(2);
    });

    it('throws naming the flag when the flag is unknown', () => {
      expect(message(['--nope'])).toBe('unknown flag --nope; --help lists the flags');
      expect(message(['--nope=1'])).toBe('unknown flag --nope; --help lists the flags');
    });

    it('throws naming the flag when its value is missing at the end', () => {
      expect(message(['--port'])).toBe('--port needs a value');
      expect(message(['--config'])).toBe('--config needs a value');
    });

    it('throws naming the flag when the next argument is another flag', () => {
      expect(message(['--host', '--port', '9000'])).toBe('--host needs a value');
      expect(message(['--port', '--host', 'x'])).toBe('--port needs a value');
    });
  });

  describe('durations', () => {
    it.each([
      ['250', 250],
      ['250ms', 250],
      ['30s', 30_000],
      ['5m', 300_000],
      ['1h', 3_600_000],
      ['1.5s', 1500],
      ['0', 0],
      [' 2s ', 2000],
    ])('returns %j as %d ms', (raw, ms) => {
      expect(resolve(['--placer-timeout', raw]).values.placerTimeout).toBe(ms);
    });

    it.each(['soon', '5 s', '-1s', 's', '1d', '1.5.2s', '', '1e3', '10sec'])(
      'throws naming the flag and the value when the duration is %j',
      (raw) => {
        expect(message([`--placer-timeout=${raw}`])).toBe(
          `invalid --placer-timeout ${JSON.stringify(raw)}: expected a duration like 500ms, 30s or 5m`,
        );
      },
    );

    it('returns a duration from the config file when given as a number of ms or a string', () => {
      expect(resolve(['--config', configFile({ placerTimeout: 1500 })]).values.placerTimeout).toBe(1500);
      expect(resolve(['--config', configFile({ placerTimeout: '5m' })]).values.placerTimeout).toBe(300_000);
    });

    it('returns a parsed default when the default is a duration string', () => {
      const table: Setting[] = [{ key: 'retryAllDelay', type: 'duration', default: '10ms', description: 'd' }];
      expect(resolve([], {}, table).values.retryAllDelay).toBe(10);
    });

    it('throws naming the default when a default string is not a duration', () => {
      const table: Setting[] = [{ key: 'retryAllDelay', type: 'duration', default: 'soon', description: 'd' }];
      expect(message([], {}, table)).toBe(
        'invalid default of --retry-all-delay "soon": expected a duration like 500ms, 30s or 5m',
      );
    });
  });

  describe('integers', () => {
    it.each([
      ['42', 42],
      ['-3', -3],
      ['0', 0],
    ])('returns %j as %d', (raw, n) => {
      expect(resolve(['--port', raw]).values.port).toBe(n);
    });

    it.each(['4.5', 'abc', '1e3', '0x10', ''])('throws naming the flag and value when the integer is %j', (raw) => {
      expect(message([`--port=${raw}`])).toBe(`invalid --port ${JSON.stringify(raw)}: expected an integer`);
    });

    it('throws naming the variable and value when a SLUICE_* or alias variable is bad', () => {
      expect(message([], { SLUICE_PORT: 'abc' })).toBe('invalid SLUICE_PORT "abc": expected an integer');
      expect(message([], { PORT: 'eighty' })).toBe('invalid PORT "eighty": expected an integer');
    });
  });

  describe('lists', () => {
    it('returns trimmed non-empty items when given a comma-separated string', () => {
      expect(resolve(['--runners', ' http://a:1, http://b:2,,http://c:3 ,']).values.runners).toEqual([
        'http://a:1',
        'http://b:2',
        'http://c:3',
      ]);
    });

    it('returns the items as strings when the config file has a JSON array', () => {
      expect(resolve(['--config', configFile({ runners: ['http://a:1', 2] })]).values.runners).toEqual([
        'http://a:1',
        '2',
      ]);
    });

    it('returns the items when the config file has a comma-separated string', () => {
      expect(resolve(['--config', configFile({ runners: 'x,y' })]).values.runners).toEqual(['x', 'y']);
    });

    it('returns a list default as given when nothing sets the value', () => {
      expect(resolve([]).values.model).toEqual(['sim-small', 'sim-large']);
    });
  });

  describe('booleans', () => {
    it('returns true when a boolean flag has no value', () => {
      expect(resolve(['--verbose']).values.verbose).toBe(true);
      expect(resolve(['--verbose', '--port', '1']).values).toMatchObject({ verbose: true, port: 1 });
    });

    it.each([
      [['--verbose', 'false'], false],
      [['--verbose=0'], false],
      [['--verbose=1'], true],
      [['--verbose', 'true'], true],
    ])('returns the value when given %j', (argv, value) => {
      expect(resolve(argv).values.verbose).toBe(value);
    });

    it('returns a boolean from SLUICE_* and from a JSON boolean in the config file', () => {
      expect(resolve([], { SLUICE_VERBOSE: '1' }).values.verbose).toBe(true);
      expect(resolve(['--config', configFile({ verbose: true })]).values.verbose).toBe(true);
    });

    it('throws naming the flag and value when the value is not true/false/1/0', () => {
      expect(message(['--verbose=yes'])).toBe('invalid --verbose "yes": expected true or false');
    });
  });

  describe('required settings', () => {
    const table: Setting[] = [{ key: 'engine', type: 'string', required: true, description: 'engine URL' }];

    it('throws naming the flag, variable and config key when a required setting is missing', () => {
      expect(message([], {}, table)).toBe(
        '--engine is required (or SLUICE_ENGINE, or "engine" in --config); --help describes it',
      );
    });

    it('returns the value when a required setting comes from the environment', () => {
      expect(resolve([], { SLUICE_ENGINE: 'http://127.0.0.1:8000' }, table).values.engine).toBe(
        'http://127.0.0.1:8000',
      );
    });
  });

  describe('config file', () => {
    it('throws naming the path when the file is not valid JSON', () => {
      const path = configFile('{"port": }');
      expect(message(['--config', path])).toMatch(new RegExp(`^--config ${path}: not valid JSON \\(.+\\)$`));
    });

    it('throws a one-line message when a multi-line config file is not valid JSON', () => {
      const path = configFile('{\n  "port": ,\n  "host": "x"\n}\n');
      const text = message(['--config', path]);
      expect(text).toMatch(new RegExp(`^--config ${path}: not valid JSON`));
      expect(text).not.toContain('\n');
    });

    it('throws naming the path and the error code when the file cannot be read', () => {
      const path = join(dir, 'missing.json');
      expect(message(['--config', path])).toBe(`--config ${path}: cannot read it (ENOENT)`);
    });

    it.each(['[1,2]', 'null', '"port"', '42'])('throws naming the path when the file holds %s', (text) => {
      const path = configFile(text);
      expect(message(['--config', path])).toBe(`--config ${path}: must hold a JSON object of settings`);
    });

    it('throws naming the path and the key when the file has an unknown setting', () => {
      const path = configFile({ port: 1, bogus: true });
      expect(message(['--config', path])).toBe(`--config ${path}: unknown setting "bogus"; --help lists the settings`);
    });

    it.each<[Record<string, unknown>, string]>([
      [{ port: true }, 'invalid port in PATH: expected an integer, got true'],
      [{ port: null }, 'invalid port in PATH: expected an integer, got null'],
      [{ port: 4.5 }, 'invalid port in PATH "4.5": expected an integer'],
      [{ host: 5 }, 'invalid host in PATH: expected a string, got 5'],
      [{ runners: { a: 1 } }, 'invalid runners in PATH: expected a comma-separated list, got {"a":1}'],
      [{ verbose: 'yes' }, 'invalid verbose in PATH "yes": expected true or false'],
      [{ verbose: 1 }, 'invalid verbose in PATH: expected true or false, got 1'],
      [{ placerTimeout: [1] }, 'invalid placerTimeout in PATH: expected a duration like 500ms, 30s or 5m, got [1]'],
    ])('throws naming the key, the file and the value when the file has %j', (content, expected) => {
      const path = configFile(content);
      expect(message(['--config', path])).toBe(expected.replace('PATH', path));
    });

    it.each<[string, string]>([
      ['port: true', 'invalid port in PATH: expected an integer, got true'],
      ['verbose: "yes"', 'invalid verbose in PATH "yes": expected true or false'],
      ['placerTimeout: [1]', 'invalid placerTimeout in PATH: expected a duration like 500ms, 30s or 5m, got [1]'],
      ['bogus: 1', 'PATH: unknown setting "bogus"; --help lists the settings'],
      ['- port', 'PATH: must hold a YAML object of settings'],
    ])('checks a YAML file %j as its JSON twin', (content, expected) => {
      const path = join(dir, `config-${++files}.yaml`);
      writeFileSync(path, content);
      expect(message(['--config', path])).toBe(
        expected.replace('PATH', expected.startsWith('PATH') ? `--config ${path}` : path),
      );
    });

    it('returns values from a YAML file, by extension or by content', () => {
      const yaml = 'port: 1\nhost: h\nrunners:\n  - a\nverbose: false\nplacerTimeout: 5s\n';
      const expected = { port: 1, host: 'h', runners: ['a'], verbose: false, placerTimeout: 5000 };
      for (const name of [`config-${++files}.yml`, `config-${++files}`]) {
        const path = join(dir, name);
        writeFileSync(path, yaml);
        expect(resolve(['--config', path]).values).toMatchObject(expected);
      }
    });

    it('throws one line with the line and column when a YAML file does not parse', () => {
      const path = join(dir, `config-${++files}.yaml`);
      writeFileSync(path, 'port: 1\nhost: a: b\n');
      expect(message(['--config', path])).toMatch(
        new RegExp(`^--config ${path}: not valid YAML \\(.+at line 2, column \\d+:\\)$`),
      );
    });

    it('returns values from the file when their JSON types fit', () => {
      const path = configFile({ port: 1, host: 'h', runners: ['a'], verbose: false, placerTimeout: 10 });
      expect(resolve(['--config', path]).values).toMatchObject({
        port: 1,
        host: 'h',
        runners: ['a'],
        verbose: false,
        placerTimeout: 10,
      });
    });
  });

  describe('--help', () => {
    it('returns help with no values and no checks when --help or -h is given', () => {
      const table: Setting[] = [...settings, { key: 'engine', type: 'string', required: true, description: 'e' }];
      const bad = configFile('not json');
      expect(resolve(['--help', '--config', bad], {}, table)).toEqual({ values: {}, positionals: [], help: true });
      expect(resolve(['bench', '-h'], { SLUICE_PORT: 'abc' }, table)).toEqual({
        values: {},
        positionals: ['bench'],
        help: true,
      });
    });
  });

  it('throws one-line messages naming where the value came from when any setting is bad', () => {
    const cases: Array<[string[], NodeJS.ProcessEnv]> = [
      [['--nope'], {}],
      [['--port'], {}],
      [['--port=1\n2'], {}],
      [[], { SLUICE_PLACER_TIMEOUT: '1\nh' }],
      [['--config', configFile('{"port": }')], {}],
      [['--config', configFile({ bogus: 1 })], {}],
      [['--config', configFile({ host: ['a\nb'] })], {}],
      [['--config', join(dir, 'nope.json')], {}],
    ];
    for (const [argv, env] of cases) {
      const text = message(argv, env);
      expect(text).not.toContain('\n');
      expect(text.length).toBeGreaterThan(0);
    }
    expect(message(['--port=1\n2'])).toBe('invalid --port "1\\n2": expected an integer');
  });

  it('throws errors with code CLI_INVALID_SETTING', () => {
    expect(settingsError(() => resolve(['--nope'])).code).toBe('CLI_INVALID_SETTING');
  });
});

describe('formatHelp', () => {
  const table: Setting[] = [...settings, { key: 'engine', type: 'string', required: true, description: 'engine URL' }];
  const help = formatHelp('sluice up [flags]', 'Starts a gateway.', table);
  const lines = help.split('\n');

  it('returns the usage and summary first', () => {
    expect(lines.slice(0, 3)).toEqual(['usage: sluice up [flags]', '', 'Starts a gateway.']);
  });

  it('returns one line per setting with its flag, type, description, default and env variables', () => {
    for (const s of table) {
      const rows = lines.filter((line) => line.trimStart().startsWith(`${flagOf(s.key)} `));
      expect(rows).toHaveLength(1);
      const row = rows[0]!;
      expect(row).toContain(`${flagOf(s.key)} <${s.type}>`);
      expect(row).toContain(s.description);
      expect(row).toContain(`env ${envOf(s.key)}`);
    }
  });

  it.each([
    ['--port', '(default 8080; env SLUICE_PORT, PORT)'],
    ['--host', '(default 127.0.0.1; env SLUICE_HOST)'],
    ['--placer-timeout', '(default 360s; env SLUICE_PLACER_TIMEOUT)'],
    ['--runners', '(default none; env SLUICE_RUNNERS)'],
    ['--model', '(default sim-small,sim-large; env SLUICE_MODEL)'],
    ['--verbose', '(default false; env SLUICE_VERBOSE)'],
    ['--engine', '(required; env SLUICE_ENGINE)'],
  ])('returns the %s row ending with %s', (flag, tail) => {
    const row = lines.find((line) => line.trimStart().startsWith(`${flag} `));
    expect(row?.endsWith(tail)).toBe(true);
  });

  it('returns the --config and --help rows and the precedence note', () => {
    expect(lines.some((line) => line.trimStart().startsWith('--config <path>') && line.includes('SLUICE_CONFIG'))).toBe(
      true,
    );
    expect(lines.some((line) => line.trimStart().startsWith('--help'))).toBe(true);
    expect(help).toContain('Precedence: flags, then environment, then the config file, then defaults.');
  });

  it('returns descriptions aligned in one column', () => {
    const columns = table.map((s) => {
      const row = lines.find((line) => line.trimStart().startsWith(`${flagOf(s.key)} `))!;
      return row.indexOf(s.description);
    });
    expect(new Set(columns).size).toBe(1);
  });
});

describe('json settings', () => {
  const table: readonly Setting[] = [{ key: 'profile', type: 'json', description: 'engine profile' }];

  it('returns an object given inline, from a file path, or nested in the config file', () => {
    expect(resolve(['--profile', '{"kind":"sim","port":8001}'], {}, table).values.profile).toEqual({
      kind: 'sim',
      port: 8001,
    });
    const file = configFile({ kind: 'vllm', model: 'm' });
    expect(resolve(['--profile', file], {}, table).values.profile).toEqual({ kind: 'vllm', model: 'm' });
    expect(resolve([], { SLUICE_PROFILE: file }, table).values.profile).toEqual({ kind: 'vllm', model: 'm' });
    const config = configFile({ profile: { kind: 'sglang' } });
    expect(resolve(['--config', config], {}, table).values.profile).toEqual({ kind: 'sglang' });
  });

  it('throws one line naming the flag when the JSON is bad, not an object, or the file is missing', () => {
    expect(message(['--profile', '{"kind":'], {}, table)).toMatch(
      /^invalid --profile: inline JSON is not valid JSON \(.+\)$/,
    );
    expect(message(['--profile', configFile('[1]')], {}, table)).toBe(
      'invalid --profile: expected a JSON object, got [1]',
    );
    expect(message(['--profile', join(dir, 'none.json')], {}, table)).toMatch(
      /^invalid --profile: cannot read .*none\.json \(ENOENT\)$/,
    );
    expect(message(['--config', configFile({ profile: 3 })], {}, table)).toMatch(
      /^invalid profile in .*: expected a JSON object, inline or in a file, got 3$/,
    );
  });
});

describe('secret settings', () => {
  const TOKEN = 'tok-0123456789abcdef';
  const table: readonly Setting[] = [
    { key: 'runnerToken', type: 'string', secret: true, description: 'shared token' },
    { key: 'store', type: 'string', secret: 'url', default: 'memory', description: 'store URL' },
    { key: 'gateway', type: 'list', secret: 'url', description: 'gateway URLs' },
    { key: 'retries', type: 'integer', secret: true, description: 'a secret number, for the parse path' },
    { key: 'port', type: 'integer', default: 8080, description: 'port' },
  ];

  it('throws without the value when a secret setting cannot be parsed, by flag or variable', () => {
    const byFlag = message(['--retries', TOKEN], {}, table);
    expect(byFlag).toBe('invalid --retries *** (hidden: a secret): expected an integer');
    expect(message([], { SLUICE_RETRIES: TOKEN }, table)).not.toContain(TOKEN);
  });

  it('throws without the value when the config file gives a secret the wrong type', () => {
    const text = message(['--config', configFile({ runnerToken: [TOKEN] })], {}, table);
    expect(text).toMatch(/^invalid runnerToken in .*: expected a string, got \*\*\* \(hidden: a secret\)$/);
  });

  it('throws with the URL password masked when a URL-valued secret is quoted', () => {
    const text = message(['--config', configFile({ store: { url: 'redis://u:pw-123456@h:1' } })], {}, table);
    expect(text).not.toContain('pw-123456');
  });

  it('returns the secrets among resolved values: whole tokens, and URL passwords as given and decoded', () => {
    const { values } = resolve(
      ['--runner-token', TOKEN, '--store', 'redis://u:p%21ss@h:1/0', '--gateway', 'http://a:1,http://t0ken99@b:2'],
      {},
      table,
    );
    expect(secretValues(table, values).sort()).toEqual([TOKEN, 'p!ss', 'p%21ss', 't0ken99'].sort());
    expect(secretValues(table, resolve([], {}, table).values)).toEqual([]);
  });

  it('returns the secrets in a secret file for the redactor, shows its path, and nothing for a file it cannot use', () => {
    const fileTable: readonly Setting[] = [
      { key: 'runnerTokenFile', type: 'string', secret: 'file', description: 'token file' },
    ];
    const path = configFile(`# tokens\n${TOKEN}\nold-${TOKEN}\n`);
    chmodSync(path, 0o600);
    expect(secretValues(fileTable, resolve(['--runner-token-file', path], {}, fileTable).values)).toEqual([
      TOKEN,
      `old-${TOKEN}`,
    ]);
    expect(showSetting(fileTable[0]!, path)).toBe(JSON.stringify(path));
    // The command reading the file reports why it cannot be used; the redactor just has nothing from it.
    expect(secretValues(fileTable, { runnerTokenFile: join(path, 'missing') })).toEqual([]);
  });

  it('returns secret settings in --help with the flag and variable but never a secret default', () => {
    const help = formatHelp('sluice x', 'summary', [
      { key: 'runnerToken', type: 'string', secret: true, default: TOKEN, description: 'shared token' },
      { key: 'store', type: 'string', secret: 'url', default: 'redis://u:pw-123456@h:1', description: 'store URL' },
    ]);
    expect(help).toContain('--runner-token <string>');
    expect(help).toContain('env SLUICE_RUNNER_TOKEN');
    expect(help).not.toContain(TOKEN);
    expect(help).toContain('default redis://u:***@h:1');
  });

  it('quotes a value as JSON, hidden for a secret and masked for a URL secret', () => {
    expect(showSetting(table[4]!, 'x')).toBe('"x"');
    expect(showSetting(table[0]!, TOKEN)).toBe('*** (hidden: a secret)');
    expect(showSetting(table[1]!, 'redis://u:pw@h:1')).toBe('"redis://u:***@h:1"');
    expect(showSetting(table[1]!, ['redis://u:pw@h:1'])).toBe('*** (hidden: a secret)');
  });
});

describe('repeatable list settings', () => {
  const table: Setting[] = [
    { key: 'engineBinary', type: 'list', repeatable: true, description: 'x' },
    { key: 'label', type: 'list', description: 'y' },
  ];

  it('adds a repeated repeatable flag to itself, and keeps the last of any other list', () => {
    const { values } = resolveSettings(
      table,
      ['--engine-binary', 'vllm=/a', '--engine-binary=sim=/b,tgi=/c', '--label', 'a=1', '--label', 'b=2'],
      {},
    );
    expect(values.engineBinary).toEqual(['vllm=/a', 'sim=/b', 'tgi=/c']);
    expect(values.label).toEqual(['b=2']);
  });
});
