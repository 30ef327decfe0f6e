import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { RECORD_OVERHEAD_BYTES, createRedisStore } from '../../../gateway/store/index.ts';
import type { CallStore, RedisStoreOptions } from '../../../gateway/store/index.ts';
import { systemClock } from '../../../placer/kernel/index.ts';
import type { LogFields } from '../../../placer/kernel/index.ts';
import { warningRecorder } from '../../support/logger.ts';
import { freePort, startRedis } from '../../support/redis.ts';
import type { RedisServer } from '../../support/redis.ts';
import { redisForSuite } from '../../support/redis-suite.ts';
import { closedAfterEach } from '../../support/closed-after-each.ts';
import { queuedRecord, runningRecord } from './call-fixtures.ts';
import { describeCallStore } from './contract.ts';

const server = redisForSuite();

/** Stores and plain clients made in a test, closed after it. */
const opened = closedAfterEach<CallStore>();
const clients: Redis[] = [];
afterEach(() => {
  for (const client of clients.splice(0)) client.disconnect();
});
function open(options: Partial<RedisStoreOptions> = {}): CallStore {
  const store = createRedisStore({ url: server.url, ...options });
  opened.push(store);
  return store;
}

// Each fixture gets its own key prefix, so tests share the server without seeing each other.
describeCallStore('redis store', async (options) => {
  const keyPrefix = `t-${randomUUID()}:`;
  const stores = [createRedisStore({ url: server.url, keyPrefix, ...options })];
  const peer = async () => {
    stores.push(createRedisStore({ url: server.url, keyPrefix, ...options }));
    return stores.at(-1)!;
  };
  return {
    store: stores[0]!,
    peer,
    elapse: () => {},
    now: Date.now,
    close: async () => void (await Promise.all(stores.map((s) => s.close()))),
  };
});

const done = { status: 'succeeded', completedAt: Date.now(), executionMs: 5 } as const;
const result = { status: 200, contentType: 'text/plain', body: Buffer.from('hello') };

