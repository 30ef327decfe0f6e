/**
 * The keys file (`--keys keys.json`, or `.yaml`): a list, in JSON or YAML
 * (placer/kernel/data-text.ts), of `{ name, hash: "sha256:<hex>", models?, limits? }`, one per client key, written by the operator (`sluice keys new` prints an entry).
 *
 * It is checked whole, with one message per problem naming the entry and the field, and applied
 * whole or not at all: at start-up a bad file stops the gateway; on a reload (the file changed,
 * or SIGHUP) a bad file leaves the keys as they were and the reason in the log.
 */
import { watch } from 'node:fs';
import type { FSWatcher } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { basename, dirname } from 'node:path';
import { cappedProblems, dataListEntries, silentLogger } from '../../placer/kernel/index.ts';
import type { Logger } from '../../placer/kernel/index.ts';
import { KeysFileError } from '../errors.ts';
import { checkKeyHash, checkKeySpec, keyIdOf } from './keys.ts';
import type { KeyRing, HashedKey } from './keys.ts';

/** The most problems one error lists; the rest are counted. */
const MAX_LISTED = 20;

/**
 * The keys in a keys file's text. `file` names the file in messages, and its extension the
 * format (JSON or YAML).
 * @throws KeysFileError listing every problem, each naming the entry (index and name) and field.
 */
export function parseKeysFile(text: string, file: string): HashedKey[] {
  const entries = dataListEntries(text, file, 'name', (fault) =>
    fault.kind === 'unparsable'
      ? new KeysFileError(`keys file ${file} is not ${fault.format}: ${fault.message}`)
      : new KeysFileError(`keys file ${file} must be a ${fault.format} list of keys, got ${typeof fault.value}`),
  );
  const problems: string[] = [];
  const keys: HashedKey[] = [];
  const seen = new Map<string, string>();
  for (const { entry, where } of entries) {
    const spec = checkKeySpec(where, entry, problems, ['hash']);
    const digest = checkKeyHash(where, (entry as { hash?: unknown } | null)?.hash, problems);
    if (!spec || !digest) continue;
    const id = keyIdOf(digest);
    const first = seen.get(id);
    if (first !== undefined) {
      problems.push(`${where}: hash is the same key as ${first}'s`);
      continue;
    }
    seen.set(id, where);
    keys.push(Object.freeze({ ...spec, digest }));
  }
  if (problems.length > 0)
    throw new KeysFileError(`keys file ${file}: ${cappedProblems(problems, MAX_LISTED).join('; ')}`);
  return keys;
}

/** Reads and checks a keys file. @throws KeysFileError when it cannot be read or is not valid. */
export async function loadKeysFile(path: string): Promise<HashedKey[]> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (error) {
    throw new KeysFileError(`keys file ${path} cannot be read: ${(error as Error).message}`, { cause: error });
  }
  return parseKeysFile(text, path);
}

/** How a reload went. */
export type KeysReload =
  | { readonly kind: 'loaded'; readonly keys: number }
  | { readonly kind: 'unchanged' }
  | { readonly kind: 'kept'; readonly error: KeysFileError };

/** A keys file being watched. */
export interface KeysFileWatch {
  /** Reads the file again now (SIGHUP); a bad file keeps the keys in force and says why. Never rejects. */
  reload(): Promise<KeysReload>;
  /** Stops watching; idempotent. */
  close(): void;
}

/** Options of {@link watchKeysFile}. */
export interface KeysFileWatchOptions {
  /** Where reloads and refusals are logged. @default silentLogger */
  logger?: Logger;
  /** Quiet time after the last change before the file is read, so a save in several writes is read once. @default 200 */
  debounceMs?: number;
}

/**
 * Loads `path` into `keys` now (throwing as {@link loadKeysFile} when it is bad) and again
 * whenever it may have changed. The file's directory is watched, not the file: editors and
 * Kubernetes replace a file by renaming another over it, which ends a watch on the file itself.
 */
export async function watchKeysFile(
  path: string,
  keys: KeyRing,
  options: KeysFileWatchOptions = {},
): Promise<KeysFileWatch> {
  const logger = options.logger ?? silentLogger;
  const debounceMs = options.debounceMs ?? 200;
  let text = await readFile(path, 'utf8').catch((error: Error) => {
    throw new KeysFileError(`keys file ${path} cannot be read: ${error.message}`, { cause: error });
  });
  keys.setFileKeys(parseKeysFile(text, path));

  const reload = async (): Promise<KeysReload> => {
    try {
      const next = await readFile(path, 'utf8').catch((error: Error) => {
        throw new KeysFileError(`keys file ${path} cannot be read: ${error.message}`, { cause: error });
      });
      if (next === text) return { kind: 'unchanged' };
      const loaded = parseKeysFile(next, path);
      keys.setFileKeys(loaded);
      text = next;
      logger.info('keys file reloaded', { file: path, keys: loaded.length });
      return { kind: 'loaded', keys: loaded.length };
    } catch (error) {
      const refused =
        error instanceof KeysFileError
          ? error
          : new KeysFileError(`keys file ${path}: ${(error as Error).message}`, { cause: error });
      logger.warn('keys file refused; the keys in force stay', { file: path, error: refused });
      return { kind: 'kept', error: refused };
    }
  };

  let timer: NodeJS.Timeout | undefined;
  const name = basename(path);
  let watcher: FSWatcher | undefined = watch(dirname(path), { persistent: false }, (_event, changed) => {
    // Kubernetes swaps a `..data` link rather than the file: any change in the folder may be ours.
    if (changed !== null && changed !== name && !changed.startsWith('..')) return;
    clearTimeout(timer);
    timer = setTimeout(() => void reload(), debounceMs);
  });
  watcher.on('error', (error: Error) => logger.warn('keys file no longer watched', { file: path, error }));
  return {
    reload,
    close: () => {
      clearTimeout(timer);
      watcher?.close();
      watcher = undefined;
    },
  };
}
