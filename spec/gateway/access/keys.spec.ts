import { mkdtemp, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { KeyRing, KEY_PREFIX, allowsModel, hashToken, keyIdOf, newKeyToken } from '../../../gateway/access/keys.ts';
import { parseKeysFile, watchKeysFile } from '../../../gateway/access/keys-file.ts';
import type { KeysFileWatch } from '../../../gateway/access/keys-file.ts';
import { InvalidBodyError, KeyInFileError, KeyNotFoundError, KeysFileError } from '../../../gateway/errors.ts';
import type { LogFields } from '../../../placer/kernel/index.ts';
import { eventually } from '../../support/fleet.ts';
import { warningRecorder } from '../../support/logger.ts';
import { expectThrows } from '../../support/throws.ts';

const ALICE = `${KEY_PREFIX}${'a'.repeat(43)}`;
const BOB = `${KEY_PREFIX}${'b'.repeat(43)}`;
const entry = (token: string, extra: Record<string, unknown> = {}) => ({
  name: token === ALICE ? 'alice' : 'bob',
  hash: `sha256:${hashToken(token)}`,
  ...extra,
});

describe('client key tokens', () => {
  it('are sk-sluice- and 32 random bytes in base64url, different each time', () => {
    const token = newKeyToken();
    expect(token).toMatch(/^sk-sluice-[A-Za-z0-9_-]{43}$/);
    expect(newKeyToken()).not.toBe(token);
    expect(newKeyToken(() => Buffer.alloc(32, 0xff))).toBe(`sk-sluice-${'_'.repeat(42)}8`);
  });

  it('are known by the first 16 hex digits of their SHA-256', () => {
    expect(hashToken('abc')).toBe('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
    expect(keyIdOf(hashToken('abc'))).toBe('ba7816bf8f01cfea');
  });
});

describe('parseKeysFile', () => {
  it('reads names, digests, allow-lists and limits', () => {
    const keys = parseKeysFile(
      JSON.stringify([
        entry(ALICE, { models: ['m1'], limits: { requestsPerMinute: 60, storedBytes: 1000 } }),
        entry(BOB),
      ]),
      'keys.json',
    );
    expect(keys).toEqual([
      { name: 'alice', digest: hashToken(ALICE), models: ['m1'], limits: { requestsPerMinute: 60, storedBytes: 1000 } },
      { name: 'bob', digest: hashToken(BOB), limits: {} },
    ]);
  });

  const table: [string, unknown, string][] = [
    ['a list', { name: 'x' }, 'keys file keys.json must be a JSON list of keys, got object'],
    [
      'a name',
      [{ hash: `sha256:${hashToken(ALICE)}` }],
      'entry 0: name must be a non-empty string of at most 200 characters, got undefined',
    ],
    [
      'a sha256 hash',
      [{ name: 'a', hash: hashToken(ALICE) }],
      `entry 0 ("a"): hash must be "sha256:" and 64 lower-case hex digits (sluice keys new prints one), got "${hashToken(ALICE)}"`,
    ],
    ['known fields', [entry(ALICE, { model: ['m'] })], 'entry 0 ("alice"): unknown field "model"'],
    [
      'known limits',
      [entry(ALICE, { limits: { rpm: 5 } })],
      'entry 0 ("alice"): limits.rpm is not a limit (requestsPerMinute, tokensPerMinute, concurrentCalls, storedBytes, defaultMaxTokens)',
    ],
    [
      'positive integer limits',
      [entry(ALICE, { limits: { concurrentCalls: 0 } })],
      'entry 0 ("alice"): limits.concurrentCalls must be a positive integer, got 0',
    ],
    [
      'a non-empty model list',
      [entry(ALICE, { models: [] })],
      'entry 0 ("alice"): models must be a non-empty list of at most 1000 model names, got []',
    ],
    [
      'model names',
      [entry(ALICE, { models: ['m', ''] })],
      'entry 0 ("alice"): models[1] must be a non-empty string, got ""',
    ],
    [
      'each key once',
      [entry(ALICE), { ...entry(ALICE), name: 'again' }],
      'entry 1 ("again"): hash is the same key as entry 0 ("alice")\'s',
    ],
    ['objects', [7], 'entry 0: must be an object, got 7'],
  ];
  for (const [what, value, message] of table) {
    it(`wants ${what}`, () => {
      const error = expectThrows(() => parseKeysFile(JSON.stringify(value), 'keys.json'), KeysFileError, {
        code: 'GW_INVALID_KEYS_FILE',
      });
      expect(error.message).toContain(message);
    });
  }

  it('names every problem of every entry in one message', () => {
    const error = expectThrows(
      () =>
        parseKeysFile(
          JSON.stringify([{ name: '', hash: 'x' }, entry(BOB, { limits: { tokensPerMinute: 1.5 } })]),
          'keys.json',
        ),
      KeysFileError,
      {},
    );
    expect(error.message).toBe(
      'keys file keys.json: entry 0 (""): name must be a non-empty string of at most 200 characters, got ""; ' +
        'entry 0 (""): hash must be "sha256:" and 64 lower-case hex digits (sluice keys new prints one), got "x"; ' +
        'entry 1 ("bob"): limits.tokensPerMinute must be a positive integer, got 1.5',
    );
  });

  it('reads a YAML keys file as its JSON twin, and refuses its problems alike', () => {
    const yaml = [
      '- name: alice',
      `  hash: sha256:${hashToken(ALICE)}`,
      '  models: [m1]',
      '  limits: {requestsPerMinute: 60}',
      '- name: bob',
      `  hash: sha256:${hashToken(BOB)}`,
    ].join('\n');
    expect(parseKeysFile(yaml, 'keys.yaml')).toEqual([
      { name: 'alice', digest: hashToken(ALICE), models: ['m1'], limits: { requestsPerMinute: 60 } },
      { name: 'bob', digest: hashToken(BOB), limits: {} },
    ]);
    expectThrows(() => parseKeysFile('- name: a\n  hash: x', 'keys.yml'), KeysFileError, {
      code: 'GW_INVALID_KEYS_FILE',
      message:
        'keys file keys.yml: entry 0 ("a"): hash must be "sha256:" and 64 lower-case hex digits (sluice keys new prints one), got "x"',
    });
  });

  it('says when the text is not JSON', () => {
    expectThrows(() => parseKeysFile('[{', 'keys.json'), KeysFileError, {});
  });
});

describe('KeyRing', () => {
  it('finds a key by its token, never by its digest or id', () => {
    const keys = new KeyRing();
    expect(keys.size).toBe(0);
    keys.setFileKeys(parseKeysFile(JSON.stringify([entry(ALICE, { models: ['m1'] })]), 'k'));
    expect(keys.size).toBe(1);
    expect(keys.lookup(ALICE)).toEqual({ id: keyIdOf(hashToken(ALICE)), name: 'alice', models: ['m1'], limits: {} });
    expect(keys.lookup(BOB)).toBeUndefined();
    expect(keys.lookup(hashToken(ALICE))).toBeUndefined();
    expect(keys.lookup(keyIdOf(hashToken(ALICE)))).toBeUndefined();
  });

  it('creates a key whose token is answered once and works at once; lists it without token or digest; deletes it', async () => {
    const keys = new KeyRing({ clock: { now: () => 1234 } });
    const created = await keys.create({ name: 'ci', models: ['m1'], limits: { requestsPerMinute: 5 } });
    expect(created.key).toMatch(/^sk-sluice-/);
    const record = {
      id: keyIdOf(hashToken(created.key)),
      name: 'ci',
      models: ['m1'],
      limits: { requestsPerMinute: 5 },
      source: 'api',
      createdAt: 1234,
    };
    expect(created.record).toEqual(record);
    expect(keys.lookup(created.key)).toMatchObject({ id: record.id, name: 'ci' });
    expect(keys.list()).toEqual([record]);
    expect(JSON.stringify(keys.list())).not.toContain(hashToken(created.key));
    await keys.delete(record.id);
    expect(keys.lookup(created.key)).toBeUndefined();
    expect(keys.list()).toEqual([]);
    await expect(keys.delete(record.id)).rejects.toBeInstanceOf(KeyNotFoundError);
  });

  it('refuses to delete a keys-file key, and a create body with bad fields, naming each', async () => {
    const keys = new KeyRing();
    keys.setFileKeys(parseKeysFile(JSON.stringify([entry(ALICE)]), 'k'));
    await expect(keys.delete(keyIdOf(hashToken(ALICE)))).rejects.toBeInstanceOf(KeyInFileError);
    const refusal = await keys.create({ name: 7, limits: { requestsPerMinute: -1 } }).catch((error: unknown) => error);
    expect(refusal).toBeInstanceOf(InvalidBodyError);
    expect((refusal as Error).message).toBe(
      'key: name must be a non-empty string of at most 200 characters, got 7; key: limits.requestsPerMinute must be a positive integer, got -1',
    );
    expect(keys.list().map((r) => r.source)).toEqual(['file']);
  });

  it('forgets a token it has seen as soon as the keys change: a key taken out of the file stops working, a changed one answers with its new limits', () => {
    const keys = new KeyRing();
    keys.setFileKeys(parseKeysFile(JSON.stringify([entry(ALICE), entry(BOB)]), 'k'));
    expect(keys.lookup(ALICE)?.name).toBe('alice');
    expect(keys.lookup(BOB)?.limits).toEqual({});
    keys.setFileKeys(parseKeysFile(JSON.stringify([entry(BOB, { limits: { requestsPerMinute: 3 } })]), 'k'));
    expect(keys.lookup(ALICE)).toBeUndefined();
    expect(keys.lookup(BOB)?.limits).toEqual({ requestsPerMinute: 3 });
  });

  it('keeps API keys when the file keys are replaced', async () => {
    const keys = new KeyRing();
    const created = await keys.create({ name: 'api' });
    keys.setFileKeys(parseKeysFile(JSON.stringify([entry(ALICE)]), 'k'));
    keys.setFileKeys([]);
    expect(keys.lookup(created.key)?.name).toBe('api');
    expect(keys.lookup(ALICE)).toBeUndefined();
  });

  it('allows every model without an allow-list, and only the listed ones with one', () => {
    expect(allowsModel({ id: 'x', name: 'x', limits: {} }, 'any')).toBe(true);
    expect(allowsModel({ id: 'x', name: 'x', limits: {}, models: ['a'] }, 'a')).toBe(true);
    expect(allowsModel({ id: 'x', name: 'x', limits: {}, models: ['a'] }, 'b')).toBe(false);
  });
});

describe('watchKeysFile', () => {
  let dir: string;
  let watching: KeysFileWatch | undefined;
  afterEach(async () => {
    watching?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  async function watched(initial: unknown[], warnings: LogFields[] = []) {
    dir = await mkdtemp(join(tmpdir(), 'sluice-keys-'));
    const path = join(dir, 'keys.json');
    await writeFile(path, JSON.stringify(initial));
    const keys = new KeyRing();
    watching = await watchKeysFile(path, keys, { logger: warningRecorder(warnings), debounceMs: 10 });
    return { keys, path, watch: watching };
  }

  it('loads the file, and loads it again when it is replaced', async () => {
    const { keys, path } = await watched([entry(ALICE)]);
    expect(keys.lookup(ALICE)?.name).toBe('alice');
    // As an editor saves: a new file renamed over the old one.
    await writeFile(`${path}.tmp`, JSON.stringify([entry(BOB)]));
    await rename(`${path}.tmp`, path);
    await eventually(() => keys.lookup(BOB) !== undefined, 5000, 'the new keys file to be read');
    expect(keys.lookup(ALICE)).toBeUndefined();
  });

  it('keeps the keys in force when the new file is bad, and logs why', async () => {
    const warnings: LogFields[] = [];
    const { keys, path, watch } = await watched([entry(ALICE)], warnings);
    await writeFile(path, JSON.stringify([{ ...entry(BOB), hash: 'sha256:xyz' }]));
    const reload = await watch.reload();
    expect(reload.kind).toBe('kept');
    expect(keys.lookup(ALICE)?.name).toBe('alice');
    expect(keys.lookup(BOB)).toBeUndefined();
    expect(warnings[0]).toMatchObject({ msg: 'keys file refused; the keys in force stay', file: path });
    expect((warnings[0]!.error as Error).message).toContain('entry 0 ("bob"): hash must be');
  });

  it('answers a reload of an unchanged file without touching the keys', async () => {
    const { watch } = await watched([entry(ALICE)]);
    expect(await watch.reload()).toEqual({ kind: 'unchanged' });
  });

  it('refuses to start on a bad file', async () => {
    dir = await mkdtemp(join(tmpdir(), 'sluice-keys-'));
    const path = join(dir, 'keys.json');
    await writeFile(path, '{}');
    await expect(watchKeysFile(path, new KeyRing())).rejects.toBeInstanceOf(KeysFileError);
    await expect(watchKeysFile(join(dir, 'missing.json'), new KeyRing())).rejects.toMatchObject({
      code: 'GW_INVALID_KEYS_FILE',
    });
  });
});
