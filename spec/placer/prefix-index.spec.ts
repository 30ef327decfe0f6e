import { describe, expect, it } from 'vitest';
import { fnv1a64 } from '../../placer/index.ts';
import { blockHashes } from '../../placer/prefix-affinity/blocks.ts';
import { PrefixIndex } from '../../placer/prefix-affinity/prefix-index.ts';

const system = 'You are a careful assistant. Answer briefly and cite sources. ';

describe('blockHashes', () => {
  it('returns one hash per full block and none for a trailing partial one', () => {
    expect(blockHashes('m', 'x'.repeat(63), 16)).toHaveLength(3);
    expect(blockHashes('m', 'x'.repeat(64), 16)).toHaveLength(4);
    expect(blockHashes('m', 'short', 16)).toEqual([]);
  });

  it('returns the same leading hashes for prompts that share a prefix, and different ones after it', () => {
    const a = blockHashes('m', `${system}What is a KV cache?`, 16);
    const b = blockHashes('m', `${system}Why do engines batch requests?`, 16);
    const shared = Math.floor(system.length / 16);
    expect(a.slice(0, shared)).toEqual(b.slice(0, shared));
    expect(a[shared + 1]).not.toEqual(b[shared + 1]);
  });

  it('returns hashes that cover the whole prefix, so equal blocks after a difference still differ', () => {
    const a = blockHashes('m', 'A'.repeat(16) + 'same block here.', 16);
    const b = blockHashes('m', 'B'.repeat(16) + 'same block here.', 16);
    expect(a[1]).not.toEqual(b[1]);
  });

  it('returns a chain equal to hashing each whole prefix at once', () => {
    const prompt = `${system}${system}`;
    const hashes = blockHashes('m', prompt, 16);
    hashes.forEach((hash, i) => expect(hash).toBe(fnv1a64(`m\u0000${prompt.slice(0, 16 * (i + 1))}`)));
  });

  it('returns different hashes for the same prompt sent to another model', () => {
    expect(blockHashes('llama-3-8b', system, 16)[0]).not.toEqual(blockHashes('llama-3-70b', system, 16)[0]);
  });

  it('returns different hashes for different emoji straddling a block boundary', () => {
    // Split between its halves, each emoji would hash as two U+FFFD; the block grows by one instead.
    const a = blockHashes('m', `${'x'.repeat(15)}😀${'y'.repeat(20)}`, 16);
    const b = blockHashes('m', `${'x'.repeat(15)}😁${'y'.repeat(20)}`, 16);
    expect(a[0]).not.toEqual(b[0]);
  });
});

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
});
