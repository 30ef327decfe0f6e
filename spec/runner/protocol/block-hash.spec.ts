import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  blockKey,
  blockKeys,
  chainBlockHashes,
  packBlockKeys,
  seedHash,
  unpackBlockKeys,
} from '../../../runner/protocol/index.ts';

interface VectorCase {
  name: string;
  seed: string;
  blockSize: number;
  tokens: number[];
  seedHash: string;
  hashes: string[];
  ints: string[];
}

// Computed by block-hash-vectors.py with Python's cbor2, a second implementation of the scheme.
const vectors = JSON.parse(readFileSync(new URL('./block-hash-vectors.json', import.meta.url), 'utf8')) as {
  cases: VectorCase[];
};

describe('block hashes (vLLM sha256_cbor)', () => {
  it.each(vectors.cases.map((c) => [c.name, c] as const))('%s', (_name, c) => {
    expect(seedHash(c.seed).toString('hex')).toBe(c.seedHash);
    const hashes = chainBlockHashes(c.tokens, c.blockSize, seedHash(c.seed));
    expect(hashes.map((h) => h.toString('hex'))).toEqual(c.hashes);
    // The integer form vLLM's events carry maps to the same key as the bytes.
    expect(blockKeys(hashes)).toEqual(c.ints.map((n) => blockKey(BigInt(n))));
  });

  it('continues a chain from a known block as if hashed whole', () => {
    const tokens = Array.from({ length: 64 }, (_, i) => i * 7);
    const whole = chainBlockHashes(tokens, 16, seedHash('0'));
    const tail = chainBlockHashes(tokens, 16, whole[1]!, 2);
    expect(tail).toEqual(whole.slice(2));
  });

  it('keys are 16 hex digits of the low 64 bits, whatever form the hash came in', () => {
    const hash = Buffer.from(`${'00'.repeat(24)}0000000000000abc`, 'hex');
    expect(blockKey(hash)).toBe('0000000000000abc');
    expect(blockKey(0xabcn)).toBe('0000000000000abc');
    expect(blockKey(0xabc)).toBe('0000000000000abc');
    expect(blockKey((1n << 64n) + 5n)).toBe('0000000000000005');
  });

  it('refuses token ids that are not unsigned 32-bit integers, naming the id', () => {
    expect(() => chainBlockHashes([1.5, ...Array(15).fill(0)], 16, seedHash('0'))).toThrow(/1\.5/);
    expect(() => chainBlockHashes([-1, ...Array(15).fill(0)], 16, seedHash('0'))).toThrow(/-1/);
    expect(() => chainBlockHashes([2 ** 32, ...Array(15).fill(0)], 16, seedHash('0'))).toThrow(/4294967296/);
  });
});

describe('packed block keys', () => {
  it('round-trips keys through base64 of 8 bytes each', () => {
    const keys = ['0000000000000000', 'ffffffffffffffff', '0123456789abcdef'];
    expect(unpackBlockKeys(packBlockKeys(keys))).toEqual(keys);
    expect(unpackBlockKeys('')).toEqual([]);
  });

  it('refuses what is not base64 of whole keys', () => {
    expect(unpackBlockKeys('AAAA')).toBeUndefined();
    expect(unpackBlockKeys('not base64!')).toBeUndefined();
  });
});
