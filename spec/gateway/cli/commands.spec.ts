import { execFileSync } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { benchDefaults } from '../../../k6/driver/options.ts';
import { scenarios } from '../../../k6/driver/index.ts';
import { callbackPolicyDefaults } from '../../../gateway/callbacks/index.ts';
import { redisDefaults } from '../../../gateway/store/index.ts';
import { batchSettingDefaults } from '../../../gateway/cli/batch-settings.ts';
import { commands, loadCommand } from '../../../gateway/cli/commands.ts';
import { SLUICE_BIN } from '../../../gateway/cli/entry.ts';
import { flagOf, formatDefault, formatHelp, parseSetting, resolveSettings } from '../../../gateway/cli/settings.ts';
import type { Setting } from '../../../gateway/cli/settings.ts';
import { gatewayDefaults } from '../../../gateway/options.ts';
import { placerDefaults } from '../../../placer/options.ts';
import { simEngineDefaults } from '../../../runner/engines/sim/options.ts';
import { runnerDefaults } from '../../../runner/options.ts';

const gateway = {
  ...placerDefaults,
  ...gatewayDefaults,
  callbackAllowPrivate: callbackPolicyDefaults.allowPrivate,
  redisConnectTimeout: redisDefaults.connectTimeout,
  ...batchSettingDefaults,
};
const sim = {
  ...simEngineDefaults,
  model: simEngineDefaults.models,
  failureRate429: simEngineDefaults.failureRate[429],
  failureRate503: simEngineDefaults.failureRate[503],
  failureRate500: simEngineDefaults.failureRate[500],
};

/** For each command, the library defaults its settings feed: the one source --help must agree with. */
const libraryDefaults: Record<string, Record<string, unknown>> = {
  gateway,
  runner: runnerDefaults,
  'sim-engine': sim,
  // up's slots are the runner's; its gateway and engine settings those of gateway and sim-engine.
  up: { ...sim, ...gateway, slots: runnerDefaults.slots },
  bench: benchDefaults,
};
/** Commands with no library behind their flags (keys new: every flag is the new key's own), checked in their own specs. */
const ownFlagsOnly = new Set(['keys']);

/** The help line of `setting` in `help`. */
function rowOf(help: string, setting: Setting): string {
  const row = help.split('\n').find((line) => line.startsWith(`  ${flagOf(setting.key)} `));
  expect(row, flagOf(setting.key)).toBeDefined();
  return row!;
}

describe('command tables', () => {
  it.each(Object.keys(commands).filter((name) => !ownFlagsOnly.has(name)))(
    '%s: --help shows the library default of every flag that has one, and the CLI leaves it out',
    async (name) => {
      const command = (await loadCommand(name))!;
      const defaults = libraryDefaults[name]!;
      const help = formatHelp(`sluice ${name}`, command.summary, command.settings);
      const resolved = resolveSettings(command.settings, [], {}).values;
      let checked = 0;
      for (const setting of command.settings) {
        if (!Object.hasOwn(defaults, setting.key)) {
          // A flag no library default stands behind shows none of its own making up: the command's own default, or words.
          expect(setting.libraryDefault, flagOf(setting.key)).toBeUndefined();
          continue;
        }
        const expected = defaults[setting.key] as string | number | boolean | readonly string[];
        const shown = formatDefault(setting, expected);
        expect(rowOf(help, setting), flagOf(setting.key)).toContain(`(default ${shown};`);
        // What help shows parses back to the library's value.
        expect(parseSetting(setting, shown), flagOf(setting.key)).toEqual(
          Array.isArray(expected) ? [...expected] : expected,
        );
        if (setting.default === undefined) {
          // A default that differs by bench scenario is words that start with the common one.
          if (setting.libraryDefault === undefined)
            expect(setting.defaultText, flagOf(setting.key)).toMatch(new RegExp(`^${shown};`));
          else expect(setting.libraryDefault, flagOf(setting.key)).toEqual(expected);
          expect(resolved[setting.key], `${flagOf(setting.key)} is passed only when given`).toBeUndefined();
        } else {
          // The few the command applies itself (bench's log level, its own too) take the library's value.
          expect(setting.default, flagOf(setting.key)).toEqual(expected);
        }
        checked++;
      }
      expect(checked).toBeGreaterThan(0);
    },
  );

  it('gives every gateway default a flag of gateway', async () => {
    const keys = new Set((await loadCommand('gateway'))!.settings.map((s) => s.key));
    const codeOnly = ['logger', 'clock'];
    expect(Object.keys(gatewayDefaults).filter((key) => !keys.has(key) && !codeOnly.includes(key))).toEqual([]);
  });

  it('returns undefined for an unknown command', () => {
    expect(loadCommand('nope')).toBeUndefined();
    expect(loadCommand('toString')).toBeUndefined();
  });
});

describe('sluice --help', () => {
  it('lists every bench scenario, read from the bench', () => {
    const text = execFileSync(process.execPath, [SLUICE_BIN, '--help'], { encoding: 'utf8' });
    const line = text.split('\n').find((l) => l.trimStart().startsWith('bench '));
    expect(line).toBe(`  bench        benchmark scenarios: ${Object.keys(scenarios).join(', ')}`);
    expect(Object.keys(scenarios)).toContain('soak');
  });
});

describe('the bench beside the CLI', () => {
  it('is loaded only by the bench command, which only commands.ts loads, by dynamic import', () => {
    const dir = join(import.meta.dirname, '../../../gateway/cli');
    const found: string[] = [];
    for (const file of readdirSync(dir).filter((f) => /\.(ts|mjs)$/.test(f))) {
      const text = readFileSync(join(dir, file), 'utf8');
      for (const m of text.matchAll(/(import\s*\(|from)\s*'([^']*(?:k6\/|bench-command)[^']*)'/g))
        found.push(`${file} ${m[1]!.startsWith('import') ? 'dynamic' : 'static'} ${m[2]}`);
    }
    expect(found.length).toBeGreaterThan(0);
    expect(new Set(found)).toEqual(
      new Set(['bench-command.ts static ../../k6/driver/index.ts', 'commands.ts dynamic ./bench-command.ts']),
    );
  });
});
