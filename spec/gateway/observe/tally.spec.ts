/**
 * A tally renders as the SDK's own histogram would: the same values recorded through the SDK's
 * instrument and through a tally give the same Prometheus lines.
 */
import type { Attributes, MetricOptions } from '@opentelemetry/api';
import { MeterProvider } from '@opentelemetry/sdk-metrics';
import { describe, expect, it } from 'vitest';
import { createGatewayMetrics } from '../../../gateway/observe/metrics.ts';
import { SERIES_LIMIT, Tallies, Tally, bindTallies, talliesOf } from '../../../gateway/observe/tally.ts';
import { createPrometheusMetrics, createPrometheusReader } from '../../../gateway/observe/telemetry.ts';

const OPTIONS: MetricOptions = {
  description: 'a test histogram',
  unit: 's',
  advice: { explicitBucketBoundaries: [0.1, 1, 10] },
};

/** The lines of `page` that are about `name`, in a stable order. */
function linesOf(page: string, name: string): string[] {
  return page
    .split('\n')
    .filter((line) => line.includes(name))
    .sort();
}

/** The page of an SDK histogram and of a tally, each given the same records. */
async function bothPages(records: [number, Attributes][]): Promise<{ sdk: string; tally: string }> {
  const sdkReader = createPrometheusReader();
  const sdkProvider = new MeterProvider({ readers: [sdkReader.reader] });
  const sdkHistogram = sdkProvider.getMeter('sluice-gateway').createHistogram('t_seconds', OPTIONS);
  const telemetry = createPrometheusMetrics();
  const tally = talliesOf(telemetry.meterProvider)!.histogram('t_seconds', OPTIONS);
  for (const [value, attributes] of records) {
    sdkHistogram.record(value, attributes);
    tally.record(value, attributes);
  }
  const pages = { sdk: await sdkReader.render(), tally: await telemetry.render() };
  await Promise.all([sdkProvider.shutdown(), telemetry.shutdown()]);
  return pages;
}

describe('Tally', () => {
  it('renders the lines the SDK renders for the same records, bounds and edges included', async () => {
    const a = { outcome: 'completed' };
    const b = { model: 'm', outcome: 'errors' };
    const records: [number, Attributes][] = [
      [0, a],
      [0.1, a],
      [0.10001, a],
      [1, a],
      [5, b],
      [10, b],
      [11, b],
      [1e9, b],
      [-1, a],
      [Number.NaN, a],
      // The same set in another object and key order is the same series.
      [0.5, { outcome: 'errors', model: 'm' }],
    ];
    const { sdk, tally } = await bothPages(records);
    const lines = linesOf(tally, 't_seconds');
    expect(lines.length).toBeGreaterThan(10);
    expect(lines).toEqual(linesOf(sdk, 't_seconds'));
    expect(tally).toContain('t_seconds_count{outcome="completed",otel_scope_name="sluice-gateway"} 4');
    expect(tally).toContain('t_seconds_bucket{model="m",outcome="errors",otel_scope_name="sluice-gateway",le="10"} 3');
  });

  it('leaves out a tally that has recorded nothing, as the SDK leaves out an unused histogram', async () => {
    const { sdk, tally } = await bothPages([]);
    expect(linesOf(sdk, 't_seconds')).toEqual([]);
    expect(linesOf(tally, 't_seconds')).toEqual([]);
  });

  it('keeps at most SERIES_LIMIT series and sends the rest to one overflow series, as the SDK does', async () => {
    const records: [number, Attributes][] = [];
    for (let i = 0; i < SERIES_LIMIT + 5; i++) records.push([1, { runner: `r${i}` }]);
    const { sdk, tally } = await bothPages(records);
    const overflow = (page: string) => linesOf(page, 'otel_metric_overflow="true"').find((l) => l.includes('_count'));
    expect(overflow(tally)).toMatch(/ 6$/);
    expect(overflow(tally)).toBe(overflow(sdk));
  });

  it('takes a record at once for a set it has seen, and a copy of a set it has not', () => {
    const tally = new Tally('x', OPTIONS, () => 42);
    const attributes: Record<string, string> = { outcome: 'completed' };
    tally.record(1, attributes);
    attributes.outcome = 'changed after the record';
    tally.record(2, { outcome: 'completed' });
    const [series, ...rest] = [...tally.series()];
    expect(rest).toEqual([]);
    expect(series).toMatchObject({
      attributes: { outcome: 'completed' },
      startedAt: 42,
      count: 2,
      sum: 3,
      min: 1,
      max: 2,
    });
    expect(series!.counts).toEqual([0, 1, 1, 0]);
  });
});

describe('Tallies', () => {
  it('gives one tally per name, as the SDK gives one instrument per name', () => {
    const tallies = new Tallies();
    expect(tallies.histogram('a', OPTIONS)).toBe(tallies.histogram('a'));
    expect([...tallies.all()].map((t) => t.name)).toEqual(['a']);
  });

  it('makes the gateway histograms tallies on a bound provider, and SDK histograms elsewhere', () => {
    const bound = new MeterProvider();
    const tallies = new Tallies();
    bindTallies(bound, tallies);
    expect(createGatewayMetrics(bound).latency).toBe(tallies.histogram('sluice_call_overhead_seconds'));
    expect(createGatewayMetrics(new MeterProvider()).latency).not.toBeInstanceOf(Tally);
  });
});
