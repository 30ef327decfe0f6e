/**
 * What a keyed gateway's client keys allow right now. A gateway started keyed stays keyed
 * whatever its keys become (see credentials.ts), so a key set that empties (a keys file
 * rewritten to `[]`, the last API key revoked, a flushed Redis) or cannot be read (the key
 * store does not answer) refuses client calls; this says so where an operator looks: once in
 * the log as it happens, and in `/readyz` for as long as it lasts.
 */
import type { Logger } from '../../placer/kernel/index.ts';
import type { ClientAccess } from './credentials.ts';
import type { ClientKeys } from './scopes.ts';

/** Why a keyed gateway's keys keep client calls out, as `/readyz` lists it. */
export type ClientKeysReason = 'no_client_keys' | 'client_keys_unavailable';

/**
 * The `/readyz` reasons of the keys: `client_keys_unavailable` while they cannot be read (a key
 * made since the last read gets 503), else `no_client_keys` while there is none (every client
 * call gets 401); none on an open gateway.
 */
export function clientKeysReasons(
  clients: ClientAccess,
  keys: Pick<ClientKeys, 'size' | 'available'> | undefined,
): ClientKeysReason[] {
  if (clients === 'open') return [];
  if (keys?.available === false) return ['client_keys_unavailable'];
  return (keys?.size ?? 0) === 0 ? ['no_client_keys'] : [];
}

/** Options of {@link ClientKeysWatch}. */
export interface ClientKeysWatchOptions {
  readonly clients: ClientAccess;
  readonly keys: Pick<ClientKeys, 'size' | 'available'> | undefined;
  readonly logger: Logger;
}

/**
 * Logs when a keyed gateway comes to refuse every client call (no key left, or none readable)
 * and when it takes them again, once per change however often it is checked.
 */
export class ClientKeysWatch {
  readonly #options: ClientKeysWatchOptions;
  /** The reason logged last; undefined while calls with a key are taken. */
  #refusing: ClientKeysReason | undefined;
  #started = false;

  constructor(options: ClientKeysWatchOptions) {
    this.#options = options;
  }

  /** The `/readyz` reasons now; checks (and logs) a change on the way. */
  reasons(): ClientKeysReason[] {
    this.check();
    return clientKeysReasons(this.#options.clients, this.#options.keys);
  }

  /**
   * Logs a change since the last check. The first check (at start-up) finding no key logs a
   * warning: `--require-keys` with no key yet is how a gateway whose keys all come through the
   * API starts. Every later loss of the last key is an error.
   */
  check(): void {
    const { clients, keys, logger } = this.#options;
    if (clients === 'open') return;
    const size = keys?.size ?? 0;
    const refusing: ClientKeysReason | undefined =
      size > 0 ? undefined : keys?.available === false ? 'client_keys_unavailable' : 'no_client_keys';
    const first = !this.#started;
    this.#started = true;
    if (refusing === this.#refusing && !first) return;
    const was = this.#refusing;
    this.#refusing = refusing;
    if (refusing === undefined) {
      if (was !== undefined) logger.info('client keys back; client calls taken again', { keys: size });
      return;
    }
    const fields = { reason: refusing, keys: 0 };
    if (first) logger.warn('no client key yet; every client call is refused until one is made', fields);
    else logger.error('no client key left; every client call is refused', fields);
  }
}
