import { describe, expect, it } from 'vitest';
import {
  createFixedTiming,
  createSimTiming,
  jitter,
  loadScale,
  playTokens,
} from '../../../../runner/engines/sim/index.ts';
import { scriptedRandom, seededRandom } from './helpers.ts';

const timeouts = (): number => process.getActiveResourcesInfo().filter((kind) => kind === 'Timeout').length;

describe('playTokens', () => {
  it('emits every token of a fixed schedule in order, the first after ttftMs', async () => {
    const schedule = createFixedTiming({ ttftMs: 15, itlMs: 3 }).plan({ promptTokens: 1, outputTokens: 4, running: 1 });
    const started = performance.now();
    const seen: Array<[number, number]> = [];
    const outcome = await playTokens(
      schedule,
      (index) => seen.push([index, performance.now() - started]),
      new AbortController().signal,
    );
    expect(outcome).toBe('done');
    expect(seen.map(([index]) => index)).toEqual([0, 1, 2, 3]);
    expect(seen[0]![1]).toBeGreaterThanOrEqual(14);
    expect(seen[3]![1]).toBeGreaterThanOrEqual(14 + 3 * 3);
  });

  it('stops at once on abort and leaves no timer behind', async () => {
    const schedule = createFixedTiming({ ttftMs: 60_000, itlMs: 1 }).plan({
      promptTokens: 1,
      outputTokens: 4,
      running: 1,
    });
    const before = timeouts();
    const controller = new AbortController();
    const onToken = (): void => {
      throw new Error('no token may be emitted');
    };
    const playing = playTokens(schedule, onToken, controller.signal);
    expect(timeouts()).toBe(before + 1);
    controller.abort();
    expect(await playing).toBe('aborted');
    expect(timeouts()).toBe(before);
  });
});

const h100 = {
  prefillOverheadMs: 30,
  prefillPerTokenMs: 0.25,
  prefillJitterStdMs: 0,
  itlMs: 12,
  itlJitterStdMs: 0,
  loadFactor: 2,
  maxNumSeqs: 16,
  random: () => 0.5,
};

const delays = (schedule: { tokens: number; delayBefore(index: number): number }): number[] =>
  Array.from({ length: schedule.tokens }, (_, index) => schedule.delayBefore(index));

describe('createSimTiming', () => {
  it('returns overhead + uncached tokens x per-token cost before the first token, then itlMs', () => {
    const timing = createSimTiming(h100);
    expect(delays(timing.plan({ promptTokens: 400, outputTokens: 3, running: 1 }))).toEqual([130, 12, 12]);
    expect(delays(timing.plan({ promptTokens: 400, cachedTokens: 384, outputTokens: 2, running: 1 }))).toEqual([
      34, 12,
    ]);
  });

  it('scales prefill and decode by 1 + (f - 1) x (running - 1) / (maxNumSeqs - 1)', () => {
    const timing = createSimTiming(h100);
    expect(delays(timing.plan({ promptTokens: 400, outputTokens: 2, running: 16 }))).toEqual([260, 24]);
    const [prefill, gap] = delays(timing.plan({ promptTokens: 400, outputTokens: 2, running: 6 }));
    expect(prefill).toBeCloseTo(130 * (1 + 5 / 15), 9);
    expect(gap).toBeCloseTo(12 * (1 + 5 / 15), 9);
    // More sequences than slots cannot happen, and would not slow it further.
    expect(delays(timing.plan({ promptTokens: 0, outputTokens: 2, running: 40 }))).toEqual([60, 24]);
  });

  it('reads the running count before every token, so a sequence slows down as others join', () => {
    const load = [1, 1, 16, 16, 1];
    let step = 0;
    const schedule = createSimTiming(h100).plan({ promptTokens: 0, outputTokens: 5, running: () => load[step++]! });
    expect(delays(schedule)).toEqual([30, 12, 24, 24, 12]);
  });

  it('applies no slow-down with loadFactor 1 or a single slot', () => {
    expect(loadScale(1, 16, 16)).toBe(1);
    expect(loadScale(3, 1, 1)).toBe(1);
    expect(loadScale(3, 2, 2)).toBe(3);
  });
});

describe('jitter', () => {
  it('returns the mean when there is no deviation', () => {
    expect(jitter(12, 0, () => 0)).toBe(12);
    expect(jitter(0, 5, () => 0)).toBe(0);
  });

  it('caps the deviation at 30% of the mean and clamps at 3 deviations, whatever random returns', () => {
    // Asked for 100 ms around 10 ms: the deviation is capped to 3 ms, so nothing falls outside 10 +/- 9.
    expect(jitter(10, 100, scriptedRandom([0, 0]))).toBe(19);
    expect(jitter(10, 100, scriptedRandom([0, 0.5]))).toBeCloseTo(1, 9);
    expect(jitter(10, 100, scriptedRandom([1 - Number.EPSILON, 0]))).toBeCloseTo(10, 6);
    const timing = createSimTiming({ ...h100, itlMs: 10, itlJitterStdMs: 100, loadFactor: 1, random: () => 0 });
    expect(delays(timing.plan({ promptTokens: 0, outputTokens: 3, running: 1 })).slice(1)).toEqual([19, 19]);
  });

  it('has the requested deviation below the cap and the capped one above it', () => {
    const stats = (std: number): { mean: number; sd: number } => {
      const random = seededRandom(42);
      const samples = Array.from({ length: 20_000 }, () => jitter(12, std, random));
      const mean = samples.reduce((sum, value) => sum + value, 0) / samples.length;
      const sd = Math.sqrt(samples.reduce((sum, value) => sum + (value - mean) ** 2, 0) / samples.length);
      return { mean, sd };
    };
    const fine = stats(2);
    expect(fine.mean).toBeCloseTo(12, 1);
    expect(Math.abs(fine.sd - 2)).toBeLessThan(0.1);
    const capped = stats(10);
    expect(Math.abs(capped.sd - 0.3 * 12)).toBeLessThan(0.15);
  });
});
