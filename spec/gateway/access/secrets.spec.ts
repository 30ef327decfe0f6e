/**
 * Secret files and secret lists: what a file may hold, which files are refused (each message
 * naming the file and never its content), and a list matched by position.
 */
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { SecretList, readSecretLines, secretDigest } from '../../../gateway/access/secrets.ts';
import { SecretFileError } from '../../../gateway/errors.ts';

const dir = mkdtempSync(join(tmpdir(), 'sluice-secret-files-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let files = 0;
/** Writes `text` to a fresh file with `mode`, and returns its path. */
function secretFile(text: string, mode = 0o600): string {
  const path = join(dir, `secret-${++files}`);
  writeFileSync(path, text);
  chmodSync(path, mode);
  return path;
}

function refusal(path: string): SecretFileError {
  try {
    readSecretLines('runnerTokenFile', path);
  } catch (error) {
    expect(error).toBeInstanceOf(SecretFileError);
    expect((error as SecretFileError).code).toBe('GW_SECRET_FILE_INVALID');
    return error as SecretFileError;
  }
  throw new Error(`${path} was not refused`);
}

/**
 * The refusal's message for `path`, read by a child running as `nobody`: root reads any file
 * whatever its mode, so the unreadable case is read by a user the mode bits do stop.
 */
function refusalAsNobody(path: string): string {
  chmodSync(dir, 0o711); // nobody may reach the file, not list the folder
  const script = `
    const { readSecretLines } = await import(${JSON.stringify(new URL('../../../gateway/access/secrets.ts', import.meta.url).href)});
    try { readSecretLines('runnerTokenFile', ${JSON.stringify(path)}); console.log('read'); }
    catch (error) { console.log(error.code + ' ' + error.message); }`;
  const run = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
    cwd: fileURLToPath(new URL('../../..', import.meta.url)),
    uid: 65534,
    gid: 65534,
    encoding: 'utf8',
    timeout: 20_000,
  });
  expect(run.status, run.stderr).toBe(0);
  const [code, ...words] = run.stdout.trim().split(' ');
  expect(code).toBe('GW_SECRET_FILE_INVALID');
  return words.join(' ');
}

describe('readSecretLines', () => {
  it('returns the secrets in order, trimmed, skipping blank lines and # comments, with CRLF or LF', () => {
    const path = secretFile(
      '# rotated 2026-12-01: new first\r\n  new-token-0123456789  \r\n\r\nold-token-0123456789\n',
    );
    expect(readSecretLines('runnerTokenFile', path)).toEqual(['new-token-0123456789', 'old-token-0123456789']);
  });

  it.each([0o600, 0o640, 0o400, 0o440])('takes a file of mode %s', (mode) => {
    expect(readSecretLines('x', secretFile('a-secret-of-some-length', mode))).toEqual(['a-secret-of-some-length']);
  });

  it.skipIf(process.platform === 'win32')('names an unreadable file and the reason', () => {
    const path = secretFile('unreadable-secret-value', 0o000);
    const message = process.getuid?.() === 0 ? refusalAsNobody(path) : refusal(path).message;
    expect(message).toMatch(/^runnerTokenFile ".*secret-\d+" cannot be read \(EACCES\)$/);
    expect(message).not.toContain('unreadable-secret-value');
  });

  it('names a missing file and the reason', () => {
    expect(refusal(join(dir, 'nope')).message).toBe(
      `runnerTokenFile ${JSON.stringify(join(dir, 'nope'))} cannot be read (ENOENT)`,
    );
  });

  it.skipIf(process.platform === 'win32').each([0o644, 0o604, 0o666, 0o777])(
    'refuses a file of mode %s that any user may read, without its content',
    (mode) => {
      const path = secretFile('world-readable-secret-value', mode);
      const error = refusal(path);
      expect(error.message).toBe(
        `runnerTokenFile ${JSON.stringify(path)} may be read by any user of this machine (mode ${mode.toString(8)}); chmod o-r it (640 or 600)`,
      );
      expect(error.message).not.toContain('world-readable-secret-value');
    },
  );

  it.each(['', '\n\n', '   \n', '# only a comment\n'])('refuses a file that holds no secret: %j', (text) => {
    const path = secretFile(text);
    expect(refusal(path).message).toBe(
      `runnerTokenFile ${JSON.stringify(path)} holds no secret: every line is blank or a # comment`,
    );
  });

  it('refuses a directory', () => {
    expect(refusal(dir).message).toMatch(/cannot be read \(EISDIR\)/);
  });
});

describe('SecretList', () => {
  const list = new SecretList(['newest-token-000000', 'older-token-1111111', 'oldest-token-222222']);

  it('answers with the position of the secret presented', () => {
    expect(list.size).toBe(3);
    expect(list.match('newest-token-000000')).toBe(0);
    expect(list.match('older-token-1111111')).toBe(1);
    expect(list.match('oldest-token-222222')).toBe(2);
    // The same answer for a secret hashed once by the caller.
    expect(list.matchDigest(secretDigest('older-token-1111111'))).toBe(1);
    expect(list.matchDigest(secretDigest('older-token-111111'))).toBeUndefined();
  });

  it.each(['', 'newest-token-00000', 'newest-token-0000000', 'NEWEST-TOKEN-000000', ' newest-token-000000'])(
    'matches nothing for %j',
    (presented) => {
      expect(list.match(presented)).toBeUndefined();
    },
  );

  it('matches nothing when empty', () => {
    expect(new SecretList([]).match('anything')).toBeUndefined();
    expect(new SecretList([]).size).toBe(0);
  });
});
