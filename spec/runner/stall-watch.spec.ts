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

/**
 * Runs a script on fake timers against a watch checking every 20 ms: `run N` lets N ms pass with
 * timers running, `block N` moves the clock N ms while none runs (a blocked loop), and a reading
 * checks what the watch reports: `0`, `>=N`, or `N..M` (at least N, under M).
 */
function play(memory: number, script: string): void {
  vi.useFakeTimers();
  const w = watch(20, memory, () => Date.now());
  for (const step of script.split(', ')) {
    const [verb, ms] = step.split(' ');
    if (verb === 'run') vi.advanceTimersByTime(Number(ms));
    else if (verb === 'block') vi.setSystemTime(Date.now() + Number(ms));
    else if (verb!.startsWith('>=')) expect(w.stalled(), step).toBeGreaterThanOrEqual(Number(verb!.slice(2)));
    else if (verb!.includes('..')) {
      const [low, high] = verb!.split('..').map(Number);
      expect(w.stalled(), step).toBeGreaterThanOrEqual(low!);
      expect(w.stalled(), step).toBeLessThan(high!);
    } else expect(w.stalled(), step).toBe(Number(verb));
  }
}

describe('StallWatch on a fake clock', () => {
  it.each([
    ['reports no stall while the loop runs its timers on time', 500, Array(10).fill('run 20, 0').join(', ')],
    // 300 ms pass and no timer runs: the loop is blocked; once it runs again the interval sees
    // the gap and remembers it.
    [
      'reports a stall while it lasts, for its memory after the loop runs again, then not',
      400,
      'run 30, block 300, >=280, run 20, >=280, run 300, >=280, run 120, 0',
    ],
    // 100 ms after the first, a second, shorter stall: the first is still within its memory; past
    // it, the second one is still reported, until its own ends.
    [
      'keeps reporting a long stall for its memory when a shorter one follows, then the shorter one for its own',
      400,
      'run 20, block 300, run 20, >=280, run 40, block 90, run 20, >=280, run 280, 70..280, run 120, 0',
    ],
    ['does not count a late timer within one interval as a stall', 400, 'run 20, block 15, run 20, run 20, 0'],
  ])('%s', (_name, memory, script) => {
    play(memory, script);
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
