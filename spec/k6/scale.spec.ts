import { describe, expect, it } from 'vitest';
import { BenchOptionError } from '../../k6/driver/index.ts';
import { costChart } from '../../k6/driver/cost-chart.ts';
import { growth, measureCost } from '../../k6/driver/micro.ts';
import {
  PROMPT_SIZES,
  benchCalls,
  fakeFleet,
  formatUs,
  medianSample,
  promptCalls,
} from '../../k6/driver/scenarios/scale.ts';

/** A clock that moves `step` ms on every read, so timings are exact without real time. */
function steppingClock(step: number): () => number {
  let t = 0;
  return () => (t += step);
}

describe('measureCost', () => {
  it('stops at maxCalls when the time budget is not reached', async () => {
    let made = 0;
    const sample = await measureCost(() => made++, {
      warmup: 5,
      maxCalls: 100,
      maxMs: 1_000_000,
      batch: 10,
      now: steppingClock(1),
    });
    expect(sample.calls).toBe(100);
    expect(made).toBe(105);
    // 11 clock reads (start + one per batch) 1 ms apart: 10 ms over 100 calls.
    expect(sample.elapsedMs).toBe(10);
    expect(sample.usPerCall).toBe(100);
  });

  it('stops after the batch that crosses maxMs when time runs out first', async () => {
    const sample = await measureCost(() => undefined, {
      warmup: 0,
      maxCalls: 1_000,
      maxMs: 25,
      batch: 10,
      now: steppingClock(10),
    });
    expect(sample.calls).toBe(30);
    expect(sample.elapsedMs).toBe(30);
  });

  it('awaits a call that returns a promise before the next one starts', async () => {
    let running = 0;
    let most = 0;
    await measureCost(
      async () => {
        most = Math.max(most, ++running);
        await Promise.resolve();
        running--;
      },
      { warmup: 2, maxCalls: 20, batch: 5, now: steppingClock(1) },
    );
    expect(most).toBe(1);
  });

  it('throws BenchOptionError naming the bound when a bound is not a positive integer', async () => {
    await expect(measureCost(() => 0, { maxCalls: 0 })).rejects.toThrow(BenchOptionError);
    await expect(measureCost(() => 0, { batch: 1.5 })).rejects.toThrow(/batch/);
  });
});

describe('growth', () => {
  it('returns last over first', () => {
    expect(growth([2, 4, 8, 20])).toBe(10);
  });

  it('returns NaN when a cost is unknown or the first is zero', () => {
    expect(growth([])).toBeNaN();
    expect(growth([0, 5])).toBeNaN();
    expect(growth([1, Number.NaN])).toBeNaN();
  });
});

describe('medianSample', () => {
  it('returns the middle sample by cost', () => {
    const s = (us: number) => ({ calls: 1, elapsedMs: us / 1000, usPerCall: us });
    expect(medianSample([s(9), s(1), s(5)]).usPerCall).toBe(5);
    expect(medianSample([s(4), s(1)]).usPerCall).toBe(1);
  });

  it('throws when there are no samples', () => {
    expect(() => medianSample([])).toThrow(RangeError);
  });
});

describe('fakeFleet', () => {
  it("returns the same loads for the same size, within prefix-affinity's balance guard", () => {
    const a = fakeFleet(100);
    const b = fakeFleet(100);
    expect(a.map((r) => r.load!())).toEqual(b.map((r) => r.load!()));
    const utilisation = a.map((r) => r.load!()!.inFlight / r.load!()!.slots!);
    expect(Math.max(...utilisation) - Math.min(...utilisation)).toBeLessThanOrEqual(0.25);
    expect(new Set(a.map((r) => r.id)).size).toBe(100);
  });
});

describe('benchCalls', () => {
  it('returns calls with distinct keys and prompts of about 2,000 characters sharing system prompts', () => {
    const calls = benchCalls(16);
    expect(new Set(calls.map((c) => c.key)).size).toBe(16);
    for (const c of calls) expect(c.prompt!.length).toBeGreaterThan(1_900);
    expect(calls[0]!.prompt!.slice(0, 1_600)).toBe(calls[8]!.prompt!.slice(0, 1_600));
  });
});

describe('promptCalls', () => {
  it.each(PROMPT_SIZES.map((chars) => [chars]))(
    'returns prompts of exactly %i characters, 80 %% of them a system prompt shared by every eighth call',
    (chars) => {
      const calls = promptCalls(16, chars);
      for (const c of calls) {
        expect(c.prompt).toHaveLength(chars);
        expect(c.prompt!.startsWith(c.system)).toBe(true);
        expect(c.system).toHaveLength(Math.round(chars * 0.8));
      }
      expect(calls[0]!.system).toBe(calls[8]!.system);
      expect(calls[0]!.system).not.toBe(calls[1]!.system);
      expect(new Set(calls.map((c) => c.prompt)).size).toBe(16);
    },
  );
});

describe('formatUs', () => {
  it.each([
    [0.123, '0.12'],
    [12.34, '12.3'],
    [1234.5, '1235'],
    [Number.NaN, '-'],
  ])('returns %s as %s', (us, text) => {
    expect(formatUs(us)).toBe(text);
  });
});

describe('costChart', () => {
  it('returns an SVG with one line per placer and panel', () => {
    const svg = costChart(
      [10, 100],
      [
        {
          title: 'order',
          series: [
            { name: 'a', costs: [1, 10] },
            { name: 'b', costs: [2, Number.NaN] },
          ],
        },
      ],
      't',
      's',
    );
    expect(svg.startsWith('<svg')).toBe(true);
    expect(svg.match(/<polyline/g)).toHaveLength(2);
  });
});
