/** What a spec opens in a test and closes after it, and a plain Redis client for a suite. */
import { Redis } from 'ioredis';
import { afterEach } from 'vitest';
import { startedForSuite } from './fleet.ts';

/** Anything a test opens that closes by `close()`: a store, a board, a lease, a limiter. */
export interface Closable {
  close(): Promise<unknown>;
}

/**
 * A list that the tests of the enclosing describe (or file) push what they open onto; after each
 * test, everything on it is closed together and the list emptied.
 */
export function closedAfterEach<T extends Closable = Closable>(): T[] {
  const opened: T[] = [];
  afterEach(async () => {
    await Promise.all(opened.splice(0).map((o) => o.close()));
  });
  return opened;
}

/**
 * A plain ioredis client on `server`, made before the tests of the enclosing describe (or file)
 * and quit after them, for a test to read or write what a store keeps. Read it inside the tests.
 */
export function redisClientForSuite(server: { readonly url: string }): () => Redis {
  return startedForSuite(
    'redis client',
    async () => new Redis(server.url),
    (client) => client.quit(),
  );
}
