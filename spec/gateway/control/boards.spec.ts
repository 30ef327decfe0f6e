/**
 * The demand and status boards (gateway/control/boards.ts): the memory versions with a fake
 * clock, and the Redis versions with two instances on a real redis-server, as two gateways.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import {
  MemoryDemandBoard,
  MemoryStatusBoard,
  RedisDemandBoard,
  RedisStatusBoard,
  boardDefaults,
} from '../../../gateway/control/boards.ts';
import type { LogFields } from '../../../placer/kernel/index.ts';
import { eventually } from '../../support/fleet.ts';
import { warningRecorder } from '../../support/logger.ts';
import { startRedis } from '../../support/redis.ts';
import { redisForSuite } from '../../support/redis-suite.ts';
import { closedAfterEach, redisClientForSuite } from '../../support/closed-after-each.ts';

const server = redisForSuite();
const client = redisClientForSuite(server);

const opened = closedAfterEach();

function demandBoards(now: () => number, ttl = 5_000) {
  const keyPrefix = `t-${randomUUID()}:`;
  const a = new RedisDemandBoard({ url: server.url, keyPrefix, gatewayId: 'gw-a', now, ttl });
  const b = new RedisDemandBoard({ url: server.url, keyPrefix, gatewayId: 'gw-b', now, ttl });
  opened.push(a, b);
  return { a, b, hash: `${keyPrefix}deploy:demand` };
}

describe('MemoryDemandBoard', () => {
  it("totals this gateway's own notes, and 0 clears one", async () => {
    const board = new MemoryDemandBoard();
    await board.note('m', 3);
    await board.note('n', 1);
    await board.refresh();
    expect([board.total('m'), board.total('n'), board.total('none')]).toEqual([3, 1, 0]);
    await board.note('m', 0);
    expect(board.total('m')).toBe(0);
    await expect(board.note('m', -1)).rejects.toMatchObject({ code: 'GW_INVALID_OPTION' });
  });
});

describe('RedisDemandBoard', () => {
  it('sums the notes of two gateways once each has refreshed, and a 0 clears a note', async () => {
    const { a, b } = demandBoards(() => 1_000);
    await a.note('m', 2);
    await b.note('m', 3);
    await b.note('n', 1);
    // Before a refresh each sees its own notes only.
    expect([a.total('m'), b.total('m')]).toEqual([2, 3]);
    await Promise.all([a.refresh(), b.refresh()]);
    expect([a.total('m'), b.total('m'), a.total('n'), b.total('n')]).toEqual([5, 5, 1, 1]);
    await b.note('m', 0);
    await a.refresh();
    expect(a.total('m')).toBe(2);
    // b's own note is gone; a's, from b's last refresh, still counts.
    expect(b.total('m')).toBe(2);
  });

  it('stops counting a note not renewed within the TTL, and prunes it at the next write', async () => {
    let time = 1_000;
    const { a, b, hash } = demandBoards(() => time, 5_000);
    await b.note('m', 4);
    await a.refresh();
    expect(a.total('m')).toBe(4);
    time += 4_999;
    expect(a.total('m')).toBe(4);
    time += 1;
    // The cache's own expiry, with no refresh: a gateway that died stops counting in time.
    expect(a.total('m')).toBe(0);
    await a.refresh();
    expect(a.total('m')).toBe(0);
    expect(await client().hkeys(hash)).toEqual(['gw-b|m']);
    await a.note('n', 1);
    expect(await client().hkeys(hash)).toEqual(['gw-a|n']);
  });

  it('writes an unchanged note again only as it nears expiry, so a steady gateway keeps counting', async () => {
    let time = 1_000;
    const { a, b, hash } = demandBoards(() => time, 5_000);
    await b.note('m', 2);
    const first = await client().hget(hash, 'gw-b|m');
    time += 1_000;
    await b.note('m', 2);
    expect(await client().hget(hash, 'gw-b|m')).toBe(first);
    time += 2_000;
    await b.note('m', 2);
    expect(await client().hget(hash, 'gw-b|m')).toBe(`2:${time + 5_000}`);
    time += 4_000;
    await a.refresh();
    expect(a.total('m')).toBe(2);
    // A zero with nothing noted writes nothing.
    await a.note('quiet', 0);
    expect(await client().hexists(hash, 'gw-a|quiet')).toBe(0);
  });

  it('keeps the last read, and never rejects, when Redis is gone; warns once', async () => {
    const own = await startRedis();
    const warnings: LogFields[] = [];
    const keyPrefix = `t-${randomUUID()}:`;
    const a = new RedisDemandBoard({ url: own.url, keyPrefix, gatewayId: 'gw-a', logger: warningRecorder(warnings) });
    const b = new RedisDemandBoard({ url: own.url, keyPrefix, gatewayId: 'gw-b' });
    opened.push(a, b);
    try {
      await b.note('m', 2);
      await a.refresh();
      expect(a.total('m')).toBe(2);
      await own.stop();
      await a.refresh();
      await a.note('m', 1);
      await a.note('m', 5);
      await a.refresh();
      expect(a.total('m')).toBe(7);
      expect(warnings.map((w) => w.msg)).toEqual(['demand board unreachable']);
    } finally {
      await own.stop();
    }
  });
});

describe('MemoryStatusBoard', () => {
  it('reads what was published until three pass periods have passed, and forgets a removed one', async () => {
    let time = 0;
    const board = new MemoryStatusBoard<{ wanted: number }>({ periodMs: 1_000, now: () => time });
    expect(board.ttl).toBe(3_000);
    expect(new MemoryStatusBoard().ttl).toBe(3 * boardDefaults.periodMs);
    await board.publish('m', { wanted: 2 });
    await board.publish('n', { wanted: 1 });
    time = 2_999;
    expect(await board.read('m')).toEqual({ wanted: 2 });
    time = 3_000;
    expect(await board.read('m')).toBeUndefined();
    await board.publish('m', { wanted: 3 });
    expect(await board.read('m')).toEqual({ wanted: 3 });
    await board.remove('m');
    expect(await board.read('m')).toBeUndefined();
    expect(await board.read('none')).toBeUndefined();
  });
});

describe('RedisStatusBoard', () => {
  function statusBoards(options: { periodMs?: number; ttl?: number } = {}) {
    const keyPrefix = `t-${randomUUID()}:`;
    const leader = new RedisStatusBoard<{ wanted: number }>({ url: server.url, keyPrefix, ...options });
    const follower = new RedisStatusBoard<{ wanted: number }>({ url: server.url, keyPrefix, ...options });
    opened.push(leader, follower);
    return { leader, follower, keyPrefix };
  }

  it("shows one gateway's published status to another, and its removal", async () => {
    const { leader, follower } = statusBoards();
    expect(await follower.read('org/m')).toBeUndefined();
    await leader.publish('org/m', { wanted: 2 });
    expect(await follower.read('org/m')).toEqual({ wanted: 2 });
    await leader.publish('org/m', { wanted: 3 });
    expect(await follower.read('org/m')).toEqual({ wanted: 3 });
    await leader.remove('org/m');
    expect(await follower.read('org/m')).toBeUndefined();
  });

  it('lets a status lapse after three pass periods unless published again', async () => {
    const { leader, follower, keyPrefix } = statusBoards({ periodMs: 100 });
    expect(follower.ttl).toBe(300);
    await leader.publish('m', { wanted: 1 });
    const pttl = await client().pttl(`${keyPrefix}deploy:status:m`);
    expect(pttl).toBeGreaterThan(0);
    expect(pttl).toBeLessThanOrEqual(300);
    await eventually(async () => (await follower.read('m')) === undefined, 5_000, 'the status to lapse');
  });

  it('publishes without rejecting, warned once, and reads STORE_UNAVAILABLE, when Redis is gone', async () => {
    const own = await startRedis();
    const warnings: LogFields[] = [];
    const board = new RedisStatusBoard({
      url: own.url,
      keyPrefix: `t-${randomUUID()}:`,
      logger: warningRecorder(warnings),
    });
    opened.push(board);
    try {
      await board.publish('m', { wanted: 1 });
      await own.stop();
      await board.publish('m', { wanted: 2 });
      await board.remove('m');
      expect(warnings.map((w) => w.msg)).toEqual(['status board unreachable, deployment status not published']);
      await expect(board.read('m')).rejects.toMatchObject({ code: 'STORE_UNAVAILABLE', status: 503 });
    } finally {
      await own.stop();
    }
  });

  it('refuses a bad period or TTL, naming it', () => {
    expect(() => new RedisStatusBoard({ url: server.url, periodMs: 0 })).toThrow(/periodMs/);
    expect(() => new MemoryStatusBoard({ ttl: 1.5 })).toThrow(/ttl/);
  });
});
