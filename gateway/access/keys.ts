/**
 * Client keys: bearer tokens (`sk-sluice-` and 32 random bytes, base64url) that the gateway
 * keeps only as SHA-256 digests, each with a name, an optional model allow-list and limits.
 *
 * Keys come from two places: the keys file (keys-file.ts; the operator's, reloaded on change)
 * and the operator API (create, list, delete), whose keys live in memory or, with a Redis store,
 * in Redis so every gateway sees them (key-store.ts). {@link KeyRing} holds both and is where
 * credentials look tokens up.
 */
import { createHash, randomBytes } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import { show, silentLogger, systemClock } from '../../placer/kernel/index.ts';
import type { Clock, Logger } from '../../placer/kernel/index.ts';
import { InvalidBodyError, KeyInFileError, KeyNotFoundError } from '../errors.ts';
import { LIMIT_FIELDS } from './limits.ts';
import type { KeyLimits } from './limits.ts';
import type { KeyStore, StoredKey } from './key-store.ts';
import type { ClientKey, ClientKeys } from './scopes.ts';

export type { ClientKey, ClientKeys, KeyLimits } from './scopes.ts';

/** A key as the operator API lists it: never its token, nor its digest. */
export interface KeyRecord extends ClientKey {
  /** `file` keys change by editing the keys file; `api` keys through the API. */
  readonly source: 'file' | 'api';
  /** When an API key was made, ms since the epoch. */
  readonly createdAt?: number;
}

/** What creating a key answers: the token, shown this once, and the key's record. */
export interface CreatedKey {
  readonly key: string;
  readonly record: KeyRecord;
}

/** A key's fields as the keys file and the create call give them, before the token's digest. */
export interface KeySpec {
  readonly name: string;
  readonly models?: readonly string[];
  readonly limits?: KeyLimits;
}

/** What every client key starts with, so a leaked one is easy to recognise (and to scan for). */
export const KEY_PREFIX = 'sk-sluice-';

/** A new client key token: {@link KEY_PREFIX} and 32 random bytes, base64url. */
export function newKeyToken(random: (size: number) => Buffer = randomBytes): string {
  return KEY_PREFIX + random(32).toString('base64url');
}

/** The hex SHA-256 of a token: what the gateway keeps in place of the token. */
export function hashToken(token: string): string {
  return createHash('sha256').update(token).digest('hex');
}

/** How many recently seen tokens {@link KeyRing} remembers the key of. */
const SEEN_TOKENS = 4096;

/** A key's id, from the hex digest of its token. */
export function keyIdOf(digest: string): string {
  return digest.slice(0, 16);
}

/** The longest name and model name accepted, and the most models in one allow-list. */
const MAX_NAME = 200;
const MAX_MODELS = 1000;
/** `sha256:` and 64 lower-case hex digits, as the keys file writes a digest. */
const HASH = /^sha256:([0-9a-f]{64})$/;

/**
 * Checks a key's fields (a keys-file entry or a create body) and returns them cleaned, or
 * pushes one message per problem onto `problems`, each starting with `where` and naming the field.
 * `extra` lists the fields beside the spec's that `value` may have.
 */