describe('createRedisStore', () => {
  it('reads calls and results written before the store was closed and opened again', async () => {
    const keyPrefix = `t-${randomUUID()}:`;
    const first = open({ keyPrefix });
    const record = runningRecord(Date.now());
    await first.create(record);
    await first.finish(record.id, done, result);
    await first.close();
    const again = open({ keyPrefix });
    expect(await again.get(record.id)).toMatchObject({ id: record.id, status: 'succeeded' });
    expect(await again.getResult(record.id)).toEqual(result);
  });

  it('keeps stores with another key prefix or database apart', async () => {
    const keyPrefix = `t-${randomUUID()}:`;
    const store = open({ keyPrefix });
    const record = runningRecord(Date.now());
    await store.create(record);
    expect(await open({ keyPrefix: `t-${randomUUID()}:` }).get(record.id)).toBeUndefined();
    expect(await createOn(`redis://127.0.0.1:${server.port}/1`, keyPrefix).get(record.id)).toBeUndefined();
    expect(await createOn(`redis://127.0.0.1:${server.port}/0`, keyPrefix).get(record.id)).toBeDefined();
  });

  it('expires a running call after its lifetime plus the result TTL, and a finished one after the TTL', async () => {
    const keyPrefix = `t-${randomUUID()}:`;
    const store = open({ keyPrefix, resultTtl: 600_000 });
    const raw = rawClient();
    // On the store's own clock (the gateway's, systemClock): Date.now() drifts from it by
    // milliseconds in a long-lived process, which would read as a longer TTL than was set.
    const now = systemClock.now();
    const record = runningRecord(now, { expiresAt: now + 60_000 });
    await store.create(record);
    const runningTtl = await raw.pttl(`${keyPrefix}call:${record.id}`);
    expect(runningTtl).toBeGreaterThan(650_000);
    expect(runningTtl).toBeLessThanOrEqual(660_000);
    await store.finish(record.id, done, result);
    for (const key of [`${keyPrefix}call:${record.id}`, `${keyPrefix}result:${record.id}`]) {
      const ttl = await raw.pttl(key);
      expect(ttl).toBeGreaterThan(590_000);
      expect(ttl).toBeLessThanOrEqual(600_000);
    }
  });

  it('keeps Idempotency-Keys under the prefix with the TTL of the claim', async () => {
    const keyPrefix = `t-${randomUUID()}:`;
    await open({ keyPrefix }).claimKey('abc', { callId: 'call-1', fingerprint: 'f' }, 30_000);
    const ttl = await rawClient().pttl(`${keyPrefix}key:abc`);
    expect(ttl).toBeGreaterThan(20_000);
    expect(ttl).toBeLessThanOrEqual(30_000);
  });

  it.each([
    ['http://127.0.0.1:6379', 'store must be redis://host:port[/db], got "http://127.0.0.1:6379"'],
    ['redis://127.0.0.1', 'store must be redis://host:port[/db], got "redis://127.0.0.1"'],
    ['redis://127.0.0.1:6379/x', 'store must be redis://host:port[/db], got "redis://127.0.0.1:6379/x"'],
    ['redis://127.0.0.1:6379/0?tls=1', 'store must be redis://host:port[/db], got "redis://127.0.0.1:6379/0?tls=1"'],
    ['redis://127.0.0.1:0', 'store must be redis://host:port[/db], got "redis://127.0.0.1:0"'],
    ['redis:/x y', 'store must be redis://host:port[/db], got "redis:/x y"'],
    ['redis://me:hunter2@127.0.0.1/0', 'store must be redis://host:port[/db], got "redis://me:***@127.0.0.1/0"'],
    ['redis://me:%zz@127.0.0.1:6379/0', 'store must be redis://host:port[/db], got "redis://me:***@127.0.0.1:6379/0"'],
  ])('refuses the URL %s with a message showing it without its password', (url, message) => {
    expect(() => createRedisStore({ url })).toThrow(message);
    expect(() => createRedisStore({ url })).toThrow(expect.objectContaining({ code: 'STORE_INVALID_OPTION' }));
  });

  it('connects with the user and password in the URL', async () => {
    const raw = rawClient();
    await raw.call('ACL', 'SETUSER', 'gw', 'on', '>p@ss/word', '~*', '&*', '+@all');
    const store = open({
      url: `redis://gw:${encodeURIComponent('p@ss/word')}@127.0.0.1:${server.port}/0`,
      keyPrefix: `t-${randomUUID()}:`,
    });
    await expect(store.claimKey('k', { callId: 'c', fingerprint: 'f' }, 1000)).resolves.toBeUndefined();
    const wrong = open({ url: `redis://gw:nope@127.0.0.1:${server.port}/0` });
    const error = await wrong.get('call-1').catch((e: unknown) => e as Error);
    expect(error).toMatchObject({ code: 'STORE_UNAVAILABLE' });
    expect((error as Error).message).not.toContain('nope');
  });

  it('refuses a key prefix that is not a string', () => {
    expect(() => createRedisStore({ url: server.url, keyPrefix: 5 as unknown as string })).toThrow(
      'keyPrefix must be a string, got 5',
    );
  });

  it('rejects promptly with STORE_UNAVAILABLE naming the URL without credentials when nothing listens', async () => {
    const port = await freePort();
    const warnings: LogFields[] = [];
    const store = open({ url: `redis://sluice:s3cret@127.0.0.1:${port}/2`, logger: warningRecorder(warnings) });
    for (const attempt of [
      () => store.get('call-1'),
      () => store.create(runningRecord(Date.now())),
      () => store.onCancel('gateway-a', () => {}),
    ]) {
      const started = Date.now();
      const error = await attempt().then(
        () => undefined,
        (e: unknown) => e,
      );
      // The refusal itself (named below) ends the attempt: well before the command timeout (10 s).
      expect(Date.now() - started).toBeLessThan(8_000);
      expect(error).toMatchObject({ code: 'STORE_UNAVAILABLE', status: 503, type: 'service_unavailable_error' });
      expect((error as Error).message).toContain(`redis store redis://127.0.0.1:${port}/2 is unavailable: `);
      expect((error as Error).message).toContain('ECONNREFUSED');
      expect((error as Error).message).not.toContain('s3cret');
    }
    // One warning per connection and outage, not one per reconnect attempt.
    expect(warnings.filter((w) => w.msg === 'store connection lost').length).toBeLessThanOrEqual(2);
  });

  it('rejects with STORE_UNAVAILABLE once its server has gone away', async () => {
    const own = await startRedis();
    try {
      const store = createRedisStore({ url: own.url });
      opened.push(store);
      const record = runningRecord(Date.now());
      await store.create(record);
      await own.stop();
      const started = Date.now();
      await expect(store.get(record.id)).rejects.toMatchObject({ code: 'STORE_UNAVAILABLE' });
      // The closed connection ends it, not the command timeout (10 s).
      expect(Date.now() - started).toBeLessThan(8_000);
    } finally {
      await own.stop();
    }
  });

  it('keeps the byte count in redis under the prefix, each result scored by when it expires', async () => {
    const keyPrefix = `t-${randomUUID()}:`;
    const store = open({ keyPrefix, resultTtl: 600_000 });
    const record = runningRecord(Date.now());
    await store.create(record);
    await store.finish(record.id, done, result);
    const raw = rawClient();
    const bytes = RECORD_OVERHEAD_BYTES + result.body.length;
    expect(await raw.get(`${keyPrefix}stored-bytes`)).toBe(String(bytes));
    const [member, score] = await raw.zrange(`${keyPrefix}stored`, 0, -1, 'WITHSCORES');
    expect(member).toBe(`${bytes}:${record.id}`);
    expect(Number(score) - Date.now()).toBeGreaterThan(590_000);
    expect(Number(score) - Date.now()).toBeLessThanOrEqual(600_000);
  });
});

