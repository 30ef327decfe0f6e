/**
 * Wiring the OpenTelemetry SDK: only entry points and tests call this; library code uses the
 * API. Metrics are pulled in Prometheus text from the gateway's own /metrics route.
 */
import { PrometheusExporter, PrometheusSerializer } from '@opentelemetry/exporter-prometheus';
import { MeterProvider } from '@opentelemetry/sdk-metrics';
import type { MeterProvider as ApiMeterProvider } from '@opentelemetry/api';

/** A meter provider and the function that renders its metrics as Prometheus text. */
export interface PrometheusMetrics {
  meterProvider: ApiMeterProvider;
  /** Collects and serializes the current values. */
  render(): Promise<string>;
  shutdown(): Promise<void>;
}

/** A Prometheus reader that never opens its own port; the gateway serves what it collects. */
export function createPrometheusReader(): { reader: PrometheusExporter; render(): Promise<string> } {
  const reader = new PrometheusExporter({ preventServerStart: true });
  const serializer = new PrometheusSerializer();
  return {
    reader,
    async render() {
      const { resourceMetrics } = await reader.collect();
      return serializer.serialize(resourceMetrics);
    },
  };
}

/**
 * A standalone meter provider with its own Prometheus reader, not registered globally, so
 * several gateways in one process (tests, `sluice up`) keep separate metrics.
 */
export function createPrometheusMetrics(): PrometheusMetrics {
  const { reader, render } = createPrometheusReader();
  const provider = new MeterProvider({ readers: [reader] });
  let shutdown: Promise<void> | undefined;
  return {
    meterProvider: provider,
    render,
    shutdown: () => (shutdown ??= provider.shutdown()),
  };
}