export function checkKeySpec(
  where: string,
  value: unknown,
  problems: string[],
  extra: readonly string[] = [],
): KeySpec | undefined {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    problems.push(`${where}: must be an object, got ${show(value)}`);
    return undefined;
  }
  const fields = value as Record<string, unknown>;
  const before = problems.length;
  for (const field of Object.keys(fields)) {
    if (!['name', 'models', 'limits', ...extra].includes(field))
      problems.push(`${where}: unknown field ${show(field)}`);
  }
  const { name, models, limits } = fields;
  if (typeof name !== 'string' || name.trim() === '' || name.length > MAX_NAME) {
    problems.push(`${where}: name must be a non-empty string of at most ${MAX_NAME} characters, got ${show(name)}`);
  }
  if (models !== undefined) {
    if (!Array.isArray(models) || models.length === 0 || models.length > MAX_MODELS) {
      problems.push(
        `${where}: models must be a non-empty list of at most ${MAX_MODELS} model names, got ${show(models)}`,
      );
    } else {
      models.forEach((model, i) => {
        if (typeof model !== 'string' || model === '' || model.length > MAX_NAME)
          problems.push(`${where}: models[${i}] must be a non-empty string, got ${show(model)}`);
      });
    }
  }
  const checked: Record<string, number> = {};
  if (limits !== undefined) {
    if (typeof limits !== 'object' || limits === null || Array.isArray(limits)) {
      problems.push(`${where}: limits must be an object, got ${show(limits)}`);
    } else {
      for (const [field, limit] of Object.entries(limits)) {
        if (!(LIMIT_FIELDS as readonly string[]).includes(field)) {
          problems.push(`${where}: limits.${field} is not a limit (${LIMIT_FIELDS.join(', ')})`);
        } else if (typeof limit !== 'number' || !Number.isSafeInteger(limit) || limit < 1) {
          problems.push(`${where}: limits.${field} must be a positive integer, got ${show(limit)}`);
        } else {
          checked[field] = limit;
        }
      }
    }
  }
  if (problems.length > before) return undefined;
  return Object.freeze({
    name: name as string,
    ...(models === undefined ? {} : { models: Object.freeze([...(models as string[])]) }),
    limits: Object.freeze(checked) as KeyLimits,
  });
}

/**
 * The digest of a keys-file entry's `hash` field (`sha256:<hex>`), or undefined after pushing a
 * message onto `problems`.
 */
export function checkKeyHash(where: string, hash: unknown, problems: string[]): string | undefined {
  const match = typeof hash === 'string' ? HASH.exec(hash) : null;
  if (match) return match[1]!;
  problems.push(
    `${where}: hash must be "sha256:" and 64 lower-case hex digits (sluice keys new prints one), got ${show(hash)}`,
  );
  return undefined;
}

/** A key with its digest: one entry of the ring. */
export interface HashedKey extends KeySpec {
  /** Hex SHA-256 of the token. */
  readonly digest: string;
  readonly createdAt?: number;
}

/** Options of {@link KeyRing}. */
export interface KeyRingOptions {
  /** Where the operator API's keys are kept. @default in this process's memory only */
  store?: KeyStore;
  /** Stamps API keys' createdAt. @default systemClock */
  clock?: Pick<Clock, 'now'>;
  /** Where store refreshes that failed are logged. @default silentLogger */
  logger?: Logger;
}

/**
 * Every client key this gateway knows: the keys file's and the API's, looked up by the digest of
 * the presented token. Lookups read one map, rebuilt whenever either source changes.
 */
export class KeyRing implements ClientKeys {
  readonly #store: KeyStore | undefined;
  readonly #clock: Pick<Clock, 'now'>;
  readonly #logger: Logger;
  #file: readonly HashedKey[] = [];
  #api = new Map<string, StoredKey>();
  #byDigest = new Map<string, ClientKey>();
  /**
   * Tokens seen lately and the key each is, so a client's every call does not hash its token
   * again; emptied whenever the keys change, so a deleted key stops working at once. Only known
   * keys go in: a stranger's guesses cannot fill it.
   */
  readonly #seen = new LRUCache<string, ClientKey>({ max: SEEN_TOKENS });
  #records: readonly KeyRecord[] = [];
  /** False from a failed read of the store until one succeeds; true without a store. */
  #available = true;
  readonly #listeners: Array<() => void> = [];

