import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFeedFleet, sumOf } from '../../k6/driver/feed-fleet.ts';
import type { FeedFleet } from '../../k6/driver/feed-fleet.ts';
import { FeedPrompts, TENANTS, measurePhase } from '../../k6/driver/scenarios/feed.ts';
import { startService } from '../../gateway/cli/entry.ts';

describe('sumOf', () => {
  const text = [
    '# HELP sluice_cache_feed_bytes_total Bytes',
    '# TYPE sluice_cache_feed_bytes_total counter',
    'sluice_cache_feed_bytes_total{runner="a",otel_scope_name="sluice-gateway"} 120',
    'sluice_cache_feed_bytes_total{runner="b",otel_scope_name="sluice-gateway"} 7',
    'sluice_cache_feed_bytes_total_other{runner="a"} 1000',
    'sluice_runner_cache_feed_bytes_total 5',
  ].join('\n');

  it('sums the samples of one metric, those with a label when given one', () => {
    expect(sumOf(text, 'sluice_cache_feed_bytes_total')).toBe(127);
    expect(sumOf(text, 'sluice_cache_feed_bytes_total', 'runner="a"')).toBe(120);
    expect(sumOf(text, 'sluice_runner_cache_feed_bytes_total')).toBe(5);
    expect(sumOf(text, 'sluice_cache_feed_updates_total')).toBe(0);
  });
});

describe('FeedPrompts', () => {
  it("counts a tenant's context as new once, then only each call's query", () => {
    const prompts = new FeedPrompts();
    const first = prompts.next(0);
    const second = prompts.next(0);
    const other = prompts.next(1);
    expect(prompts.promptTokens()).toBeGreaterThan(900);
    expect(first.newBlocks).toBeGreaterThan(50);
    expect(second.newBlocks).toBeGreaterThan(0);
    expect(second.newBlocks).toBeLessThan(10);
    expect(other.newBlocks).toBeGreaterThan(50);
    expect(second.messages).not.toEqual(first.messages);
  });
});

describe('the feed fleet (real processes)', () => {
  let fleet: FeedFleet;

  beforeAll(async () => {
    fleet = await startFeedFleet({
      env: { ...process.env },
      startService,
      logLevel: 'warn',
      engineFlags: ['--profile', 'small', '--output-tokens', '4'],
      slots: 16,
    });
  }, 60_000);

  afterAll(async () => {
    await fleet?.stop();
  });

  it('moves both ends’ feed counters with the calls it sends, and measures them per phase', async () => {
    const prompts = new FeedPrompts();
    for (let t = 0; t < TENANTS; t++) expect(await fleet.chat(prompts.next(t).messages)).toBe(200);
    await fleet.untilKnown();
    const phase = await measurePhase(fleet, prompts, { phase: 'tiny', rate: 20, durationMs: 300 });
    expect(phase.calls).toEqual({ sent: 6, ok: 6, failed: 0 });
    expect(phase.newBlocks).toBeGreaterThan(0);
    expect(phase.gateway.bytes).toBeGreaterThan(0);
    expect(phase.gateway.updates).toBeGreaterThan(0);
    expect(phase.runner.bytes).toBeGreaterThan(0);
    expect(phase.runner.updates).toBeGreaterThan(0);
    expect(phase.gateway.bytesPerCall).toBeCloseTo(phase.gateway.bytes / 6);
    expect(phase.gateway.bytesPerNewBlock).toBeCloseTo(phase.gateway.bytes / phase.newBlocks);
    expect(phase.seconds).toBeGreaterThan(0.3);
  }, 60_000);
});
