import { describe, expect, it } from 'vitest';
import { KvUsage } from '../../../../runner/engines/sim/index.ts';

describe('KvUsage', () => {
  it('holds ceil(tokens / 16) blocks per sequence, growing with generated tokens', () => {
    const kv = new KvUsage(10);
    const hold = kv.hold(40);
    expect(kv.heldBlocks).toBe(3);
    for (let i = 0; i < 8; i += 1) hold.grow();
    expect(kv.heldBlocks).toBe(3);
    hold.grow();
    expect(kv.heldBlocks).toBe(4);
    expect(kv.fraction).toBeCloseTo(0.4, 9);
  });

  it('clamps usage to 1 and gives blocks back once per release', () => {
    const kv = new KvUsage(2);
    const first = kv.hold(64);
    kv.hold(1);
    expect(kv.fraction).toBe(1);
    first.release();
    first.release();
    first.grow();
    expect(kv.heldBlocks).toBe(1);
    expect(kv.fraction).toBe(0.5);
  });
});