  constructor(options: KeyRingOptions = {}) {
    this.#store = options.store;
    this.#clock = options.clock ?? systemClock;
    this.#logger = options.logger ?? silentLogger;
    this.#store?.watch(
      (keys) => this.#setApi(keys),
      () => this.#setUnavailable(),
    );
  }

  /**
   * Loads the API keys the store holds; call once before serving when there is a store. Until
   * a read succeeds the keys are {@link available | unavailable}.
   */
  async start(): Promise<void> {
    if (!this.#store) return;
    try {
      this.#setApi(await this.#store.load());
    } catch (error) {
      this.#setUnavailable();
      throw error;
    }
  }

  /** False while the store's keys cannot be read (the last read failed). */
  get available(): boolean {
    return this.#available;
  }

  /** Calls `listener` whenever the keys or their availability change. */
  onChange(listener: () => void): void {
    this.#listeners.push(listener);
  }

  lookup(token: string): ClientKey | undefined {
    const seen = this.#seen.get(token);
    if (seen !== undefined) return seen;
    const key = this.#byDigest.get(hashToken(token));
    if (key !== undefined) this.#seen.set(token, key);
    return key;
  }

  get size(): number {
    return this.#byDigest.size;
  }

  /** Replaces the keys file's keys (a load or a reload); the API's stay. */
  setFileKeys(keys: readonly HashedKey[]): void {
    this.#file = keys;
    this.#rebuild();
  }

  /**
   * Makes a key from a create body: checks it, draws a token, keeps its digest (in the store
   * when there is one, so every gateway sees it) and answers the token once.
   * @throws InvalidBodyError naming each bad field; a store's failure as it is.
   */
  async create(body: unknown): Promise<CreatedKey> {
    const problems: string[] = [];
    const spec = checkKeySpec('key', body, problems);
    if (!spec) throw new InvalidBodyError(problems.join('; '));
    const key = newKeyToken();
    const digest = hashToken(key);
    const stored: StoredKey = {
      ...spec,
      limits: spec.limits ?? {},
      id: keyIdOf(digest),
      digest,
      createdAt: Math.floor(this.#clock.now()),
    };
    await this.#store?.put(stored);
    this.#api.set(stored.id, stored);
    this.#rebuild();
    return { key, record: recordOf(stored, 'api') };
  }

  /** Every key's record, the file's first, without tokens or digests. */
  list(): readonly KeyRecord[] {
    return this.#records;
  }

  /**
   * Deletes an API key by id: it stops working at once here, and on other gateways as soon as
   * they hear from the store.
   * @throws KeyNotFoundError, KeyInFileError (edit the file instead).
   */
  async delete(id: string): Promise<void> {
    if (!this.#api.has(id)) {
      if (this.#file.some((key) => keyIdOf(key.digest) === id))
        throw new KeyInFileError(`key ${id} comes from the keys file: remove it there`);
      throw new KeyNotFoundError(`no client key with id ${show(id)}`);
    }
    await this.#store?.remove(id);
    this.#api.delete(id);
    this.#rebuild();
  }

  /** Stops hearing from the store and closes it; idempotent. */
  close(): Promise<void> {
    return this.#store?.close() ?? Promise.resolve();
  }

  #setApi(keys: readonly StoredKey[]): void {
    this.#api = new Map(keys.map((key) => [key.id, key]));
    this.#available = true;
    this.#rebuild();
  }

  /** The store cannot be read: the keys it holds are unavailable until a read succeeds again. */
  #setUnavailable(): void {
    if (!this.#available) return;
    this.#available = false;
    this.#notify();
  }

  #notify(): void {
    for (const listener of this.#listeners) listener();
  }

  #rebuild(): void {
    const byDigest = new Map<string, ClientKey>();
    const records: KeyRecord[] = [];
    for (const [source, keys] of [
      ['file', this.#file],
      ['api', [...this.#api.values()]],
    ] as const) {
      for (const key of keys) {
        // A digest in both the file and the store: the file, which the operator edits, wins.
        if (byDigest.has(key.digest)) continue;
        const record = recordOf(key, source);
        byDigest.set(
          key.digest,
          Object.freeze({
            id: record.id,
            name: record.name,
            limits: record.limits,
            ...(record.models ? { models: record.models } : {}),
          }),
        );
        records.push(record);
      }
    }
    this.#byDigest = byDigest;
    this.#seen.clear();
    this.#records = Object.freeze(records);
    this.#logger.debug('client keys changed', { keys: byDigest.size });
    this.#notify();
  }
}

function recordOf(key: HashedKey, source: 'file' | 'api'): KeyRecord {
  return Object.freeze({
    id: keyIdOf(key.digest),
    name: key.name,
    ...(key.models ? { models: key.models } : {}),
    limits: key.limits ?? {},
    source,
    ...(key.createdAt === undefined ? {} : { createdAt: key.createdAt }),
  });
}

/** True when `key` may call `model`: it has no allow-list, or the list names the model. */
export function allowsModel(key: ClientKey, model: string): boolean {
  return key.models === undefined || key.models.includes(model);
}
