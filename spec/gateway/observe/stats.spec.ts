/**
 * gateway/observe/stats.ts: the windowed recorder on a fake clock (its buckets, rate, percentiles and
 * bounds) and the snapshot read from the gateway's counters.
 */
import { describe, expect, it } from 'vitest';
import { createGatewayMetrics } from '../../../gateway/observe/metrics.ts';
import { StatsWindow, percentiles, readStats } from '../../../gateway/observe/stats.ts';
import type { StatsWindowOptions } from '../../../gateway/observe/stats.ts';
import { createPrometheusMetrics } from '../../../gateway/observe/telemetry.ts';
import { seededRandom } from '../../../placer/kernel/index.ts';

/** A clock the test moves, starting on a 10 s boundary. */
function clock(start = 1_700_000_000_000) {
  let now = start;
  return { now: () => now, advance: (ms: number) => void (now += ms), sleep: async () => {} };
}

/**
 * A window on a fake clock fed `steps` in order: a number moves the clock that many ms, a
 * `[model, ttftMs]` pair records a call.
 */
function fed(steps: ReadonlyArray<number | [string, number | undefined]>, options: Partial<StatsWindowOptions> = {}) {
  const c = clock();
  const w = new StatsWindow({ clock: c, ...options });
  for (const step of steps) {
    if (typeof step === 'number') c.advance(step);
    else w.record(...step);
  }
  return { c, w };
}

describe('percentiles', () => {
  it('returns the nearest-rank 50th and 90th percentiles, or null for no values', () => {
    expect(percentiles([])).toBeNull();
    expect(percentiles([7])).toEqual({ p50: 7, p90: 7 });
    expect(percentiles([10, 1, 9, 2, 8, 3, 7, 4, 6, 5])).toEqual({ p50: 5, p90: 9 });
  });
});

describe('StatsWindow', () => {
  it('puts calls in 10 s buckets and answers 30 of them, oldest first, empty ones with null percentiles', () => {
    const { c, w } = fed([['m', 100], ['m', 300], 10_000, ['m', 50], ['m', undefined]]);
    const { series, ttftMs } = w.models().m!;
    expect(series).toHaveLength(30);
    expect(series.at(-1)).toEqual({ t: c.now(), p50: 50, p90: 50, calls: 2 });
    expect(series.at(-2)).toEqual({ t: c.now() - 10_000, p50: 100, p90: 300, calls: 2 });
    expect(series.at(-3)).toEqual({ t: c.now() - 20_000, p50: null, p90: null, calls: 0 });
    expect(series[0]!.t).toBe(c.now() - 290_000);
    // Over the whole window: 50, 100, 300.
    expect(ttftMs).toEqual({ p50: 100, p90: 300 });
    expect(w.windowSeconds).toBe(300);
  });

  it('drops a bucket that slid out of the window, and a model idle for the whole window', () => {
    const { c, w } = fed([['old', 900], ['m', 900], 290_000, ['m', 10]]);
    // The first bucket is still the window's oldest.
    expect(w.models().m!.ttftMs).toEqual({ p50: 10, p90: 900 });
    c.advance(10_000);
    // Now it is gone: the same ring slot, a new bucket.
    expect(w.models().m!.ttftMs).toEqual({ p50: 10, p90: 10 });
    expect(Object.keys(w.models())).toEqual(['m']);
    w.record('m', 20);
    expect(w.models().m!.series.at(-1)).toMatchObject({ calls: 1, p50: 20 });
  });

  it('reuses a ring slot a lap later without mixing the old bucket in', () => {
    const { c, w } = fed([['m', 1], 300_000, ['m', 2]]);
    expect(w.models().m!.series.filter((p) => p.calls > 0)).toEqual([{ t: c.now(), p50: 2, p90: 2, calls: 1 }]);
  });

  it('keeps at most sampleSize values per bucket while counting every call', () => {
    const c = clock();
    const w = new StatsWindow({ clock: c, sampleSize: 16, random: seededRandom(1) });
    for (let i = 1; i <= 10_000; i++) w.record('m', i);
    const point = w.models().m!.series.at(-1)!;
    expect(point.calls).toBe(10_000);
    // A uniform sample of 1..10000: its median is nowhere near the first 16 values.
    expect(point.p50).toBeGreaterThan(1000);
    expect(point.p90).toBeGreaterThan(point.p50!);
  });

  it('tracks at most maxModels models, dropping the one idle longest', () => {
    const { w } = fed([['a', 1], 1, ['b', 1], 1, ['a', 1], 1, ['c', 1]], { maxModels: 2 });
    expect(Object.keys(w.models()).sort()).toEqual(['a', 'c']);
  });

  it('returns calls per second over the current second and the nine before it', () => {
    const c = clock();
    const w = new StatsWindow({ clock: c });
    for (let i = 0; i < 20; i++) w.called();
    c.advance(9_000);
    for (let i = 0; i < 10; i++) w.called();
    expect(w.perSecond()).toBe(3);
    c.advance(1_000);
    // The first second's 20 calls fell out.
    expect(w.perSecond()).toBe(1);
    c.advance(60_000);
    expect(w.perSecond()).toBe(0);
  });

  it.each([
    [{ bucketMs: 0 }, /bucketMs must be a positive integer, got 0/],
    [{ buckets: 1.5 }, /buckets must be a positive integer, got 1.5/],
    [{ sampleSize: 1_000_000 }, /sampleSize must be at most 100000, got 1000000/],
    [{ maxModels: -1 }, /maxModels must be a positive integer, got -1/],
    [{ random: 'no' }, /random must be a function/],
  ])('refuses %o naming the option and the value', (bad, message) => {
    expect(() => new StatsWindow({ clock: clock(), ...(bad as object) })).toThrow(message);
  });
});

describe('readStats', () => {
  it('returns the counts since start, errors by code from refusals and failures, the window and the queue', () => {
    const telemetry = createPrometheusMetrics();
    const m = createGatewayMetrics(telemetry.meterProvider);
    const c = clock();
    const window = new StatsWindow({ clock: c });
    m.calls.add(3, 'chat');
    m.calls.add(1, 'embeddings');
    m.outcomes.completed.add(3);
    m.outcomes.server_busy.add(1);
    m.rejected.add(2, 'GW_UNKNOWN_MODEL');
    m.failed.add(1, 'PLACER_TIMEOUT');
    m.failed.add(1, 'GW_UNKNOWN_MODEL');
    window.called();
    window.record('sim-small', 42);
    const queue = { waiting: 0, models: [] };
    const detached = { queued: 1, running: 2, accepted: 5, succeeded: 1, failed: 1, cancelled: 0, expired: 0 };
    const stats = readStats({ metrics: m, window, queue, detached, clock: c });
    expect(stats).toEqual({
      at: c.now(),
      windowSeconds: 300,
      calls: {
        total: 4,
        perSecond: 0.1,
        byOutcome: { completed: 3, cancelled: 0, timeouts: 0, errors: 0, server_busy: 1 },
      },
      errors: { byCode: { GW_UNKNOWN_MODEL: 3, PLACER_TIMEOUT: 1 } },
      models: { 'sim-small': { ttftMs: { p50: 42, p90: 42 }, series: expect.any(Array) } },
      queue,
      detached,
    });
    void telemetry.shutdown();
  });
});
