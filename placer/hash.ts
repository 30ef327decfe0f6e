/**
 * Hashing for affinity placers. Both functions are fixed, published algorithms with no random
 * seed, so every gateway process, on every version, sends a given key to the same runner.
 */

const encoder = new TextEncoder();

/** FNV-1a 64's offset basis: the hash of the empty string. */
export const FNV_OFFSET_BASIS = 0xcbf29ce484222325n;

/**
 * FNV-1a 64 of the string's UTF-8 bytes (offset basis 0xcbf29ce484222325, prime 0x100000001b3),
 * the same value as Go's `hash/fnv.New64a`. Lone surrogates hash as U+FFFD, as TextEncoder
 * encodes them.
 *
 * `basis` continues from an earlier hash instead of starting afresh: FNV-1a is a running hash, so
 * `fnv1a64(b, fnv1a64(a)) === fnv1a64(a + b)` (at a code-point boundary), so a text can be
 * hashed in pieces. (prefix-affinity's block chain uses its own word-at-a-time hash: see
 * prefix-affinity/blocks.ts.)
 *
 * Computed in four 16-bit lanes held in plain numbers and carried by hand, joined into a BigInt
 * once at the end: about three times faster than a BigInt multiply per byte on 40-byte keys here,
 * and checked against that plain BigInt form in the tests.
 */
export function fnv1a64(input: string, basis: bigint = FNV_OFFSET_BASIS): bigint {
  const bytes = encoder.encode(input);
  // The offset basis, least significant lane first; split from BigInt only when chaining, so
  // the per-call key hash of consistent-hash pays nothing for the option.
  let v0 = 0x2325;
  let v1 = 0x8422;
  let v2 = 0x9ce4;
  let v3 = 0xcbf2;
  if (basis !== FNV_OFFSET_BASIS) {
    const b = BigInt.asUintN(64, basis);
    v0 = Number(b & 0xffffn);
    v1 = Number((b >> 16n) & 0xffffn);
    v2 = Number((b >> 32n) & 0xffffn);
    v3 = Number(b >> 48n);
  }
  for (let i = 0; i < bytes.length; i++) {
    v0 ^= bytes[i]!;
    // h * 0x100000001b3 = h * 0x1b3 + (h << 40); the shift by 40 lands lane 0 in lane 2 and lane 1
    // in lane 3, 8 bits up. Every intermediate stays below 2^31, so `>>>` and `&` are exact.
    const t0 = v0 * 0x1b3;
    let t1 = v1 * 0x1b3;
    let t2 = v2 * 0x1b3 + (v0 << 8);
    const t3 = v3 * 0x1b3 + (v1 << 8);
    t1 += t0 >>> 16;
    t2 += t1 >>> 16;
    v0 = t0 & 0xffff;
    v1 = t1 & 0xffff;
    v2 = t2 & 0xffff;
    v3 = (t3 + (t2 >>> 16)) & 0xffff;
  }
  return (BigInt(v3) << 48n) | (BigInt(v2) << 32n) | (BigInt(v1) << 16n) | BigInt(v0);
}

/** Jump hash's LCG multiplier, 2862933555777941757, in 16-bit lanes, least significant first. */
const JUMP_M0 = 45309;
const JUMP_M1 = 34736;
const JUMP_M2 = 12006;
const JUMP_M3 = 10171;
const LANE = 65_536;
/** Bucket counts are int32 in the paper; beyond that the float step loses its meaning. */
const MAX_BUCKETS = 2_147_483_647;

/**
 * Lamping and Veach's jump consistent hash ("A Fast, Minimal Memory, Consistent Hash Algorithm",
 * 2014): maps a 64-bit key to a bucket in `[0, buckets)` such that going from n to n+1 buckets
 * moves only about 1/(n+1) of keys, all of them into the new bucket. Keys are taken modulo 2^64,
 * and the LCG step wraps at 64 bits as the C++ original does.
 *
 * It only stays minimal when buckets are added or removed at the end; removing a bucket in the
 * middle renumbers every bucket after it.
 *
 * The 64-bit step is computed in four 16-bit lanes of plain numbers (every partial sum stays below
 * 2^53, so exact), not in BigInt: it runs about ln(buckets) times per key, so a BigInt step made a
 * decision on 10,000 runners three times dearer than on 10. Checked against the BigInt form in
 * the tests.
 *
 * @throws RangeError when `buckets` is not an integer in [1, 2^31 - 1].
 */
export function jumpConsistentHash(key: bigint, buckets: number): number {
  if (!Number.isInteger(buckets) || buckets < 1 || buckets > MAX_BUCKETS) {
    throw new RangeError(`buckets must be an integer from 1 to ${MAX_BUCKETS}, got ${buckets}`);
  }
  const k = BigInt.asUintN(64, key);
  let k0 = Number(k & 0xffffn);
  let k1 = Number((k >> 16n) & 0xffffn);
  let k2 = Number((k >> 32n) & 0xffffn);
  let k3 = Number(k >> 48n);
  let b = -1;
  let j = 0;
  while (j < buckets) {
    b = j;
    // k = k x M + 1 (mod 2^64), lane by lane with carries.
    let t = k0 * JUMP_M0 + 1;
    const r0 = t % LANE;
    t = (t - r0) / LANE + k0 * JUMP_M1 + k1 * JUMP_M0;
    const r1 = t % LANE;
    t = (t - r1) / LANE + k0 * JUMP_M2 + k1 * JUMP_M1 + k2 * JUMP_M0;
    const r2 = t % LANE;
    t = (t - r2) / LANE + k0 * JUMP_M3 + k1 * JUMP_M2 + k2 * JUMP_M1 + k3 * JUMP_M0;
    k0 = r0;
    k1 = r1;
    k2 = r2;
    k3 = t % LANE;
    // (k >> 33) + 1: lane 3 and the top 15 bits of lane 2.
    j = Math.floor((b + 1) * (2147483648 / (k3 * 32_768 + Math.floor(k2 / 2) + 1)));
  }
  return b;
}
