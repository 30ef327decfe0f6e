/**
 * StallWatch: a blocked event loop is reported while it is blocked and for a while after, and
 * not otherwise. The rules are checked on fake timers, where a stall is the clock moving while no
 * timer runs; one case blocks the real loop, asserting only what load cannot undo (a busy machine
 * makes a stall longer, never shorter).
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { StallWatch } from '../../runner/stall-watch.ts';

const watches: StallWatch[] = [];
afterEach(() => {
  for (const w of watches.splice(0)) w.stop();
  vi.useRealTimers();
});

function watch(interval: number, memory: number, now?: () => number): StallWatch {
  const w = new StallWatch(interval, memory, now);
  watches.push(w);
  w.start();
  return w;
}

describe('StallWatch on a fake clock', () => {
  it('reports no stall while the loop runs its timers on time', () => {
    vi.useFakeTimers();
    const w = watch(20, 500, () => Date.now());
    for (let i = 0; i < 10; i++) {
      vi.advanceTimersByTime(20);
      expect(w.stalled()).toBe(0);
    }
  });

  it('reports a stall while it lasts, for its memory after the loop runs again, then not', () => {
    vi.useFakeTimers();
    const w = watch(20, 400, () => Date.now());
    vi.advanceTimersByTime(30);
    // 300 ms pass and no timer runs: the loop is blocked.
    vi.setSystemTime(Date.now() + 300);
    expect(w.stalled()).toBeGreaterThanOrEqual(280);
    // The loop runs again: the interval sees the gap and remembers it.
    vi.advanceTimersByTime(20);
    expect(w.stalled()).toBeGreaterThanOrEqual(280);
    vi.advanceTimersByTime(300);
    expect(w.stalled()).toBeGreaterThanOrEqual(280);
    vi.advanceTimersByTime(120);
    expect(w.stalled()).toBe(0);
  });

  it('keeps reporting a long stall for its memory when a shorter one follows, then the shorter one for its own', () => {
    vi.useFakeTimers();
    const w = watch(20, 400, () => Date.now());
    vi.advanceTimersByTime(20);
    vi.setSystemTime(Date.now() + 300);
    vi.advanceTimersByTime(20);
    expect(w.stalled()).toBeGreaterThanOrEqual(280);
    // 100 ms later a second, shorter stall: the first is still within its memory.
    vi.advanceTimersByTime(40);
    vi.setSystemTime(Date.now() + 90);
    vi.advanceTimersByTime(20);
    expect(w.stalled()).toBeGreaterThanOrEqual(280);
    // Past the first one's memory the second one is still reported, until its own ends.
    vi.advanceTimersByTime(280);
    const shorter = w.stalled();
    expect(shorter).toBeGreaterThanOrEqual(70);
    expect(shorter).toBeLessThan(280);
    vi.advanceTimersByTime(120);
    expect(w.stalled()).toBe(0);
  });

  it('does not count a late timer within one interval as a stall', () => {
    vi.useFakeTimers();
    const w = watch(20, 400, () => Date.now());
    vi.advanceTimersByTime(20);
    vi.setSystemTime(Date.now() + 15);
    vi.advanceTimersByTime(20);
    vi.advanceTimersByTime(20);
    expect(w.stalled()).toBe(0);
  });
});

describe('StallWatch on the real loop', () => {
  it('reports a real block while it lasts and just after', async () => {
    // The block follows start() in the same turn, so no timer of the watch can run between them:
    // whatever the machine's load, the watch last ran before the block began.
    const w = watch(20, 60_000);
    const until = performance.now() + 300;
    while (performance.now() < until);
    expect(w.stalled()).toBeGreaterThanOrEqual(280);
    await new Promise((r) => setTimeout(r, 60));
    expect(w.stalled()).toBeGreaterThanOrEqual(280);
  });
});
