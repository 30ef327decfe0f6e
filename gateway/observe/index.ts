/**
 * Observability: metrics, the windowed stats behind GET /v1/stats, telemetry, tracing and the
 * dashboard.
 *
 * The room's public face: what other rooms take from it.
 */
export { registerDashboardRoutes } from './dashboard/routes.ts';
export { createGatewayMetrics, createStoreMetrics } from './metrics.ts';
export { Count } from './metrics.ts';
export { CacheTruthMetrics } from './cache-metrics.ts';
export type { CacheCheckFigures, CacheTruthStats, FeedReading, FeedUpdateResult } from './cache-metrics.ts';
export type { GaugeSources, GatewayMetrics, InferenceInstruments, StoreMetrics } from './metrics.ts';
export { StatsWindow, readStats } from './stats.ts';
export type { DetachedCounts, GatewayStats, QueueSnapshot } from './stats.ts';
export type { ServiceIdentity } from './telemetry.ts';
export {
  GATEWAY_PROVIDER,
  GEN_AI_OPERATIONS,
  failSpan,
  startCallTrace,
  traceOfCall,
  traceOfResponse,
} from './tracing.ts';
export type { CallTrace } from './tracing.ts';
