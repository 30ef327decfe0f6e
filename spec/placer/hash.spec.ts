import { describe, expect, it } from 'vitest';
import { FNV_OFFSET_BASIS, fnv1a64, jumpConsistentHash } from '../../placer/index.ts';
import { expectEvenSpread, expectMinimalMoves } from '../support/home-spread.ts';

/** The textbook FNV-1a 64, one BigInt multiply per byte: slow, but obviously right. */
function fnv1a64Reference(input: string): bigint {
  let hash = 0xcbf29ce484222325n;
  for (const byte of new TextEncoder().encode(input)) {
    hash = BigInt.asUintN(64, (hash ^ BigInt(byte)) * 0x100000001b3n);
  }
  return hash;
}

const keys = Array.from({ length: 10_000 }, (_, i) => fnv1a64(`session-${i}`));

describe('fnv1a64', () => {
  it.each([
    ['', 0xcbf29ce484222325n],
    ['a', 0xaf63dc4c8601ec8cn],
    ['foobar', 0x85944171f73967e8n],
  ])('returns the published FNV-1a 64 value when hashing %j', (input, expected) => {
    expect(fnv1a64(input)).toBe(expected);
  });

  it('returns the same value as the one-BigInt-per-byte form when keys hold any UTF-8', () => {
    const inputs = [
      'session-1',
      'user@example.com',
      'ёлка',
      '中国',
      '🦙 llama',
      'lone \ud800 surrogate',
      'x'.repeat(1000),
    ];
    for (const input of inputs) expect(fnv1a64(input)).toBe(fnv1a64Reference(input));
  });

  it('returns the hash of the joined string when continuing from the hash of its start', () => {
    const splits: [string, string][] = [
      ['', 'foobar'],
      ['foo', 'bar'],
      ['foobar', ''],
      ['ёл', 'ка'],
      ['🦙', ' llama'],
      ['x'.repeat(500), 'y'.repeat(500)],
    ];
    for (const [head, tail] of splits) expect(fnv1a64(tail, fnv1a64(head))).toBe(fnv1a64Reference(head + tail));
  });

  it('returns the plain hash when the basis is the offset basis, and takes a basis modulo 2^64', () => {
    expect(fnv1a64('foobar', FNV_OFFSET_BASIS)).toBe(0x85944171f73967e8n);
    expect(fnv1a64('bar', fnv1a64('foo') + (1n << 64n))).toBe(fnv1a64('foobar'));
  });

  it('returns a value in [0, 2^64) when hashing any string', () => {
    for (let i = 0; i < 1000; i++) {
      const hash = fnv1a64(`k${i}`);
      expect(hash >= 0n && hash < 1n << 64n).toBe(true);
    }
  });
});

describe('jumpConsistentHash', () => {
  // From the widely used Go port (dgryski/go-jump), which follows the paper's C++ line by line.
  it.each([
    [1n, 1, 0],
    [42n, 57, 43],
    [0xdead10ccn, 1, 0],
    [0xdead10ccn, 666, 361],
    [256n, 1024, 520],
  ])('returns the reference bucket when key is %s and buckets is %i', (key, buckets, expected) => {
    expect(jumpConsistentHash(key, buckets)).toBe(expected);
  });

  it('returns the Go reference bucket when the key is FNV-1a 64 of a UTF-8 string', () => {
    // go-jump: HashString("中国", 10, NewFNV1a()) == 5, i.e. fnv.New64a then Hash.
    expect(jumpConsistentHash(fnv1a64('中国'), 10)).toBe(5);
  });

  it("returns the paper's BigInt computation's bucket for 2,000 keys and pools up to 10,000", () => {
    const reference = (key: bigint, buckets: number): number => {
      let k = BigInt.asUintN(64, key);
      let b = -1;
      let j = 0;
      while (j < buckets) {
        b = j;
        k = BigInt.asUintN(64, k * 2862933555777941757n + 1n);
        j = Math.floor((b + 1) * (2147483648 / (Number(k >> 33n) + 1)));
      }
      return b;
    };
    for (const buckets of [1, 3, 10, 1_000, 10_000, 2 ** 31 - 1]) {
      for (const key of [...keys.slice(0, 2_000), (1n << 64n) - 1n]) {
        expect(jumpConsistentHash(key, buckets)).toBe(reference(key, buckets));
      }
    }
  });

  it('returns bucket 0 when the key is 0, whatever the bucket count', () => {
    for (const buckets of [1, 2, 3, 10, 57, 1000, 2 ** 31 - 1]) expect(jumpConsistentHash(0n, buckets)).toBe(0);
  });

  it('returns the same bucket when the key is given modulo 2^64', () => {
    expect(jumpConsistentHash(-1n, 100)).toBe(jumpConsistentHash((1n << 64n) - 1n, 100));
    expect(jumpConsistentHash((1n << 64n) + 42n, 57)).toBe(43);
  });

  it('returns a bucket in range when keys and bucket counts vary', () => {
    for (const buckets of [1, 2, 7, 64, 1001]) {
      for (const key of keys.slice(0, 500)) {
        const bucket = jumpConsistentHash(key, buckets);
        expect(Number.isInteger(bucket) && bucket >= 0 && bucket < buckets).toBe(true);
      }
    }
  });

  it('returns each of 10 buckets for about a tenth of 10,000 keys', () => {
    expectEvenSpread(keys, jumpConsistentHash, 10);
  });

  it.each([1, 2, 4, 9, 50])('moves about 1/(n+1) of keys, all to the new bucket, when buckets grow from %i', (n) => {
    expectMinimalMoves(keys, jumpConsistentHash, n);
  });

  it.each([0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 31])(
    'throws RangeError when buckets is %s',
    (buckets) => {
      expect(() => jumpConsistentHash(1n, buckets)).toThrow(RangeError);
    },
  );
});
