/** gateway/cli/command.ts and settings.ts: the settings helpers the commands share (a secret's file twin, the secrets given, lingering). */
import { describe, expect, it } from 'vitest';
import { secretLines, settingsOf } from '../../../gateway/cli/command.ts';
import { lingerSettings, withSecretFile } from '../../../gateway/cli/settings.ts';

/** Reads a "file" as its path's letters, one a line, recording what it was asked. */
function reader() {
  const asked: [string, string][] = [];
  const read = (option: string, path: string) => {
    asked.push([option, path]);
    return path.split('');
  };
  return { read, asked };
}

describe('withSecretFile', () => {
  it('returns the setting and its file twin, which names the flag it stands in for and shows no default', () => {
    const token = { key: 'viewerToken', type: 'string', secret: true, description: 'the token' } as const;
    expect(withSecretFile(token, 'viewer tokens, one a line')).toEqual([
      token,
      {
        key: 'viewerTokenFile',
        type: 'string',
        secret: 'file',
        description: 'file of viewer tokens, one a line; not readable by other users; instead of --viewer-token',
        defaultText: 'none',
      },
    ]);
  });
});

describe('secretLines', () => {
  it.each([
    ['neither is given', {}, undefined, []],
    ['the secret is given as one value', { callSecret: 's1' }, ['s1'], []],
    ['the secret is given as a list', { callSecret: ['s1', 's2'] }, ['s1', 's2'], []],
    ['the file is given', { callSecretFile: 'ab' }, ['a', 'b'], [['callSecretFile', 'ab']]],
  ])('returns the secrets when %s', (_, values, expected, asked) => {
    const files = reader();
    expect(secretLines(values, 'callSecret', files.read)).toEqual(expected);
    expect(files.asked).toEqual(asked);
  });

  it('throws naming both flags when the secret and its file are both given, and reads nothing', () => {
    const files = reader();
    expect(() => secretLines({ callSecret: 's', callSecretFile: 'f' }, 'callSecret', files.read)).toThrow(
      'give --call-secret or --call-secret-file, not both',
    );
    expect(files.asked).toEqual([]);
  });
});

describe('lingerSettings', () => {
  it('returns the three lingering settings with the defaults object given, lingerTime described by the caller', () => {
    const of = settingsOf({ lingerTime: 1, lingerIdleTimeout: 2, lingerMaxBytes: 3 });
    expect(lingerSettings(of, 'after an early answer').map((s) => [s.key, s.type, s.libraryDefault])).toEqual([
      ['lingerTime', 'duration', 1],
      ['lingerIdleTimeout', 'duration', 2],
      ['lingerMaxBytes', 'integer', 3],
    ]);
    expect(lingerSettings(of, 'after an early answer')[0]!.description).toBe('after an early answer');
  });
});
