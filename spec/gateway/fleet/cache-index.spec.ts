import { describe, expect, it } from 'vitest';
import { CacheIndex } from '../../../gateway/fleet/cache-index.ts';
import type { CacheIndexOptions } from '../../../gateway/fleet/cache-index.ts';
import { packBlockKeys } from '../../../runner/protocol/index.ts';
import type { CacheUpdate } from '../../../runner/protocol/index.ts';
import { seededRandom } from '../../../placer/kernel/index.ts';
import { FakeClock } from '../../placer/fake.ts';

/** Block key i: 16 hex digits. */
const k = (i: number): string => i.toString(16).padStart(16, '0');
const keys = (from: number, to: number): string[] => Array.from({ length: to - from }, (_, i) => k(from + i));

function setup(options: Partial<CacheIndexOptions> = {}) {
  const clock = new FakeClock();
  const index = new CacheIndex({
    clock,
    staleAfterMs: 3000,
    pendingMs: 2000,
    maxBlocksPerRunner: 1000,
    maxBlocks: 10_000,
    ...options,
  });
  return { clock, index };
}

function update(seq: number, fields: Partial<CacheUpdate> & { stored?: string; removed?: string } = {}): CacheUpdate {
  return { epoch: 'e1', seq, engineFeed: 'live', ...fields };
}

/**
 * The leading tokens of `blocks` each runner holds, for the runners of `ids` (every holder when
 * absent): those `leading` lists, and the floor for the runners it leaves out.
 */
const leading = (index: CacheIndex, blocks: readonly string[], ids?: readonly string[]) => {
  const out = new Map<string, number>();
  const floor = index.leading(blocks, 16, out);
  if (floor > 0) for (const id of index.runners()) if (!out.has(id)) out.set(id, floor);
  return ids ? new Map([...out].filter(([id]) => ids.includes(id))) : out;
};

