/** runner/protocol/status.ts: what a gateway reads from a runner's status page. */
import { describe, expect, it } from 'vitest';
import { readStatus } from '../../../runner/protocol/index.ts';

describe('readStatus', () => {
  const page = {
    ready: true,
    models: ['m1', 7, 'm2'],
    slots: { total: 4, inUse: 3 },
    engines: [{ load: { waiting: 2, kvCacheUsage: 0.5 } }],
  };

  it('reads the models and the load of a ready runner, dropping model names that are not strings', () => {
    expect(readStatus(page)).toEqual({
      models: ['m1', 'm2'],
      load: { slotsInUse: 3, slots: 4, queue: 2, kvCacheUsage: 0.5, models: {} },
    });
  });

  it('reads no models while the engine is not ready, and no load without slots', () => {
    expect(readStatus({ ...page, ready: false }).models).toBeUndefined();
    expect(readStatus({ ...page, models: undefined }).models).toBeUndefined();
    expect(readStatus({ ...page, slots: undefined }).load).toBeUndefined();
    expect(readStatus({ ...page, engines: [] }).load).toEqual({ slotsInUse: 3, slots: 4, queue: 0, models: {} });
    expect(readStatus(null)).toEqual({ models: undefined, load: undefined });
  });

  it('reads the runner id when it is a valid wire id, and none otherwise', () => {
    expect(readStatus({ ...page, id: 'runner-1' }).id).toBe('runner-1');
    expect(readStatus({ ...page, id: 'has space' }).id).toBeUndefined();
    expect(readStatus({ ...page, id: 7 }).id).toBeUndefined();
    expect(readStatus(page)).not.toHaveProperty('id');
  });
});
