/**
 * The serverless scenario's arithmetic: the trace's phases, GPU-seconds integrated from the
 * replica samples against an always-on fleet, the cold-start figures and the goals.
 */
import { describe, expect, it } from 'vitest';
import {
  GPU_SHARE_GOAL,
  formatServerless,
  serverlessChart,
  summarizeServerless,
} from '../../k6/driver/serverless/report.ts';
import { burstTrace } from '../../k6/driver/serverless/trace.ts';
import type { ReplicaSample, TracedCall } from '../../k6/driver/serverless/trace.ts';

const sample = (ms: number, held: number, wanted = held): ReplicaSample => ({
  ms,
  wanted,
  starting: 0,
  ready: held,
  draining: 0,
});

describe('burstTrace', () => {
  it('is a quarter quiet, a quarter of burst and the rest quiet, summing to the duration', () => {
    const phases = burstTrace(120_001, 16);
    expect(phases.map((p) => [p.name, p.rate])).toEqual([
      ['quiet', 0],
      ['burst', 16],
      ['quiet', 0],
    ]);
    expect(phases.reduce((t, p) => t + p.ms, 0)).toBe(120_001);
    expect(phases[1]!.ms).toBe(30_000);
  });
});

describe('summarizeServerless', () => {
  it('integrates the replicas holding an engine between readings, clipped to the trace, against max x the trace', () => {
    // 0 replicas for 10 s, 2 for 10 s (one of them starting), 1 for 10 s, 0 after; trace 40 s, max 4.
    const samples = [
      sample(-500, 0),
      sample(10_000, 0),
      { ms: 10_000, wanted: 2, starting: 1, ready: 1, draining: 0 },
      sample(20_000, 1),
      sample(30_000, 0),
      sample(50_000, 3),
    ];
    const f = summarizeServerless([], samples, 40_000, 4, 1);
    expect(f.gpuSeconds).toBeCloseTo(30, 6);
    expect(f.alwaysOnGpuSeconds).toBe(160);
    expect(f.share).toBeCloseTo(30 / 160, 6);
    expect(f.goals.gpuShare).toBe(true);
    // The reading after the trace's end counts for nothing.
    expect(f.peakReplicas).toBe(2);
    // No call at all is not a run without failures.
    expect(f.goals.noFailedCall).toBe(false);
  });

  it('counts failures by reason, the calls that waited, and what the wait added to the first token', () => {
    const calls: TracedCall[] = [
      { sentMs: 0, status: 200, ttftMs: 2_100, totalMs: 3_000, coldStartMs: 2_000 },
      { sentMs: 10, status: 200, ttftMs: 1_900, totalMs: 2_800, coldStartMs: 1_800 },
      { sentMs: 5_000, status: 200, ttftMs: 60, totalMs: 1_000 },
      { sentMs: 5_100, status: 200, ttftMs: 80, totalMs: 1_000 },
      { sentMs: 5_200, status: 503, totalMs: 10, error: 'PLACER_TIMEOUT' },
    ];
    const f = summarizeServerless(calls, [sample(0, 1)], 10_000, 1, 1);
    expect([f.calls, f.failed, f.waited]).toEqual([5, 1, 2]);
    expect(f.failures).toEqual({ PLACER_TIMEOUT: 1 });
    expect(f.coldStartWait?.max).toBe(2_000);
    expect(f.addedTtftP50).toBeGreaterThan(1_700);
    expect(f.goals).toEqual({ gpuShare: false, noFailedCall: false });
    const text = formatServerless(f);
    expect(text).toContain('PLACER_TIMEOUT: 1');
    expect(text).toContain(`< ${GPU_SHARE_GOAL * 100} % MISSED`);
  });

  it('draws a chart with the burst shaded and both panels', () => {
    const svg = serverlessChart(
      [sample(0, 0), sample(5_000, 2)],
      [{ sentMs: 4_000, status: 200, ttftMs: 10, totalMs: 500 }],
      burstTrace(40_000, 4),
      'title <x>',
      'sub',
    );
    expect(svg.startsWith('<svg')).toBe(true);
    expect(svg).toContain('title &lt;x&gt;');
    expect(svg).toContain('replicas');
    expect(svg).toContain('calls in flight');
    expect(svg.match(/opacity="0.08"/g)).toHaveLength(1);
  });
});
