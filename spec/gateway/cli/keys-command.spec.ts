import { describe, expect, it } from 'vitest';
import { parseKeysFile } from '../../../gateway/access/keys-file.ts';
import { KeyRing, hashToken, keyIdOf } from '../../../gateway/access/keys.ts';
import { newKeyText } from '../../../gateway/cli/keys-command.ts';
import { SettingsError } from '../../../gateway/cli/settings.ts';
import { expectThrows } from '../../support/throws.ts';

const TOKEN = `sk-sluice-${'x'.repeat(43)}`;

describe('sluice keys new', () => {
  it('prints the key once and a keys-file entry that makes it work', () => {
    const text = newKeyText({ name: 'ci', models: ['m1'], requestsPerMinute: 60, concurrentCalls: 2 }, TOKEN);
    const lines = text.trimEnd().split('\n');
    expect(lines[0]).toBe(`key (shown once; give it to the client, keep no copy): ${TOKEN}`);
    expect(lines[1]).toBe(`id: ${keyIdOf(hashToken(TOKEN))}`);
    expect(text.split(TOKEN)).toHaveLength(2);
    const keys = new KeyRing();
    keys.setFileKeys(parseKeysFile(`[${lines[3]}]`, 'keys.json'));
    expect(keys.lookup(TOKEN)).toEqual({
      id: keyIdOf(hashToken(TOKEN)),
      name: 'ci',
      models: ['m1'],
      limits: { requestsPerMinute: 60, concurrentCalls: 2 },
    });
  });

  it('leaves limits out of the entry when none is given', () => {
    expect(newKeyText({ name: 'open' }, TOKEN).split('\n')[3]).toBe(
      `{"name":"open","hash":"sha256:${hashToken(TOKEN)}"}`,
    );
  });

  it('refuses a limit that is not a positive integer, naming it', () => {
    expectThrows(() => newKeyText({ name: 'x', storedBytes: 0 }, TOKEN), SettingsError, {
      message: 'sluice keys new: limits.storedBytes must be a positive integer, got 0',
    });
  });
});

describe('keys command table', () => {
  it('has no library default behind any flag, and requires --name', async () => {
    const { keys } = await import('../../../gateway/cli/keys-command.ts');
    expect(keys.settings.filter((s) => s.libraryDefault !== undefined || s.default !== undefined)).toEqual([]);
    expect(keys.settings.filter((s) => s.required).map((s) => s.key)).toEqual(['name']);
  });
});