describe('CacheIndex', () => {
  it('returns the leading tokens each runner holds, counting blocks in a row from the first', () => {
    const { index } = setup();
    index.apply('a', update(1, { reset: true, stored: packBlockKeys(keys(0, 4)) }));
    index.apply('b', update(1, { reset: true, stored: packBlockKeys([k(0), k(2), k(3)]) }));
    index.apply('c', update(1, { reset: true, stored: packBlockKeys([k(1), k(2)]) }));
    expect(leading(index, keys(0, 4), ['a', 'b', 'c', 'd'])).toEqual(
      new Map([
        ['a', 64],
        ['b', 16],
      ]),
    );
    // b holds the later blocks of this prompt without its first: none of it.
    expect(leading(index, keys(1, 4))).toEqual(
      new Map([
        ['a', 48],
        ['c', 32],
      ]),
    );
    // Runners that drop out of the run at different blocks each keep their count.
    index.apply('d', update(1, { reset: true, stored: packBlockKeys(keys(0, 3)) }));
    expect(leading(index, keys(0, 4))).toEqual(
      new Map([
        ['a', 64],
        ['b', 16],
        ['d', 48],
      ]),
    );
  });

  it('agrees with a block-by-block walk over random feeds, with holes, shared runs and pending blocks', () => {
    const random = seededRandom(7);
    for (let round = 0; round < 40; round++) {
      const { clock, index } = setup({ maxBlocksPerRunner: 100_000, maxBlocks: 1_000_000 });
      const prompt = keys(0, 40);
      const held = new Map<string, Set<string>>();
      for (let r = 0; r < 12; r++) {
        const id = `r${r}`;
        // Most hold a run from the start (several the same run), some with a hole, some nothing.
        const run = Math.floor(random() * 4) * 10 + (random() < 0.3 ? Math.floor(random() * 10) : 0);
        const blocks = new Set(prompt.slice(0, run));
        if (random() < 0.25) blocks.delete(prompt[Math.floor(random() * 40)]!);
        index.apply(id, update(1, { reset: true, stored: packBlockKeys([...blocks]) }));
        if (random() < 0.3) {
          const pending = prompt.slice(0, Math.floor(random() * 40));
          index.placed(id, pending);
          for (const key of pending) blocks.add(key);
        }
        held.set(id, blocks);
      }
      clock.advance(1000);
      const expected = new Map<string, number>();
      for (const [id, blocks] of held) {
        let n = 0;
        while (n < prompt.length && blocks.has(prompt[n]!)) n++;
        if (n > 0) expected.set(id, n * 16);
      }
      expect(leading(index, prompt), `round ${round}`).toEqual(expected);
    }
  });

  it('gives the tokens every runner holds as a floor, and lists only the runners holding more', () => {
    const { index } = setup();
    for (const id of ['a', 'b', 'c']) index.apply(id, update(1, { reset: true, stored: packBlockKeys(keys(0, 4)) }));
    index.apply('b', update(2, { stored: packBlockKeys(keys(4, 10)) }));
    const out = new Map<string, number>();
    expect(index.leading(keys(0, 12), 16, out)).toBe(64);
    expect(out).toEqual(new Map([['b', 160]]));
    // Held whole by everyone: the floor is the whole prompt, and nobody is listed.
    const whole = new Map<string, number>();
    expect(index.leading(keys(0, 4), 16, whole)).toBe(64);
    expect(whole.size).toBe(0);
    // A runner that holds none of it: no floor, and everyone who holds some is listed.
    index.apply('d', update(1, { reset: true, stored: packBlockKeys([k(99)]) }));
    const listed = new Map<string, number>();
    expect(index.leading(keys(0, 12), 16, listed)).toBe(0);
    expect(listed).toEqual(
      new Map([
        ['a', 64],
        ['b', 160],
        ['c', 64],
      ]),
    );
  });

  it('applies stored and removed in sequence, and refuses a gap or an unknown epoch until a reset', () => {
    const { index } = setup();
    expect(index.apply('a', update(1, { stored: packBlockKeys([k(0)]) }))).toMatchObject({ kind: 'out-of-order' });
    expect(index.apply('a', update(1, { reset: true, stored: packBlockKeys([k(0)]) }))).toEqual({
      kind: 'applied',
      stored: 1,
      removed: 0,
    });
    expect(index.apply('a', update(2, { stored: packBlockKeys([k(1)]) })).kind).toBe('applied');
    expect(index.apply('a', update(4, { stored: packBlockKeys([k(2)]) }))).toEqual({
      kind: 'out-of-order',
      reason: 'expected seq 3, got 4; send a reset',
    });
    expect(index.apply('a', { ...update(3), epoch: 'e2' }).kind).toBe('out-of-order');
    // The refused updates changed nothing.
    expect(leading(index, keys(0, 3), ['a']).get('a')).toBe(32);
    expect(index.apply('a', update(3, { removed: packBlockKeys([k(0)]) })).kind).toBe('applied');
    expect(leading(index, keys(0, 3), ['a']).size).toBe(0);
    // A reset replaces everything, whatever the sequence was.
    expect(index.apply('a', { ...update(1, { reset: true, stored: packBlockKeys([k(5)]) }), epoch: 'e2' }).kind).toBe(
      'applied',
    );
    expect(index.state('a')).toMatchObject({ epoch: 'e2', seq: 1, blocks: 1 });
  });

  it('treats a feed as unknown once stale or down, and live again only after a reset', () => {
    const { clock, index } = setup();
    expect(index.known('a')).toBe(false);
    index.apply('a', update(1, { reset: true, stored: packBlockKeys([k(0)]) }));
    expect(index.known('a')).toBe(true);
    clock.set(clock.now() + 3000);
    expect(index.known('a')).toBe(true);
    clock.set(clock.now() + 1);
    expect(index.known('a')).toBe(false);
    // A keep-alive makes it fresh again.
    index.apply('a', update(2));
    expect(index.known('a')).toBe(true);
    index.apply('a', update(3, { engineFeed: 'down' }));
    expect(index.known('a')).toBe(false);
    expect(index.state('a')).toMatchObject({ engineFeed: 'down', blocks: 0 });
    expect(index.apply('a', update(4)).kind).toBe('out-of-order');
    index.apply('a', update(1, { reset: true, stored: packBlockKeys([k(0)]) }));
    expect(index.known('a')).toBe(true);
  });

  it('counts placed blocks as held until the feed stores them or pendingMs passes', () => {
    const { clock, index } = setup();
    index.apply('a', update(1, { reset: true }));
    // A runner without a feed gets no pending entries.
    index.placed('x', keys(0, 2));
    expect(index.state('x')).toBeUndefined();
    index.placed('a', keys(0, 3));
    expect(leading(index, keys(0, 4), ['a']).get('a')).toBe(48);
    expect(index.state('a')).toMatchObject({ blocks: 0, pending: 3 });
    index.apply('a', update(2, { stored: packBlockKeys(keys(0, 2)) }));
    expect(index.state('a')).toMatchObject({ blocks: 2, pending: 1 });
    clock.set(clock.now() + 2000);
    // The third block was never confirmed: it no longer counts.
    expect(leading(index, keys(0, 4), ['a']).get('a')).toBe(32);
    expect(index.state('a')).toMatchObject({ blocks: 2, pending: 0 });
    expect(index.size).toBe(2);
  });

  it('keeps each runner within maxBlocksPerRunner and the whole within maxBlocks, forgetting the oldest', () => {
    const { index } = setup({ maxBlocksPerRunner: 4, maxBlocks: 6 });
    index.apply('a', update(1, { reset: true, stored: packBlockKeys(keys(0, 6)) }));
    expect(index.state('a')?.blocks).toBe(4);
    expect(leading(index, keys(2, 6), ['a']).get('a')).toBe(64);
    expect(leading(index, keys(0, 6), ['a']).size).toBe(0);
    index.apply('b', update(1, { reset: true, stored: packBlockKeys(keys(10, 13)) }));
    // 7 blocks over 6: one goes, from the runner holding the most.
    expect(index.size).toBe(6);
    expect(index.state('a')?.blocks).toBe(3);
    expect(index.state('b')?.blocks).toBe(3);
    index.drop('a');
    expect(index.size).toBe(3);
    expect(index.state('a')).toBeUndefined();
    expect([...index.runners()]).toEqual(['b']);
  });
});
