import { describe, expect, it } from 'vitest';
import { BLOCK_SIZE, blockHashes, PrefixCache } from '../../../../runner/engines/sim/index.ts';

/** `blocks` full blocks of distinct tokens named after `tag`, plus `extra` trailing tokens. */
const tokens = (tag: string, blocks: number, extra = 0): string[] =>
  Array.from({ length: blocks * BLOCK_SIZE + extra }, (_, index) => `${tag}${index}`);

describe('blockHashes', () => {
  it('returns one stable hash per full block and none for a partial trailing block', () => {
    expect(blockHashes(tokens('a', 0, 15))).toEqual([]);
    const hashes = blockHashes(tokens('a', 2, 15));
    expect(hashes).toHaveLength(2);
    expect(blockHashes(tokens('a', 2))).toEqual(hashes);
    expect(new Set(hashes).size).toBe(2);
  });

  it('chains each block to the ones before it, so equal tokens after another prefix hash differently', () => {
    const shared = tokens('s', 1);
    const [, afterA] = blockHashes([...tokens('a', 1), ...shared]);
    const [, afterB] = blockHashes([...tokens('b', 1), ...shared]);
    const [alone] = blockHashes(shared);
    expect(afterA).not.toBe(afterB);
    expect(alone).not.toBe(afterA);
  });
});

describe('PrefixCache', () => {
  it('returns the tokens of the leading cached blocks and stops at the first miss', () => {
    const cache = new PrefixCache(100);
    const prompt = [...tokens('a', 1), ...tokens('b', 1), ...tokens('c', 1), 'tail'];
    cache.insert(blockHashes(prompt));
    expect(cache.lookup(blockHashes(prompt), prompt.length)).toBe(48);
    const changed = [...tokens('a', 1), ...tokens('x', 1), ...tokens('c', 1), 'tail'];
    expect(cache.lookup(blockHashes(changed), changed.length)).toBe(16);
  });

  it('does not hit on a block whose content appeared at another position', () => {
    const cache = new PrefixCache(100);
    const shared = tokens('s', 1);
    cache.insert(blockHashes([...tokens('a', 1), ...shared, 'x']));
    const moved = [...shared, 'x'];
    expect(cache.lookup(blockHashes(moved), moved.length)).toBe(0);
  });

  it('always leaves the last prompt token to compute, as vLLM does', () => {
    const cache = new PrefixCache(100);
    const exact = tokens('a', 2);
    cache.insert(blockHashes(exact));
    expect(cache.lookup(blockHashes(exact), exact.length)).toBe(16);
    const longer = [...exact, 'more'];
    expect(cache.lookup(blockHashes(longer), longer.length)).toBe(32);
  });

  it('counts queries as prompt tokens and hits as cached tokens', () => {
    const cache = new PrefixCache(100);
    const prompt = tokens('a', 2, 5);
    cache.lookup(blockHashes(prompt), prompt.length);
    cache.insert(blockHashes(prompt));
    cache.lookup(blockHashes(prompt), prompt.length);
    expect(cache.totals()).toEqual({ queries: 2 * 37, hits: 32 });
  });

  it('evicts the least recently used blocks beyond its capacity', () => {
    const cache = new PrefixCache(4);
    const [p1, p2, p3] = ['a', 'b', 'c'].map((tag) => tokens(tag, 2, 1));
    for (const prompt of [p1!, p2!, p3!]) cache.insert(blockHashes(prompt));
    expect(cache.size).toBe(4);
    expect(cache.lookup(blockHashes(p1!), p1!.length)).toBe(0);
    expect(cache.lookup(blockHashes(p2!), p2!.length)).toBe(32);
    expect(cache.lookup(blockHashes(p3!), p3!.length)).toBe(32);
  });

  it('evicts a prompt from its tail first, so a squeezed prompt keeps its head', () => {
    const cache = new PrefixCache(3);
    const long = tokens('a', 3, 1);
    cache.insert(blockHashes(long));
    cache.insert(blockHashes(tokens('b', 1, 1)));
    expect(cache.lookup(blockHashes(long), long.length)).toBe(32);
  });
});
