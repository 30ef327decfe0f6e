import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { systemClock } from '../../../placer/kernel/index.ts';

describe('systemClock', () => {
  // vitest's fake timers stand in for setTimeout, so these tests check the real code without waiting.
  beforeEach(() => {
    vi.useFakeTimers({ now: 1_000_000 });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('returns epoch milliseconds with sub-millisecond resolution when asked the time', () => {
    vi.useRealTimers();
    // Epoch ms: between two wall-clock readings taken around it, give or take 50 ms of drift
    // between the monotonic clock it counts on and the wall clock (the bracket, not the gap
    // between two readings, so a busy machine pausing this process cannot break it).
    const before = Date.now();
    const now = systemClock.now();
    const after = Date.now();
    expect(now).toBeGreaterThanOrEqual(before - 50);
    expect(now).toBeLessThanOrEqual(after + 50);
    // Net latency subtracts fractional runner times; whole-ms readings would round fast calls to 0.
    const readings = Array.from({ length: 1000 }, () => systemClock.now());
    expect(readings.some((r) => !Number.isInteger(r))).toBe(true);
    expect(readings.every((r, i) => i === 0 || r >= readings[i - 1]!)).toBe(true);
  });

  it('resolves sleep only when its time has passed', async () => {
    let done = false;
    const sleeping = systemClock.sleep(50).then(() => (done = true));
    await vi.advanceTimersByTimeAsync(49);
    expect(done).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    await sleeping;
    expect(done).toBe(true);
  });

  it('resolves sleep(0) on the next timer turn rather than synchronously', async () => {
    let done = false;
    const sleeping = systemClock.sleep(0).then(() => (done = true));
    await Promise.resolve();
    expect(done).toBe(false);
    await vi.advanceTimersByTimeAsync(0);
    await sleeping;
    expect(done).toBe(true);
  });

  it('rejects with the signal reason and clears its timer when the signal aborts', async () => {
    const controller = new AbortController();
    const sleeping = systemClock.sleep(10_000, controller.signal);
    expect(vi.getTimerCount()).toBe(1);
    const reason = new Error('client went away');
    controller.abort(reason);
    await expect(sleeping).rejects.toBe(reason);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('rejects at once without a timer when the signal was already aborted', async () => {
    const reason = new Error('already gone');
    const sleeping = systemClock.sleep(10, AbortSignal.abort(reason));
    expect(vi.getTimerCount()).toBe(0);
    await expect(sleeping).rejects.toBe(reason);
  });

  it('resolves and stops listening to the signal when the time passes first', async () => {
    const controller = new AbortController();
    const sleeping = systemClock.sleep(10, controller.signal);
    await vi.advanceTimersByTimeAsync(10);
    await sleeping;
    controller.abort(new Error('late'));
    // No unhandled rejection and nothing left scheduled: the listener was removed on resolve.
    expect(vi.getTimerCount()).toBe(0);
  });

  it('resolves after the full time when it exceeds the largest Node timer', async () => {
    const max = 2_147_483_647;
    let done = false;
    const sleeping = systemClock.sleep(max + 1_000).then(() => (done = true));
    await vi.advanceTimersByTimeAsync(max);
    expect(done).toBe(false);
    await vi.advanceTimersByTimeAsync(1_000);
    await sleeping;
    expect(done).toBe(true);
  });
});
