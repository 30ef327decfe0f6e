import { describe, expect, it } from 'vitest';
import { createMemoryLimiter } from '../../gateway/access/limits.ts';
import type { Limiter } from '../../gateway/access/limits.ts';
import { measureKeyCost } from '../../k6/driver/key-cost.ts';

describe('measureKeyCost', () => {
  it('takes every measured call (and its warm-up) through every limit, and gives each call back', async () => {
    const memory = createMemoryLimiter();
    const seen = { admitCall: 0, admitTokens: 0, settle: 0, release: 0 };
    const counting: Limiter = {
      ...memory,
      admitCall: (...args) => (seen.admitCall++, memory.admitCall(...args)),
      admitTokens: (...args) => (seen.admitTokens++, memory.admitTokens(...args)),
      settle: (...args) => (seen.settle++, memory.settle(...args)),
      release: (...args) => (seen.release++, memory.release(...args)),
      reserveStored: (...args) => memory.reserveStored(...args),
      settleStored: (...args) => memory.settleStored(...args),
      releaseStored: (...args) => memory.releaseStored(...args),
      close: () => memory.close(),
    };
    const cost = await measureKeyCost(counting, 100, 4);
    // 4 loops of 25 measured calls, after 4 loops of 2 warm-up calls.
    expect(seen).toEqual({ admitCall: 108, admitTokens: 108, settle: 0, release: 108 });
    expect(cost.lookupUs).toBeGreaterThan(0);
    expect(cost.limitsUs).toBeGreaterThan(0);
  });
});
