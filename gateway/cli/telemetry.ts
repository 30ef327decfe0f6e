/**
 * The OpenTelemetry SDK's start-up for the gateway and runner commands. Only the entry point
 * wires an SDK: library code calls the API alone, a no-op until this runs.
 */
import type { ServiceIdentity } from '../observe/telemetry.ts';

/** The running SDK: what renders its metrics as Prometheus text, and its idempotent shutdown. */
export interface CliTelemetry {
  render: () => Promise<string>;
  shutdown: () => Promise<void>;
}

/**
 * The traces exporter the SDK is to use: OTEL_TRACES_EXPORTER when set, else `otlp` when an OTLP
 * endpoint for traces is given (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT),
 * else `none`. The SDK's own default would export to localhost:4318 whether a collector runs
 * there or not: tracing is off until an operator names where traces go.
 */
export function tracesExporter(env: NodeJS.ProcessEnv): string {
  const named = env.OTEL_TRACES_EXPORTER?.trim();
  if (named) return named;
  return env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim() || env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim() ? 'otlp' : 'none';
}

/**
 * Starts the OpenTelemetry SDK: a Prometheus reader whose text the gateway serves at /metrics,
 * and traces exported as the standard OTEL_* variables say ({@link tracesExporter}; OTLP over
 * HTTP, protobuf unless OTEL_EXPORTER_OTLP_TRACES_PROTOCOL says `http/json`). The resource is
 * given, never detected ({@link serviceResource} says why): OTEL_SERVICE_NAME and
 * OTEL_RESOURCE_ATTRIBUTES are not read.
 */
export async function startTelemetry(env: NodeJS.ProcessEnv, identity: ServiceIdentity): Promise<CliTelemetry> {
  // The SDK reads its variables from the environment it is given none of: set what it must see.
  env.OTEL_TRACES_EXPORTER = tracesExporter(env);
  // Logs are not exported: sluice's logs go to stderr as JSON lines.
  env.OTEL_LOGS_EXPORTER ??= 'none';
  const [{ NodeSDK }, { createPrometheusReader, serviceResource }, { metrics }, { bindTallies }] = await Promise.all([
    import('@opentelemetry/sdk-node'),
    import('../observe/telemetry.ts'),
    import('@opentelemetry/api'),
    import('../observe/tally.ts'),
  ]);
  const { reader, render, tallies } = createPrometheusReader();
  const sdk = new NodeSDK({ resource: serviceResource(identity), autoDetectResources: false, metricReaders: [reader] });
  sdk.start();
  // The global provider is the SDK's now: the gateway's per-call histograms are tallies its reader renders.
  bindTallies(metrics.getMeterProvider(), tallies);
  let shutdown: Promise<void> | undefined;
  // Exporting spans still queued may fail (the collector gone): telemetry never fails a shutdown.
  return { render, shutdown: () => (shutdown ??= sdk.shutdown().catch(() => {})) };
}
