import { describe, expect, it } from 'vitest';
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
    hashes.forEach((hash, i) => expect(hash).toBe(blockHashes('m', prompt.slice(0, 16 * (i + 1)), 16).at(-1)));
  });

  it('returns a chain equal to hashing each whole prefix at once for text of one to four UTF-8 bytes a character', () => {
    const prompt = 'système: réponds 😀 vite, 你好世界. '.repeat(8);
    const hashes = blockHashes('m', prompt, 16);
    expect(hashes).toHaveLength(Math.floor(prompt.length / 16));
    let end = 0;
    hashes.forEach((hash, i) => {
      end += 16;
      // The one emoji per repeat that would be split takes its other half with it.
      if (/[\ud800-\udbff]/.test(prompt[end - 1]!)) end++;
      expect(hash).toBe(blockHashes('m', prompt.slice(0, end), 16)[i]);
      expect(blockHashes('m', prompt.slice(0, end), 16)).toHaveLength(i + 1);
    });
  });

  it('returns the same hashes for a prompt longer than the kept encoding buffer as for its prefix', () => {
    const long = `${system}${'w'.repeat(400_000)}`;
    const hashes = blockHashes('m', long, 64);
    expect(hashes).toHaveLength(Math.floor(long.length / 64));
    expect(hashes.slice(0, 10)).toEqual(blockHashes('m', long.slice(0, 640), 64));
    // The shared buffer is still right after a long prompt had one of its own.
    expect(blockHashes('m', `${system}${system}`, 16)).toEqual(blockHashes('m', `${system}${system}x`, 16));
  });

  it.each([
    ['m', 'x'.repeat(16), 16, [0xcd471ea37fbc0b56n]],
    ['m', 'abcdefghijklmnopqrstuvwxyz0123456789', 16, [0xaf5937adf2c2b16en, 0x64e1d63ed7cba975n]],
    ['llama-3-8b', 'système: réponds 😀 vite, 你好世界. '.repeat(2), 16, [0x56cac95a89aac35cn, 0xda1a4bbe64c04982n, 0xc6e3b877b5f49644n, 0x6c8c44acc9d4cfdfn]],
    ['m', 'abc', 3, [0xdb4d8c6b4f5989e5n]],
  ])('returns the fixed hashes for %j, %j in blocks of %i, so a change to the algorithm shows', (fn, prompt, blockSize, expected) => {
    expect(blockHashes(fn, prompt, blockSize)).toEqual(expected);
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

  it('returns the same first hash whatever follows a lone surrogate ending the block, which is one character', () => {
    const a = blockHashes('m', `${'x'.repeat(15)}\ud800${'a'.repeat(20)}`, 16);
    const b = blockHashes('m', `${'x'.repeat(15)}\ud800${'b'.repeat(20)}`, 16);
    expect(a).toHaveLength(2);
    expect(a[0]).toEqual(b[0]);
    expect(a[1]).not.toEqual(b[1]);
  });

  it('returns blocks counted in UTF-16 code units whatever their UTF-8 length', () => {
    expect(blockHashes('m', 'é'.repeat(47), 16)).toHaveLength(2);
    expect(blockHashes('m', '你'.repeat(48), 16)).toHaveLength(3);
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
