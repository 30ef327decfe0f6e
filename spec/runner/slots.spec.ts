import { describe, expect, it } from 'vitest';
import { Slots } from '../../runner/slots.ts';

describe('Slots', () => {
  it('returns the total and none in use when created', () => {
    const slots = new Slots(3);
    expect([slots.total, slots.inUse]).toEqual([3, 0]);
  });

  it('returns a release for each slot until all are taken', () => {
    const slots = new Slots(2);
    const a = slots.tryAcquire();
    const b = slots.tryAcquire();
    expect(typeof a).toBe('function');
    expect(typeof b).toBe('function');
    expect(slots.inUse).toBe(2);
  });

  it('returns undefined without changing inUse when every slot is taken', () => {
    const slots = new Slots(2);
    slots.tryAcquire();
    slots.tryAcquire();
    expect(slots.tryAcquire()).toBeUndefined();
    expect(slots.tryAcquire()).toBeUndefined();
    expect(slots.inUse).toBe(2);
  });

  it('returns a slot again once one is released', () => {
    const slots = new Slots(1);
    const release = slots.tryAcquire()!;
    expect(slots.tryAcquire()).toBeUndefined();
    release();
    expect(slots.inUse).toBe(0);
    expect(slots.tryAcquire()).toBeDefined();
    expect(slots.inUse).toBe(1);
  });

  it('returns inUse down by one only when the same release is called several times', () => {
    const slots = new Slots(3);
    const first = slots.tryAcquire()!;
    slots.tryAcquire();
    first();
    first();
    first();
    expect(slots.inUse).toBe(1);
    // A stale release must not free a slot now held by someone else.
    const third = slots.tryAcquire()!;
    first();
    expect(slots.inUse).toBe(2);
    third();
    expect(slots.inUse).toBe(1);
  });

  it('returns undefined on every try when created with no slots', () => {
    const slots = new Slots(0);
    expect(slots.tryAcquire()).toBeUndefined();
    expect(slots.inUse).toBe(0);
  });

  it('returns inUse equal to acquires minus distinct releases over a long run', () => {
    const slots = new Slots(5);
    const held: Array<() => void> = [];
    for (let i = 0; i < 100; i++) {
      const release = slots.tryAcquire();
      if (release) held.push(release);
      if (i % 3 === 0) held.shift()?.();
      expect(slots.inUse).toBe(held.length);
      expect(slots.inUse).toBeLessThanOrEqual(5);
    }
  });
});

describe('Slots.emptied', () => {
  const settled = async (promise: Promise<void>): Promise<boolean> => {
    let done = false;
    void promise.then(() => (done = true));
    // Two turns of the microtask queue: enough for an already-resolved promise to report.
    await Promise.resolve();
    await Promise.resolve();
    return done;
  };

  it('returns a resolved promise when no slot is in use', async () => {
    expect(await settled(new Slots(2).emptied())).toBe(true);
  });

  it('returns a promise that resolves only when the last slot is released', async () => {
    const slots = new Slots(3);
    const a = slots.tryAcquire()!;
    const b = slots.tryAcquire()!;
    const first = slots.emptied();
    const second = slots.emptied();
    a();
    expect(await settled(first)).toBe(false);
    // A second release of the same slot must not count as the other one.
    a();
    expect(await settled(first)).toBe(false);
    b();
    expect(await settled(first)).toBe(true);
    expect(await settled(second)).toBe(true);
  });

  it('returns a fresh wait after the slots emptied once and filled again', async () => {
    const slots = new Slots(1);
    const a = slots.tryAcquire()!;
    const before = slots.emptied();
    a();
    expect(await settled(before)).toBe(true);
    const c = slots.tryAcquire()!;
    const after = slots.emptied();
    expect(await settled(after)).toBe(false);
    c();
    expect(await settled(after)).toBe(true);
  });
});
