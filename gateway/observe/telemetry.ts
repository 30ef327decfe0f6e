/**
 * Wiring the OpenTelemetry SDK: only entry points and tests call this; library code uses the
 * API. Metrics are pulled in Prometheus text from the gateway's own /metrics route.
 */
import { randomBytes } from 'node:crypto';
import { PrometheusExporter, PrometheusSerializer } from '@opentelemetry/exporter-prometheus';
import { resourceFromAttributes } from '@opentelemetry/resources';
import type { Resource } from '@opentelemetry/resources';
import { MeterProvider } from '@opentelemetry/sdk-metrics';
import type { MeterProvider as ApiMeterProvider } from '@opentelemetry/api';
import { VERSION } from '../../runner/protocol/version.ts';

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
