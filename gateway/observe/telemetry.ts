/**
 * Wiring the OpenTelemetry SDK: only entry points and tests call this; library code uses the
 * API. Metrics are pulled in Prometheus text from the gateway's own /metrics route.
 */
import { randomBytes } from 'node:crypto';
import { PrometheusExporter, PrometheusSerializer } from '@opentelemetry/exporter-prometheus';
import { resourceFromAttributes } from '@opentelemetry/resources';
import type { Resource } from '@opentelemetry/resources';
import { AggregationTemporality, DataPointType, MeterProvider } from '@opentelemetry/sdk-metrics';
import type { CollectionResult, HistogramMetricData, MetricProducer } from '@opentelemetry/sdk-metrics';
import { ValueType } from '@opentelemetry/api';
import type { MeterProvider as ApiMeterProvider } from '@opentelemetry/api';
import { VERSION } from '../../runner/protocol/version.ts';
import { Tallies, bindTallies } from './tally.ts';
import type { Tally } from './tally.ts';

/** Who a sluice process is in its telemetry. */
export interface ServiceIdentity {
  /** `sluice-gateway` or `sluice-runner`. */
  name: string;
  /** This instance: a gateway's id. @default a random `<name>-` and 6 hex digits */
  instanceId?: string;
}

/**
 * The resource of a sluice process, exactly service.name, service.version and
 * service.instance.id, for an SDK told not to detect any. The SDK's process and host detectors
 * would publish the whole command line (secrets given as flags included), the user and the host
 * name on the unauthenticated /metrics page, and OTEL_RESOURCE_ATTRIBUTES could add anything.
 */
export function serviceResource(identity: ServiceIdentity): Resource {
  return resourceFromAttributes({
    'service.name': identity.name,
    'service.version': VERSION,
    'service.instance.id': identity.instanceId ?? `${identity.name}-${randomBytes(3).toString('hex')}`,
  });
}

/** A meter provider and the function that renders its metrics as Prometheus text. */
export interface PrometheusMetrics {
  meterProvider: ApiMeterProvider;
  /** Collects and serializes the current values. */
  render(): Promise<string>;
  shutdown(): Promise<void>;
}

/**
 * A Prometheus reader that never opens its own port; the gateway serves what it collects. Its
 * `tallies` are collected with the SDK's instruments: bind them to the reader's meter provider
 * ({@link bindTallies}) so the gateway's per-call histograms are made there.
 */
export function createPrometheusReader(): { reader: PrometheusExporter; render(): Promise<string>; tallies: Tallies } {
  const tallies = new Tallies();
  const reader = new PrometheusExporter({ preventServerStart: true, metricProducers: [tallyProducer(tallies)] });
  const serializer = new PrometheusSerializer();
  return {
    reader,
    tallies,
    async render() {
      const { resourceMetrics } = await reader.collect();
      return serializer.serialize(resourceMetrics);
    },
  };
}

/**
 * Hands `tallies` to a reader as the SDK's own histograms would be: cumulative, in the scope of
 * the gateway's meter, a tally with no series left out. The resource is the SDK's (the reader
 * keeps its own producer's).
 */
export function tallyProducer(tallies: Tallies): MetricProducer {
  return {
    async collect(): Promise<CollectionResult> {
      const endTime = hrTimeOf(Date.now());
      const metrics: HistogramMetricData[] = [];
      for (const tally of tallies.all()) {
        const data = histogramData(tally, endTime);
        if (data.dataPoints.length > 0) metrics.push(data);
      }
      return {
        resourceMetrics: {
          resource: resourceFromAttributes({}),
          scopeMetrics: [{ scope: { name: 'sluice-gateway' }, metrics }],
        },
        errors: [],
      };
    },
  };
}

/** A tally's series now, copied: records after this do not change what is being rendered. */
function histogramData(tally: Tally, endTime: [number, number]): HistogramMetricData {
  const boundaries = [...tally.boundaries];
  return {
    descriptor: { name: tally.name, description: tally.description, unit: tally.unit, valueType: ValueType.DOUBLE },
    aggregationTemporality: AggregationTemporality.CUMULATIVE,
    dataPointType: DataPointType.HISTOGRAM,
    dataPoints: [...tally.series()].map((series) => ({
      attributes: series.attributes,
      startTime: hrTimeOf(series.startedAt),
      endTime,
      value: {
        buckets: { boundaries, counts: [...series.counts] },
        sum: series.sum,
        count: series.count,
        min: series.count > 0 ? series.min : undefined,
        max: series.count > 0 ? series.max : undefined,
      },
    })),
  };
}

/** Milliseconds since the epoch as OpenTelemetry's [seconds, nanoseconds]. */
function hrTimeOf(ms: number): [number, number] {
  const seconds = Math.floor(ms / 1000);
  return [seconds, Math.round((ms - seconds * 1000) * 1e6)];
}

/**
 * A standalone meter provider with its own Prometheus reader, not registered globally, so
 * several gateways in one process (tests, `sluice up`) keep separate metrics.
 */
export function createPrometheusMetrics(): PrometheusMetrics {
  const { reader, render, tallies } = createPrometheusReader();
  const provider = new MeterProvider({ readers: [reader] });
  bindTallies(provider, tallies);
  let shutdown: Promise<void> | undefined;
  return {
    meterProvider: provider,
    render,
    shutdown: () => (shutdown ??= provider.shutdown()),
  };
}
