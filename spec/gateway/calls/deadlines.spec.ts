/**
 * Deadlines (gateway/calls/deadlines.ts) on a fake clock: each fires once at its time, earliest first,
 * never after it was removed, and the whole set holds one sleep on the clock at most, none once
 * it is empty.
 */
import { describe, expect, it } from 'vitest';
import { Deadlines } from '../../../gateway/calls/deadlines.ts';
import type { Deadline } from '../../../gateway/calls/deadlines.ts';
import { seededRandom } from '../../../placer/kernel/index.ts';
import { FakeClock, T0 } from '../../placer/fake.ts';

const settle = () => new Promise((r) => setImmediate(r));

/**
 * Deadlines on a fresh fake clock: `at(ms, name)` adds one `ms` after T0 that records `name` when
 * it fires, and `elapse(ms)` moves the clock, lets what fired run, and returns every name fired so far.
 */
function setup() {
  const clock = new FakeClock();
  const d = new Deadlines(clock);
  const fired: string[] = [];
  const at = (ms: number, name: string) => d.add(T0 + ms, () => fired.push(name));
  const elapse = async (ms: number): Promise<string[]> => {
    clock.advance(ms);
    await settle();
    return [...fired];
  };
  return { clock, d, fired, at, elapse };
}

describe('Deadlines', () => {
  it('fires each deadline once when its time comes, earliest first, with one sleep armed at a time', async () => {
    const { clock, d, at, elapse } = setup();
    at(300, 'c');
    at(100, 'a');
    at(200, 'b');
    at(200, 'b2');
    expect(clock.sleeping).toBe(1);
    expect(await elapse(99)).toEqual([]);
    expect(await elapse(1)).toEqual(['a']);
    expect((await elapse(150)).sort()).toEqual(['a', 'b', 'b2']);
    expect(clock.sleeping).toBe(1);
    expect(await elapse(50)).toHaveLength(4);
    expect(d.size).toBe(0);
    expect(clock.sleeping).toBe(0);
  });

  it('never fires a removed deadline; an emptied set leaves no sleep behind', async () => {
    const { clock, d, at, elapse } = setup();
    const a = at(100, 'a');
    const b = at(200, 'b');
    d.remove(a);
    // The sleep armed for a still stands; it ends early and arms for b.
    expect(await elapse(100)).toEqual([]);
    expect(clock.sleeping).toBe(1);
    d.remove(b);
    d.remove(b);
    expect(clock.sleeping).toBe(0);
    expect(await elapse(1_000)).toEqual([]);
  });

  it('re-arms for a new deadline earlier than the armed one', async () => {
    const { clock, at, elapse } = setup();
    at(1_000, 'late');
    at(10, 'soon');
    expect(clock.sleeping).toBe(1);
    expect(await elapse(10)).toEqual(['soon']);
  });

  it('a deadline added while others fire, already due, fires too', async () => {
    const { clock, d, fired, at } = setup();
    d.add(T0 + 10, () => {
      fired.push('first');
      at(5, 'added, past');
    });
    clock.advance(10);
    await settle();
    await settle();
    expect(fired).toEqual(['first', 'added, past']);
    expect(clock.sleeping).toBe(0);
  });

  it('keeps heap order through 2,000 random adds and removes: what fires is what stayed, in time order', async () => {
    const clock = new FakeClock();
    const d = new Deadlines(clock);
    const random = seededRandom(11);
    const fired: number[] = [];
    const kept = new Set<number>();
    const handles: { at: number; h: Deadline }[] = [];
    for (let i = 0; i < 2_000; i++) {
      const at = T0 + 1 + Math.floor(random() * 10_000);
      handles.push({ at, h: d.add(at, () => fired.push(at)) });
      kept.add(i);
      if (random() < 0.4) {
        const j = Math.floor(random() * handles.length);
        if (kept.delete(j)) d.remove(handles[j]!.h);
      }
    }
    expect(d.size).toBe(kept.size);
    for (let t = 0; t <= 10_000; t += 500) {
      clock.set(T0 + t);
      await settle();
    }
    expect(fired).toHaveLength(kept.size);
    expect(fired).toEqual([...fired].sort((x, y) => x - y));
    expect(fired.sort((x, y) => x - y)).toEqual([...kept].map((i) => handles[i]!.at).sort((x, y) => x - y));
    expect(clock.sleeping).toBe(0);
  });
});
