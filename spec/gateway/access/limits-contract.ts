/**
 * The Limiter contract: every backend (memory, Redis) runs these under a fake clock, with the
 * exact counts and waits of the two-bucket window, so the backends are held to one algorithm.
 */
import { describe, expect, it } from 'vitest';
import type { Limiter, LimiterOptions } from '../../../gateway/access/limits.ts';

/** A window start, so elapsed times in the tables are plain. */
export const T0 = 1_700_000_040_000;
export const WINDOW = 60_000;

/** A limiter on a clock the test moves; `peer` is another limiter sharing its counters, when the backend can. */
export interface LimiterFixture {
  limiter: Limiter;
  elapse(ms: number): void;
  peer?: () => Limiter;
}

export type MakeLimiter = (options: LimiterOptions) => Promise<LimiterFixture>;

/** A clock that moves only when told. */
export function fakeClock(start = T0) {
  let t = start;
  return { clock: { now: () => t }, elapse: (ms: number) => void (t += ms) };
}

/** Registers the contract for one backend; `shared` adds the tests of counters several limiters share. */
export function describeLimiter(name: string, make: MakeLimiter, shared = false): void {
  describe(`${name} (Limiter contract)`, () => {
    const fixture = () => make({ windowMs: WINDOW, retryAfterMs: 1000 });

    it('admits requestsPerMinute calls, refuses the next until the window has slid far enough, then admits again', async () => {
      const { limiter, elapse } = await fixture();
      const limits = { requestsPerMinute: 3 };
      const remaining: number[] = [];
      for (let i = 0; i < 3; i++) {
        const admission = await limiter.admitCall('k', limits, `l${i}`);
        expect(admission.kind).toBe('admitted');
        remaining.push(admission.window!.remaining);
      }
      expect(remaining).toEqual([2, 1, 0]);
      // 3 at the window's start: the 4th fits once they are a minute old, the sliding window's
      // real wait (sliding 2/3 of this window out would take 80 s).
      const refused = await limiter.admitCall('k', limits, 'l3');
      expect(refused).toEqual({
        kind: 'refused',
        limit: 'requests',
        retryAfterMs: 60_000,
        window: { limit: 3, remaining: 0, resetMs: 60_000 },
      });
      elapse(59_999);
      expect((await limiter.admitCall('k', limits, 'l4')).kind).toBe('refused');
      elapse(1);
      expect(await limiter.admitCall('k', limits, 'l5')).toEqual({
        kind: 'admitted',
        window: { limit: 3, remaining: 2, resetMs: 60_000 },
      });
    });

    it('tells a key whose calls came mid-window to retry within the minute, not 67 s, as the sliding window frees', async () => {
      const { limiter, elapse } = await fixture();
      const limits = { requestsPerMinute: 3 };
      elapse(13_000);
      for (let i = 0; i < 3; i++) expect((await limiter.admitCall('k', limits, `l${i}`)).kind).toBe('admitted');
      const refused = await limiter.admitCall('k', limits, 'l3');
      expect(refused).toMatchObject({ kind: 'refused', retryAfterMs: 60_000 });
      elapse(59_999);
      expect((await limiter.admitCall('k', limits, 'l4')).kind).toBe('refused');
      elapse(1);
      expect((await limiter.admitCall('k', limits, 'l5')).kind).toBe('admitted');
    });

    it('weights the previous window by the share of it still inside the sliding minute', async () => {
      const { limiter, elapse } = await fixture();
      const limits = { requestsPerMinute: 10 };
      // Ten calls over the window, the last near its end: the previous window's hits may still be
      // inside the sliding minute, and count by the share of it that is.
      for (let i = 0; i < 9; i++) await limiter.admitCall('k', limits, `a${i}`);
      elapse(59_000);
      await limiter.admitCall('k', limits, 'a9');
      elapse(31_000);
      // Half of the previous 10 still count: 5, and this call makes 6.
      expect(await limiter.admitCall('k', limits, 'b')).toEqual({
        kind: 'admitted',
        window: { limit: 10, remaining: 4, resetMs: 60_000 },
      });
      elapse(2 * WINDOW);
      expect((await limiter.admitCall('k', limits, 'c')).window).toEqual({ limit: 10, remaining: 9, resetMs: 60_000 });
    });

    it('holds concurrentCalls leases until released, and a second release changes nothing', async () => {
      const { limiter } = await fixture();
      const limits = { concurrentCalls: 2 };
      expect(await limiter.admitCall('k', limits, 'a')).toEqual({ kind: 'admitted' });
      expect(await limiter.admitCall('k', limits, 'b')).toEqual({ kind: 'admitted' });
      expect(await limiter.admitCall('k', limits, 'c')).toEqual({
        kind: 'refused',
        limit: 'concurrent',
        retryAfterMs: 1000,
      });
      await limiter.release('k', 'a');
      await limiter.release('k', 'a');
      expect((await limiter.admitCall('k', limits, 'd')).kind).toBe('admitted');
      expect((await limiter.admitCall('k', limits, 'e')).kind).toBe('refused');
    });

    it('counts nothing for a call refused for concurrency', async () => {
      const { limiter } = await fixture();
      const limits = { requestsPerMinute: 2, concurrentCalls: 1 };
      expect((await limiter.admitCall('k', limits, 'a')).window?.remaining).toBe(1);
      expect((await limiter.admitCall('k', limits, 'b')).kind).toBe('refused');
      await limiter.release('k', 'a');
      expect((await limiter.admitCall('k', limits, 'c')).window?.remaining).toBe(0);
    });

    it('keeps every key to its own counters', async () => {
      const { limiter } = await fixture();
      const limits = { requestsPerMinute: 1, concurrentCalls: 1 };
      expect((await limiter.admitCall('alice', limits, 'a')).kind).toBe('admitted');
      expect((await limiter.admitCall('bob', limits, 'b')).kind).toBe('admitted');
      expect((await limiter.admitCall('alice', limits, 'c')).kind).toBe('refused');
    });

    it('counts estimated tokens, and a settle moves the count by what the call used', async () => {
      const { limiter } = await fixture();
      const limits = { tokensPerMinute: 100 };
      expect(await limiter.admitTokens('k', limits, 60)).toEqual({
        kind: 'admitted',
        window: { limit: 100, remaining: 40, resetMs: 60_000 },
      });
      expect(await limiter.admitTokens('k', limits, 50)).toMatchObject({
        kind: 'refused',
        limit: 'tokens',
        window: { remaining: 40 },
      });
      await limiter.settle('k', 20, 60);
      expect((await limiter.admitTokens('k', limits, 50)).window?.remaining).toBe(30);
      await limiter.settle('k', 80, 50);
      expect(await limiter.admitTokens('k', limits, 1)).toMatchObject({ kind: 'refused', window: { remaining: 0 } });
    });

    it('counts a call estimated above tokensPerMinute as the whole limit, so it can run in an empty window', async () => {
      const { limiter } = await fixture();
      expect(await limiter.admitTokens('k', { tokensPerMinute: 100 }, 500)).toMatchObject({
        kind: 'admitted',
        window: { remaining: 0 },
      });
    });

    it('admits without counting what the key has no limit for', async () => {
      const { limiter } = await fixture();
      for (let i = 0; i < 5; i++) {
        expect(await limiter.admitCall('k', {}, `l${i}`)).toEqual({ kind: 'admitted' });
        expect(await limiter.admitTokens('k', {}, 1e6)).toEqual({ kind: 'admitted' });
        expect(await limiter.reserveStored('k', {}, { callId: `c${i}`, cap: 1e6, until: T0 + 1000 })).toEqual({
          kind: 'admitted',
          reserved: 0,
        });
      }
    });

    it('refuses detached calls while stored results reach storedBytes, until the oldest expires', async () => {
      const { limiter, elapse } = await fixture();
      const limits = { storedBytes: 1000 };
      const until = T0 + 60_000;
      const reserve = (key: string, callId: string) => limiter.reserveStored(key, limits, { callId, cap: 100, until });
      await limiter.settleStored('k', 'c1', 0, 600, T0 + 10_000);
      expect(await reserve('k', 'c2')).toEqual({ kind: 'admitted', reserved: 100 });
      await limiter.settleStored('k', 'c2', 100, 500, T0 + 20_000);
      expect(await reserve('k', 'c3')).toEqual({
        kind: 'refused',
        limit: 'stored-bytes',
        retryAfterMs: 10_000,
      });
      elapse(9_999);
      expect((await reserve('k', 'c3')).kind).toBe('refused');
      elapse(1);
      expect(await reserve('k', 'c3')).toEqual({ kind: 'admitted', reserved: 100 });
      expect((await reserve('other', 'c4')).kind).toBe('admitted');
    });

    it('reserves room for results at admission: of calls in parallel only as many as fit are admitted', async () => {
      const { limiter } = await fixture();
      const limits = { storedBytes: 1000 };
      const answers = await Promise.all(
        Array.from({ length: 10 }, (_, i) =>
          limiter.reserveStored('k', limits, { callId: `c${i}`, cap: 300, until: T0 + 60_000 }),
        ),
      );
      // 300, 300, 300, then the 100 left; the rest find the limit reserved.
      expect(answers.map((a) => (a.kind === 'admitted' ? a.reserved : a.limit))).toEqual([
        300,
        300,
        300,
        100,
        ...Array<string>(6).fill('stored-bytes'),
      ]);
    });

    it('settles a reservation to the result stored, and gives back one that stored nothing, once', async () => {
      const { limiter } = await fixture();
      const limits = { storedBytes: 1000 };
      const until = T0 + 60_000;
      const reserve = (callId: string) => limiter.reserveStored('k', limits, { callId, cap: 600, until });
      expect(await reserve('a')).toEqual({ kind: 'admitted', reserved: 600 });
      expect(await reserve('b')).toEqual({ kind: 'admitted', reserved: 400 });
      // a's result is 200: 400 of its room comes back.
      await limiter.settleStored('k', 'a', 600, 200, T0 + 3_600_000);
      expect(await reserve('c')).toEqual({ kind: 'admitted', reserved: 400 });
      await limiter.releaseStored('k', 'b', 400);
      await limiter.releaseStored('k', 'b', 400);
      expect(await reserve('d')).toEqual({ kind: 'admitted', reserved: 400 });
      expect((await reserve('e')).kind).toBe('refused');
    });

    it("lets a reservation nobody settled lapse at its call's lifetime end", async () => {
      const { limiter, elapse } = await fixture();
      const limits = { storedBytes: 1000 };
      expect((await limiter.reserveStored('k', limits, { callId: 'a', cap: 1000, until: T0 + 5_000 })).kind).toBe(
        'admitted',
      );
      expect((await limiter.reserveStored('k', limits, { callId: 'b', cap: 1000, until: T0 + 60_000 })).kind).toBe(
        'refused',
      );
      elapse(5_000);
      expect(await limiter.reserveStored('k', limits, { callId: 'b', cap: 1000, until: T0 + 60_000 })).toEqual({
        kind: 'admitted',
        reserved: 1000,
      });
    });

    if (shared)
      it('shares every counter with a peer on the same backend', async () => {
        const made = await fixture();
        const other = made.peer!();
        const limits = { requestsPerMinute: 2, concurrentCalls: 5, tokensPerMinute: 10 };
        expect((await made.limiter.admitCall('k', limits, 'a')).kind).toBe('admitted');
        expect((await other.admitCall('k', limits, 'b')).kind).toBe('admitted');
        expect((await made.limiter.admitCall('k', limits, 'c')).kind).toBe('refused');
        expect((await other.admitTokens('k', limits, 10)).kind).toBe('admitted');
        expect((await made.limiter.admitTokens('k', limits, 1)).kind).toBe('refused');
        const stored = { storedBytes: 100 };
        expect(await made.limiter.reserveStored('k', stored, { callId: 'a', cap: 70, until: T0 + 60_000 })).toEqual({
          kind: 'admitted',
          reserved: 70,
        });
        expect(await other.reserveStored('k', stored, { callId: 'b', cap: 70, until: T0 + 60_000 })).toEqual({
          kind: 'admitted',
          reserved: 30,
        });
        expect((await made.limiter.reserveStored('k', stored, { callId: 'c', cap: 70, until: T0 + 60_000 })).kind).toBe(
          'refused',
        );
        await other.releaseStored('k', 'a', 70);
        expect(await made.limiter.reserveStored('k', stored, { callId: 'c', cap: 70, until: T0 + 60_000 })).toEqual({
          kind: 'admitted',
          reserved: 70,
        });
      });
  });
}
