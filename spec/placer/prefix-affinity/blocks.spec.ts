/** placer/prefix-affinity/blocks.ts: a prompt's block hashes, the lazy chain of them, and the memo of chains already hashed. */
import { describe, expect, it } from 'vitest';
import { BlockChain, blockHashes, PrefixMemo } from '../../../placer/prefix-affinity/blocks.ts';
import { seededRandom } from '../../../placer/kernel/index.ts';

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
    const a = blockHashes('m', `${'A'.repeat(16)}same block here.`, 16);
    const b = blockHashes('m', `${'B'.repeat(16)}same block here.`, 16);
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
    [
      'llama-3-8b',
      'système: réponds 😀 vite, 你好世界. '.repeat(2),
      16,
      [0x56cac95a89aac35cn, 0xda1a4bbe64c04982n, 0xc6e3b877b5f49644n, 0x6c8c44acc9d4cfdfn],
    ],
    ['m', 'abc', 3, [0xdb4d8c6b4f5989e5n]],
  ])(
    'returns the fixed hashes for %j, %j in blocks of %i, so a change to the algorithm shows',
    (fn, prompt, blockSize, expected) => {
      expect(blockHashes(fn, prompt, blockSize)).toEqual(expected);
    },
  );

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

describe('BlockChain', () => {
  const prompts: [string, string, number][] = [
    ['ASCII, word-aligned blocks', system.repeat(12), 64],
    ['ASCII, blocks of 16', system.repeat(5), 16],
    ['ASCII, blocks of 7 (no block on a word)', system.repeat(5), 7],
    ['accents and CJK', 'système: réponds 😀 vite, 你好世界. '.repeat(9), 16],
    [
      'emoji across block ends and a lone surrogate',
      `${'x'.repeat(63)}😀 emoji ${'\ud800'} straddle 🚀🚀. `.repeat(10),
      64,
    ],
  ];

  it.each(prompts)("returns blockHashes' hashes for %s whatever order they are read in", (_name, prompt, blockSize) => {
    const expected = blockHashes('m', prompt, blockSize);
    expect(expected.length).toBeGreaterThan(8);
    const chain = new BlockChain('m', prompt, blockSize);
    const random = seededRandom(prompt.length);
    const order = expected.map((_, i) => i).sort(() => random() - 0.5);
    for (const i of order) expect(chain.at(i)).toBe(expected[i]);
    expect(chain.at(expected.length)).toBeUndefined();
    expect(chain.all()).toEqual(expected);
  });

  it('returns the same hashes when chains are read in turns, one of them too long for the kept buffer', () => {
    // 'é' is two bytes, so its buffer (three bytes per unit at most) is over a megabyte and not kept.
    const long = `${system}${'é'.repeat(400_000)}`;
    const chains = [
      new BlockChain('m', system.repeat(40), 64),
      new BlockChain('m', long, 64),
      new BlockChain('n', system.repeat(40), 64),
    ];
    const expected = [
      blockHashes('m', system.repeat(40), 64),
      blockHashes('m', long, 64),
      blockHashes('n', system.repeat(40), 64),
    ];
    for (const upTo of [1, 5, 6, 20, 39]) {
      for (const [c, chain] of chains.entries()) expect(chain.at(upTo)).toBe(expected[c]![upTo]);
    }
    for (const [c, chain] of chains.entries()) expect(chain.all()).toEqual(expected[c]);
  });

  it('returns hashes for no block past the one read', () => {
    const chain = new BlockChain('m', system.repeat(20), 16);
    expect(chain.hashed).toBe(0);
    chain.at(3);
    expect(chain.hashed).toBe(4);
    chain.at(1);
    expect(chain.hashed).toBe(4);
    expect(chain.at(10_000)).toBeUndefined();
    expect(chain.hashed).toBe(blockHashes('m', system.repeat(20), 16).length);
  });
});

describe('PrefixMemo', () => {
  const base = 'système: réponds 😀 vite, 你好世界. '.repeat(12);

  it.each([
    ['the same prompt', base, base],
    ['a longer prompt', base, `${base}${' and more words to fill blocks'.repeat(5)}`],
    ['a shorter prompt', `${base}${'x'.repeat(300)}`, base],
    ['one character changed in the middle of a block', base, `${base.slice(0, 100)}Z${base.slice(101)}`],
    ['the first character changed', base, `Y${base.slice(1)}`],
    ['a character of another byte length in the same place', base, base.replace('😀', 'é!')],
    ['ASCII that parts halfway', system.repeat(20), `${system.repeat(10)}different ${system.repeat(10)}`],
    [
      'an emoji moved across a block end',
      `${'x'.repeat(63)}😀${'y'.repeat(200)}`,
      `${'x'.repeat(63)}a😀${'y'.repeat(199)}`,
    ],
    [
      'a lone surrogate against U+FFFD, the same bytes',
      `${'x'.repeat(40)}\ud800${'y'.repeat(200)}`,
      `${'x'.repeat(40)}\ufffd${'y'.repeat(200)}`,
    ],
  ])('returns the hashes a fresh chain returns after %s was kept', (_name, kept, next) => {
    for (const blockSize of [16, 64, 7]) {
      const memo = new PrefixMemo(8, 1 << 20);
      new BlockChain('m', kept, blockSize, memo).all();
      expect(memo.size).toBe(1);
      const expected = blockHashes('m', next, blockSize);
      const chain = new BlockChain('m', next, blockSize, memo);
      expect(chain.at(expected.length - 1)).toBe(expected.at(-1));
      expect(chain.at(expected.length)).toBeUndefined();
      expect(chain.all()).toEqual(expected);
    }
  });

  it('returns every block the prompts share once the first is read, without hashing them', () => {
    const memo = new PrefixMemo(8, 1 << 20);
    const kept = system.repeat(10);
    new BlockChain('m', kept, 16, memo).all();
    const chain = new BlockChain('m', `${kept}${' then a new question'.repeat(20)}`, 16, memo);
    chain.at(0);
    expect(chain.hashed).toBe(Math.floor(kept.length / 16));
    // Another model's prompt shares no blocks, whatever its text.
    const other = new BlockChain('n', `${kept}${' then a new question'.repeat(20)}`, 16, memo);
    other.at(0);
    expect(other.hashed).toBe(1);
  });

  it('returns at most maxChains chains, and none too large for maxBytes', () => {
    const memo = new PrefixMemo(2, 1 << 20);
    for (const s of ['a', 'b', 'c']) new BlockChain('m', `${s}${system.repeat(4)}`, 16, memo).all();
    expect(memo.size).toBe(2);
    const small = new PrefixMemo(8, 1_000);
    new BlockChain('m', system.repeat(40), 16, small).all();
    expect(small.size).toBe(0);
    // A prompt of one block has nothing to share past its first.
    new BlockChain('m', 'x'.repeat(20), 16, small).all();
    expect(small.size).toBe(0);
  });
});