describe('createRedisStore when redis stalls or dies', { timeout: 60_000 }, () => {
  /**
   * A redis-server of the test's own, and what the test opens on it, all closed when the test
   * ends: these tests wait out the store's own bounds (seconds each), so they run side by side,
   * each on its own server, and share nothing with the tests around them.
   */
  /**
   * Checks that `write` was given up on the store's own 3 s bound for `what` (named in the
   * message), not on the command timeout (10 s).
   */
  async function expectGivenUp(write: () => Promise<unknown>, what: string): Promise<void> {
    const started = Date.now();
    await expect(write()).rejects.toMatchObject({
      code: 'STORE_UNAVAILABLE',
      message: expect.stringContaining(`did not confirm ${what} within 3000 ms`),
    });
    expect(Date.now() - started).toBeLessThan(8_000);
  }

  /** Waits up to `timeout` ms for the store's health check to say `ok`. */
  async function healthBecomes(store: CallStore, ok: boolean, timeout = 15_000): Promise<void> {
    await vi.waitFor(async () => expect((await store.health()).ok).toBe(ok), { timeout, interval: 50 });
  }

  async function ownRedis(onTestFinished: (fn: () => Promise<void>) => void) {
    const servers: RedisServer[] = [await startRedis()];
    const stores: CallStore[] = [];
    const raws: Redis[] = [];
    onTestFinished(async () => {
      await Promise.all(stores.map((s) => s.close()));
      for (const raw of raws) raw.disconnect();
      await Promise.all(servers.map((server) => server.stop()));
    });
    const own = {
      /** The key prefix of the stores `open` makes unless told another. */
      keyPrefix: `t-${randomUUID()}:`,
      get server(): RedisServer {
        return servers.at(-1)!;
      },
      stall: () => process.kill(own.server.pid, 'SIGSTOP'),
      resume: () => process.kill(own.server.pid, 'SIGCONT'),
      /** Starts the server again on its port (after a kill). */
      restart: async () => void servers.push(await startRedis({ port: own.server.port })),
      open(options: Partial<RedisStoreOptions> = {}): CallStore {
        stores.push(createRedisStore({ url: own.server.url, keyPrefix: own.keyPrefix, ...options }));
        return stores.at(-1)!;
      },
      raw(): Redis {
        raws.push(new Redis(own.server.url));
        return raws.at(-1)!;
      },
    };
    return own;
  }

  it.concurrent('fails its health check within about a second of a stall, then fails operations at once, and recovers', async ({
    onTestFinished,
  }) => {
    const own = await ownRedis(onTestFinished);
    const warnings: LogFields[] = [];
    const store = own.open({ logger: warningRecorder(warnings) });
    expect(await store.health()).toMatchObject({ ok: true });
    own.stall();
    // The reason names the health check's own 1 s bound: it was that check, not the command
    // timeout (10 s), that found the stall.
    await healthBecomes(store, false);
    expect(await store.health()).toMatchObject({
      reason: `redis store ${own.server.url} did not answer a health check within 1000 ms`,
    });
    const started = Date.now();
    await expect(store.get('call-1')).rejects.toMatchObject({
      code: 'STORE_UNAVAILABLE',
      message: expect.stringContaining('did not answer a health check'),
    });
    // Failed on the health answer (at once, or after one more 1 s check), not the command timeout.
    expect(Date.now() - started).toBeLessThan(8_000);
    expect(warnings.filter((w) => w.msg === 'store not answering')).toHaveLength(1);
    own.resume();
    await healthBecomes(store, true);
    await expect(store.get('call-1')).resolves.toBeUndefined();
  });

  it.concurrent('never lets a create it gave up on land later, when redis stalls with the create on the wire', async ({
    onTestFinished,
  }) => {
    const own = await ownRedis(onTestFinished);
    const store = own.open();
    await store.health();
    own.stall();
    const record = runningRecord(Date.now());
    await expectGivenUp(() => store.create(record), `the record of call ${record.id}`);
    own.resume();
    // The health check goes down the same connection, after the create: once it answers, the create has run.
    await healthBecomes(store, true);
    expect(await own.raw().exists(`${own.keyPrefix}call:${record.id}`)).toBe(0);
    expect(await store.get(record.id)).toBeUndefined();
  });

  it.concurrent('gives up on a start within 3 s when redis stalls with it on the wire, and the start lands harmlessly once it resumes', async ({
    onTestFinished,
  }) => {
    const own = await ownRedis(onTestFinished);
    const store = own.open();
    const record = queuedRecord(Date.now());
    await store.create(record);
    own.stall();
    const start = { runner: 'runner-1', startedAt: Date.now(), delayMs: 5 };
    await expectGivenUp(() => store.start(record.id, start), `the start of call ${record.id}`);
    own.resume();
    await healthBecomes(store, true);
    // It says what is true: a runner took the call. A finish after it still ends the call.
    expect(await store.get(record.id)).toMatchObject({ status: 'running', runner: 'runner-1' });
    expect(await store.finish(record.id, done, result)).toBe(true);
  });

  it.concurrent('reconnects by itself when redis is killed and started again on its port, cancels included', async ({
    onTestFinished,
  }) => {
    const own = await ownRedis(onTestFinished);
    const store = own.open();
    const cancels: string[] = [];
    await store.onCancel('gateway-a', (id) => cancels.push(id));
    expect(await store.health()).toMatchObject({ ok: true });
    process.kill(own.server.pid, 'SIGKILL');
    await own.server.stop();
    await healthBecomes(store, false);
    const started = Date.now();
    await expect(store.get('call-1')).rejects.toMatchObject({
      code: 'STORE_UNAVAILABLE',
      message: expect.stringContaining('ECONNREFUSED'),
    });
    // The refusal ends it, not the connect (2 s, another message) or command (10 s) timeout.
    expect(Date.now() - started).toBeLessThan(8_000);
    await own.restart();
    await healthBecomes(store, true, 10_000);
    const record = runningRecord(Date.now());
    await store.create(record);
    expect(await store.finish(record.id, done, result)).toBe(true);
    expect(await store.getResult(record.id)).toEqual(result);
    await vi.waitFor(
      async () => {
        await store.requestCancel('call-after-restart', 'gateway-a');
        expect(cancels).toContain('call-after-restart');
      },
      { timeout: 10_000, interval: 100 },
    );
  });
});

describe('startRedis', () => {
  it('tells how to install redis-server when it is missing', async () => {
    const path = process.env.PATH;
    process.env.PATH = '/nonexistent';
    try {
      await expect(startRedis()).rejects.toThrow(
        'redis-server is not installed; the store specs need it: apt-get install -y redis-server',
      );
    } finally {
      process.env.PATH = path;
    }
  });
});

function createOn(url: string, keyPrefix: string): CallStore {
  const store = createRedisStore({ url, keyPrefix });
  opened.push(store);
  return store;
}

/** A plain client to look at the keys the store wrote. */
function rawClient(url = server.url): Redis {
  const client = new Redis(url);
  clients.push(client);
  return client;
}
