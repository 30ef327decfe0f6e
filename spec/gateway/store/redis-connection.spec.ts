/**
 * The gateway's one Redis connection factory: the policy it declares is the one each
 * connection gets (read back from the client's options), the timeouts are options checked up
 * front, and a command a silent server never answers fails on the command timeout. The sockets
 * are a TCP server on 127.0.0.1 port 0 that accepts and never answers: no redis-server needed.
 */
import { createServer } from 'node:net';
import type { Server, Socket } from 'node:net';
import type { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  CREATE_TIMEOUT_MS,
  connectRedis,
  createRedisStore,
  quitRedis,
  redisDefaults,
  redisUses,
} from '../../../gateway/store/index.ts';
import type { RedisUse } from '../../../gateway/store/index.ts';

/** Accepts connections and never answers: a stalled Redis. */
let silent: Server;
let silentUrl: string;
const sockets = new Set<Socket>();
beforeAll(async () => {
  silent = createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => {});
    socket.once('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
  const address = silent.address();
  silentUrl = `redis://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}/0`;
});
afterAll(async () => {
  for (const socket of sockets) socket.destroy();
  await new Promise((resolve) => silent.close(resolve));
});

const clients: Redis[] = [];
afterEach(() => {
  for (const client of clients.splice(0)) client.disconnect();
});
function open(use: RedisUse, timeouts = {}, url = silentUrl): Redis {
  const { client } = connectRedis(url, use, timeouts);
  clients.push(client);
  return client;
}

describe('connectRedis', () => {
  it.each([
    ['store', redisUses.store, { commandTimeout: 10_000, enableOfflineQueue: false, enableAutoPipelining: false }],
    ['limiter', redisUses.limiter, { commandTimeout: 1_000, enableOfflineQueue: true, enableAutoPipelining: true }],
    ['keys', redisUses.keys, { commandTimeout: 5_000, enableOfflineQueue: true, enableAutoPipelining: false }],
    ['control', redisUses.control, { commandTimeout: 1_000, enableOfflineQueue: true, enableAutoPipelining: false }],
  ])('gives the %s use the shared policy and its own command timeout, queue and pipelining', (_name, use, own) => {
    const { options } = open(use);
    expect(options).toMatchObject({
      ...own,
      connectTimeout: redisDefaults.connectTimeout,
      // Sent at most once: nothing is resent after a reconnect, nothing retried.
      autoResendUnfulfilledCommands: false,
      maxRetriesPerRequest: 0,
    });
    // Reconnects forever, 100 ms more each attempt, at most a second apart.
    expect([1, 2, 5, 10, 11, 1000].map((attempt) => options.retryStrategy!(attempt))).toEqual([
      100, 200, 500, 1000, 1000, 1000,
    ]);
  });

  it('takes the timeouts given over the defaults, and the user and password of the URL, shown without them', () => {
    const { client, display } = connectRedis(silentUrl.replace('redis://', 'redis://me:s3cret@'), redisUses.control, {
      connectTimeout: 300,
      commandTimeout: 400,
    });
    clients.push(client);
    expect(client.options).toMatchObject({
      connectTimeout: 300,
      commandTimeout: 400,
      username: 'me',
      password: 's3cret',
    });
    expect(display).toBe(silentUrl);
  });

  it.each([
    [{ connectTimeout: 0 }, 'connectTimeout must be a positive integer, got 0'],
    [{ commandTimeout: -1 }, 'commandTimeout must be a positive integer, got -1'],
    [{ commandTimeout: 1.5 }, 'commandTimeout must be a positive integer, got 1.5'],
  ])('refuses the timeouts %o with STORE_INVALID_OPTION naming the option', (timeouts, message) => {
    expect(() => connectRedis(silentUrl, redisUses.keys, timeouts)).toThrow(
      expect.objectContaining({ code: 'STORE_INVALID_OPTION', message }),
    );
  });

  it('refuses a URL that is not redis://host:port[/db], quoting it without its password', () => {
    expect(() => connectRedis('redis://me:s3cret@127.0.0.1/0', redisUses.limiter)).toThrow(
      'store must be redis://host:port[/db], got "redis://me:***@127.0.0.1/0"',
    );
  });

  it('fails a command a stalled Redis never answers after the command timeout', async () => {
    const client = open(redisUses.control, { commandTimeout: 200 });
    const started = Date.now();
    await expect(client.get('k')).rejects.toThrow('Command timed out');
    // The command timeout ended it; nothing else would within the bound.
    expect(Date.now() - started).toBeLessThan(5_000);
  });

  it('fails a command of a use that never queues at once while it has no connection', async () => {
    const client = open(redisUses.store);
    await expect(client.get('k')).rejects.toThrow(/enableOfflineQueue/);
  });
});

describe('quitRedis', () => {
  it('stops a connection that is not ready at once, and resolves for none', async () => {
    const client = open(redisUses.keys);
    const ended = new Promise((resolve) => client.once('end', resolve));
    await quitRedis(client);
    // A polite QUIT would wait for the silent server's answer, never to come.
    await ended;
    expect(client.status).toBe('end');
    await expect(quitRedis(undefined)).resolves.toBeUndefined();
  });
});

describe('the Redis store', () => {
  it('refuses a command timeout shorter than the time a create waits for its answer', () => {
    expect(() => createRedisStore({ url: silentUrl, commandTimeout: CREATE_TIMEOUT_MS - 1 })).toThrow(
      expect.objectContaining({
        code: 'STORE_INVALID_OPTION',
        message: `commandTimeout must be at least ${CREATE_TIMEOUT_MS} ms, the time a create waits for its answer, got ${CREATE_TIMEOUT_MS - 1}`,
      }),
    );
  });
});
