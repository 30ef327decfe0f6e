/**
 * The OpenTelemetry SDK's start-up for the commands that serve /metrics. Only the entry point
 * wires an SDK: library code calls the API alone, a no-op until this runs.
 */
import type { ServiceIdentity } from '../telemetry.ts';

/** The running SDK: what renders /metrics, and its idempotent shutdown. */
export interface CliTelemetry {
  render: () => Promise<string>;
  shutdown: () => Promise<void>;
}

/**
 * Starts the OpenTelemetry SDK with a Prometheus reader the gateway serves at /metrics. The
 * resource is given, never detected ({@link serviceResource} says why).
 */
export async function startTelemetry(env: NodeJS.ProcessEnv, identity: ServiceIdentity): Promise<CliTelemetry> {
  // The SDK would otherwise export traces and logs over OTLP to a collector that may not exist;
  // operators who run one set these variables themselves.
  env.OTEL_TRACES_EXPORTER ??= 'none';
  env.OTEL_LOGS_EXPORTER ??= 'none';
  const [{ NodeSDK }, { createPrometheusReader, serviceResource }] = await Promise.all([
    import('@opentelemetry/sdk-node'),
    import('../telemetry.ts'),
  ]);
  const { reader, render } = createPrometheusReader();
  const sdk = new NodeSDK({ resource: serviceResource(identity), autoDetectResources: false, metricReaders: [reader] });
  sdk.start();
  return { render, shutdown: () => sdk.shutdown() };
}
