import { describe, expect, it } from 'vitest';
import { BlockChain, blockHashes, PrefixMemo } from '../../../placer/prefix-affinity/blocks.ts';
import { PROBE_STRIDE, PrefixIndex, type PrefixMatch } from '../../../placer/prefix-affinity/prefix-index.ts';
import { seededRandom } from '../../../placer/kernel/index.ts';

const system = 'You are a careful assistant. Answer briefly and cite sources. ';

describe('PrefixIndex', () => {
  const prompt = blockHashes('m', `${system}${system}`, 16);

  it('returns the runner that served the longest prefix among the candidates', () => {
    const index = new PrefixIndex(100);
    index.record(prompt.slice(0, 3), 'a');
    index.record(prompt.slice(0, 6), 'b');
    expect(index.longest(prompt, new Set(['a', 'b']))).toEqual({ runnerId: 'b', blocks: 6 });
  });

  it('returns a shorter prefix when the runner holding the longest is not a candidate', () => {
    const index = new PrefixIndex(100);
    index.record(prompt.slice(0, 6), 'b');
    index.record(prompt.slice(0, 3), 'a');
    // The shorter prefix now points at a, the longer ones still at b.
    expect(index.longest(prompt, new Set(['a', 'c']))).toEqual({ runnerId: 'a', blocks: 3 });
    expect(index.longest(prompt, new Set(['c']))).toBeUndefined();
  });

  it('returns nothing for a runner once it is forgotten, and keeps the others', () => {
    const index = new PrefixIndex(100);
    index.record(prompt.slice(0, 2), 'a');
    index.record(prompt.slice(2, 4), 'b');
    index.forget(['a', 'gone-before']);
    expect(index.size).toBe(2);
    expect(index.longest(prompt.slice(0, 2), new Set(['a', 'b']))).toBeUndefined();
    expect(index.longest(prompt, new Set(['a', 'b']))).toEqual({ runnerId: 'b', blocks: 4 });
  });

  it('returns at most maxBlocks entries, evicting the least recently served first', () => {
    const index = new PrefixIndex(4);
    const other = blockHashes('m', 'z'.repeat(64), 16);
    index.record(prompt.slice(0, 4), 'a');
    index.record(other, 'b');
    expect(index.size).toBe(4);
    expect(index.longest(prompt, new Set(['a', 'b']))).toBeUndefined();
    expect(index.longest(other, new Set(['a', 'b']))).toEqual({ runnerId: 'b', blocks: 4 });
  });

  it("returns another runner's longer prefix past a forgotten runner's shorter one", () => {
    const index = new PrefixIndex(100);
    index.record(prompt.slice(0, 6), 'b');
    index.record(prompt.slice(0, 3), 'a');
    index.forget(['a']);
    expect(index.size).toBe(3);
    expect(index.longest(prompt, new Set(['a', 'b']))).toEqual({ runnerId: 'b', blocks: 6 });
    expect(index.longest(prompt.slice(0, 3), new Set(['a', 'b']))).toBeUndefined();
    // Served again, a forgotten entry points at a runner and counts again.
    index.record(prompt.slice(0, 2), 'c');
    expect(index.size).toBe(5);
    expect(index.longest(prompt, new Set(['c']))).toEqual({ runnerId: 'c', blocks: 2 });
  });

  it("returns a prompt's leading blocks after evicting its tail, the longest blocks first", () => {
    const index = new PrefixIndex(4);
    index.record(prompt.slice(0, 6), 'a');
    expect(index.size).toBe(4);
    expect(index.longest(prompt, new Set(['a']))).toEqual({ runnerId: 'a', blocks: 4 });
  });

  it(`returns the match while hashing at most ${PROBE_STRIDE} blocks past the held prefix`, () => {
    const index = new PrefixIndex(1_000);
    const long = system.repeat(60);
    index.record(blockHashes('m', long.slice(0, 16 * 21), 16), 'a');
    const chain = new BlockChain('m', long, 16);
    expect(index.longest(chain, new Set(['a']))).toEqual({ runnerId: 'a', blocks: 21 });
    expect(chain.hashed).toBeLessThanOrEqual(21 + PROBE_STRIDE);
    expect(blockHashes('m', long, 16).length).toBeGreaterThan(200);
  });

  /** The answer by definition: every block from the last down, the first a candidate served. */
  function linearLongest(
    index: PrefixIndex,
    hashes: readonly bigint[],
    candidates: ReadonlySet<string>,
  ): PrefixMatch | undefined {
    for (let i = hashes.length - 1; i >= 0; i--) {
      const runnerId = index.servedBy(hashes[i]!);
      if (runnerId !== undefined && candidates.has(runnerId)) return { runnerId, blocks: i + 1 };
    }
    return undefined;
  }

  it.each([
    // seed, maxBlocks, forget one runner every this many steps (0: never)
    [1, 10_000, 0],
    [2, 60, 0],
    [3, 25, 0],
    [4, 10_000, 7],
    [5, 60, 5],
    [6, 25, 3],
  ])(
    'returns what trying every block from the last down returns (seed %i, maxBlocks %i, forgetting every %i steps)',
    (seed, maxBlocks, forgetEvery) => {
      const random = seededRandom(seed);
      const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)]!;
      const runners = ['r0', 'r1', 'r2', 'r3', 'r4', 'r5'];
      const turns = Array.from(
        { length: 6 },
        (_, t) =>
          ` turn ${t}: ${'abcdefgh'.repeat(1 + Math.floor(random() * 6)).slice(0, 5 + Math.floor(random() * 40))}`,
      );
      const histories = Array.from({ length: 10 }, (_, s) => system.repeat(5 + (s % 3)));
      const index = new PrefixIndex(maxBlocks);
      // Chains lend each other their shared blocks, as in the placer, so lookups also start from
      // a first probe far along.
      const memo = new PrefixMemo(4, 1 << 20);
      let compared = 0;
      let matched = 0;
      for (let step = 1; step <= 150; step++) {
        const session = Math.floor(random() * histories.length);
        histories[session] += pick(turns);
        index.record(new BlockChain('m', histories[session]!, 16, memo).all(), pick(runners));
        if (forgetEvery > 0 && step % forgetEvery === 0) index.forget([pick(runners)]);
        for (let look = 0; look < 3; look++) {
          const next = histories[Math.floor(random() * histories.length)]! + pick(turns);
          const candidates = new Set(runners.filter(() => random() < 0.6));
          const expected = linearLongest(index, blockHashes('m', next, 16), candidates);
          expect(index.longest(new BlockChain('m', next, 16), candidates)).toEqual(expected);
          expect(index.longest(new BlockChain('m', next, 16, memo), candidates)).toEqual(expected);
          expect(index.longest(blockHashes('m', next, 16), candidates)).toEqual(expected);
          compared++;
          if (expected !== undefined) matched++;
        }
      }
      // The table means something only if both answers occur often.
      expect(matched).toBeGreaterThan(compared / 10);
      expect(compared - matched).toBeGreaterThan(compared / 20);
    },
  );
});
