/**
 * One environment variable means one thing across every command: the spec walks each command's
 * settings table, as main reads it (its env prefix included), and fails when one variable would
 * set settings of different keys or types, as SLUICE_RUNNERS once set the gateway's runner URLs,
 * up's runner count and the bench's simulated fleet size.
 */
import { describe, expect, it } from 'vitest';
import { commands } from '../../../gateway/cli/commands.ts';
import type { Command } from '../../../gateway/cli/commands.ts';
import { envNamesOf, resolveSettings } from '../../../gateway/cli/settings.ts';
import type { Setting, SettingType } from '../../../gateway/cli/settings.ts';

/**
 * What a value means, as far as a table says: its key, and its type, a string and a list being
 * one (the runner takes several call secrets where the gateway signs with one).
 */
const meaning = (s: Setting): string => `${s.key}:${(s.type === 'list' ? 'string' : s.type) satisfies SettingType}`;

/** Each variable read by more than one meaning, with the `command --flag` readings that clash. */
function collisions(tables: Readonly<Record<string, Pick<Command, 'settings' | 'envPrefix'>>>): string[] {
  const readers = new Map<string, Map<string, string[]>>();
  for (const [name, command] of Object.entries(tables)) {
    for (const s of command.settings) {
      for (const env of envNamesOf(s, command.envPrefix)) {
        const byMeaning = readers.get(env) ?? new Map<string, string[]>();
        byMeaning.set(meaning(s), [...(byMeaning.get(meaning(s)) ?? []), `${name} ${s.key}`]);
        readers.set(env, byMeaning);
      }
    }
  }
  return [...readers]
    .filter(([, byMeaning]) => byMeaning.size > 1)
    .map(([env, byMeaning]) => `${env}: ${[...byMeaning.keys()].join(' / ')}`);
}

async function allCommands(): Promise<Record<string, Command>> {
  const loaded: Record<string, Command> = {};
  for (const [name, load] of Object.entries(commands)) loaded[name] = await load();
  return loaded;
}

describe('environment variable names', () => {
  it('gives every variable one meaning across all commands', async () => {
    expect(collisions(await allCommands())).toEqual([]);
  });

  it('sees a variable two commands read with different types (the rule reads real tables)', () => {
    const gateway = { settings: [{ key: 'runners', type: 'list', description: 'urls' }] satisfies Setting[] };
    const bench = { settings: [{ key: 'runners', type: 'integer', description: 'a count' }] satisfies Setting[] };
    expect(collisions({ gateway, bench })).toEqual(['SLUICE_RUNNERS: runners:string / runners:integer']);
    expect(collisions({ gateway, bench: { ...bench, envPrefix: 'BENCH' } })).toEqual([]);
  });

  it('reads each setting whose name means other things elsewhere from a variable of its own', async () => {
    const expected: Record<string, Record<string, string>> = {
      bench: { runners: 'SLUICE_BENCH_RUNNERS', logLevel: 'SLUICE_BENCH_LOG_LEVEL' },
      keys: { name: 'SLUICE_KEYS_NAME', models: 'SLUICE_KEYS_MODELS' },
      up: { runners: 'SLUICE_UP_RUNNERS', profile: 'SLUICE_SIM_PROFILE', port: 'SLUICE_PORT' },
      'sim-engine': { profile: 'SLUICE_SIM_PROFILE' },
      gateway: { runners: 'SLUICE_RUNNERS' },
      runner: { profile: 'SLUICE_PROFILE' },
    };
    const loaded = await allCommands();
    const read: Record<string, Record<string, string>> = {};
    for (const [name, keys] of Object.entries(expected)) {
      const command = loaded[name]!;
      read[name] = Object.fromEntries(
        Object.keys(keys).map((key) => {
          const setting = command.settings.find((s) => s.key === key)!;
          return [key, envNamesOf(setting, command.envPrefix)[0]!];
        }),
      );
    }
    expect(read).toEqual(expected);
  });

  it('reads a prefixed command from its own variables and its own config variable only', async () => {
    const { keys } = await allCommands();
    const env = { SLUICE_NAME: 'not-this', SLUICE_KEYS_NAME: 'ci', SLUICE_CONFIG: '/nonexistent/gateway.json' };
    expect(resolveSettings(keys!.settings, ['new'], env, keys!).values.name).toBe('ci');
    expect(() => resolveSettings(keys!.settings, ['new'], { SLUICE_NAME: 'x' }, keys!)).toThrow(/SLUICE_KEYS_NAME/);
  });
});
