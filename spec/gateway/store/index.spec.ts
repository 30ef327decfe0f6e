import { describe, expect, it } from 'vitest';
import { createStore } from '../../../gateway/store/index.ts';
import { freePort } from '../../support/redis.ts';
import { runningRecord } from './call-fixtures.ts';

describe('createStore', () => {
  it.each([undefined, 'memory'])('returns a memory store when the setting is %s', async (spec) => {
    const store = createStore(spec);
    const record = runningRecord(Date.now());
    await store.create(record);
    expect(await store.get(record.id)).toEqual(record);
    await store.close();
  });

  it('passes the options on, so a bad one is refused by name', () => {
    expect(() => createStore('memory', { maxStoredBytes: 0 })).toThrow(
      'maxStoredBytes must be a positive integer, got 0',
    );
    expect(() => createStore('redis://127.0.0.1:6379', { maxStoredBytes: 0 })).toThrow(
      'maxStoredBytes must be a positive integer, got 0',
    );
    expect(() => createStore('redis://127.0.0.1:6379', { resultTtl: -1 })).toThrow(
      'resultTtl must be a positive integer, got -1',
    );
  });

  it('returns a redis store for a redis:// URL', async () => {
    const port = await freePort();
    const store = createStore(`redis://127.0.0.1:${port}/3`, { keyPrefix: 'x:' });
    try {
      await expect(store.get('call-1')).rejects.toThrow(`redis store redis://127.0.0.1:${port}/3 is unavailable`);
    } finally {
      await store.close();
    }
  });

  it.each([
    ['', 'store must be "memory" or redis://host:port[/db], got ""'],
    ['Memory', 'store must be "memory" or redis://host:port[/db], got "Memory"'],
    ['rediss://127.0.0.1:6380', 'store must be "memory" or redis://host:port[/db], got "rediss://127.0.0.1:6380"'],
    [
      'postgres://app:pw@db/calls',
      'store must be "memory" or redis://host:port[/db], got "postgres://app:***@db/calls"',
    ],
    ['redis://', 'store must be redis://host:port[/db], got "redis://"'],
  ])('refuses the setting %j with a message naming `store`', (spec, message) => {
    expect(() => createStore(spec)).toThrow(message);
    expect(() => createStore(spec)).toThrow(expect.objectContaining({ code: 'STORE_INVALID_OPTION', status: 500 }));
  });
});
