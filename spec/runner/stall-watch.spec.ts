/**
 * StallWatch: a blocked event loop is reported while it is blocked and for a while after, and
 * not otherwise. The block is real (a busy loop), with wide margins.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { StallWatch } from '../../runner/stall-watch.ts';

const watches: StallWatch[] = [];
afterEach(() => {
  for (const w of watches.splice(0)) w.stop();
});

function block(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until);
}

const tick = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('StallWatch', () => {
  it('reports no stall while the loop runs its timers', async () => {
    const watch = new StallWatch(20, 500);
    watches.push(watch);
    watch.start();
    await tick(100);
    expect(watch.stalled()).toBeLessThan(100);
  });

  it('reports a stall while it lasts, and for its memory after the loop runs again', async () => {
    const watch = new StallWatch(20, 400);
    watches.push(watch);
    watch.start();
    await tick(30);
    block(300);
    // Still inside the stall: its timers have not run.
    expect(watch.stalled()).toBeGreaterThanOrEqual(250);
    await tick(60);
    // The loop ran again; the stall is remembered.
    expect(watch.stalled()).toBeGreaterThanOrEqual(250);
    await tick(500);
    expect(watch.stalled()).toBeLessThan(100);
  });
});
