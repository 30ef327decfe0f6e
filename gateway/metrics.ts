/**
 * The gateway's instruments, through @opentelemetry/api only: a no-op until the entry point
 * wires an SDK. Names and buckets follow Fn's LB agent so dashboards carry over.
 */
import type { Counter, Histogram, MeterProvider, UpDownCounter } from '@opentelemetry/api';
import type { CallOutcome } from './call.ts';
import type { StoreHealth } from './store/types.ts';

/** Fn's lb_call_latency buckets, in ms. */
const LATENCY_BUCKETS = [1, 10, 50, 100, 250, 500, 1000, 10000, 60000, 120000];
/** Runner execution time spans from milliseconds to many minutes for long generations. */
const EXEC_BUCKETS = [10, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 120000, 300000];
/** Fn's placer attempt buckets. */
const ATTEMPT_BUCKETS = [0, 2, 3, 4, 8, 16, 32, 64, 128, 256];

/** The gateway's counters and histograms. */
export interface GatewayMetrics {
  calls: Counter;
  rejected: Counter;
  /** Request bodies being received: counted against maxUploads, not maxInFlight. */
  uploads: UpDownCounter;
  queued: UpDownCounter;
  running: UpDownCounter;
  outcomes: Record<CallOutcome, Counter>;
  latency: Histogram;
  execTime: Histogram;
  placerAttempts: Histogram;
  placerRetries: Counter;
  /** Calls in the wait queue now, by model and priority. */
  queueDepth: UpDownCounter;
  /** Time from a call's first wait in the queue to its placement or end, by priority. */
  queueTime: Histogram;
  /** Calls refused with GW_QUEUE_FULL, by the bound they met (`total` or `flow`). */
  queueRefused: Counter;
}

/** Creates the instruments on a meter of `provider`. */
export function createGatewayMetrics(provider: MeterProvider): GatewayMetrics {
  const meter = provider.getMeter('sluice-gateway');
  const counter = (name: string, description: string) => meter.createCounter(name, { description });
  return {
    calls: counter('sluice_calls', 'Calls buffered, validated and handed to placement'),
    rejected: counter('sluice_calls_rejected', 'Requests answered with an error before placement, by error code'),
    uploads: meter.createUpDownCounter('sluice_uploads', { description: 'Request bodies being received now (counted against maxUploads, not maxInFlight)' }),
    queued: meter.createUpDownCounter('sluice_calls_queued', { description: 'Calls waiting for a runner' }),
    running: meter.createUpDownCounter('sluice_calls_running', { description: 'Calls committed to a runner and not yet finished' }),
    outcomes: {
      completed: counter('sluice_calls_completed', 'Calls whose runner response was relayed in full'),
      // Fn's name, kept so dashboards carry over; the outcome itself is spelled `cancelled`.
      cancelled: counter('sluice_calls_canceled', 'Calls whose client went away'),
      timeouts: counter('sluice_calls_timeouts', 'Calls that ran past their execution timeout'),
      errors: counter('sluice_calls_errors', 'Calls that failed in the gateway or on the runner after commit'),
      server_busy: counter('sluice_calls_server_busy', 'Calls no runner took before the placer deadline'),
    },
    latency: meter.createHistogram('sluice_call_latency', {
      description: 'What the platform added to a call: end minus startedAt minus runner-reported execution time',
      unit: 'ms',
      advice: { explicitBucketBoundaries: LATENCY_BUCKETS },
    }),
    execTime: meter.createHistogram('sluice_runner_exec_time', {
      description: 'Execution time reported by runners (engine request start to last byte)',
      unit: 'ms',
      advice: { explicitBucketBoundaries: EXEC_BUCKETS },
    }),
    placerAttempts: meter.createHistogram('sluice_placer_attempts', {
      description: 'Runner offers made to place one call',
      advice: { explicitBucketBoundaries: ATTEMPT_BUCKETS },
    }),
    placerRetries: counter('sluice_placer_retries', 'Runner offers that did not place the call, by reason'),
    queueDepth: meter.createUpDownCounter('sluice_queue_depth', { description: 'Calls waiting in the wait queue for a runner, by model and priority' }),
    queueTime: meter.createHistogram('sluice_queue_time', {
      description: 'Time a call spent in the wait queue, from its first wait to its placement or end',
      unit: 'ms',
      advice: { explicitBucketBoundaries: LATENCY_BUCKETS },
    }),
    queueRefused: counter('sluice_queue_refused', 'Calls refused with GW_QUEUE_FULL, by the bound met (total or flow)'),
  };
}

/**
 * An outcome as the `outcome` label of the latency and execution-time histograms: Fn's
 * spelling, `canceled` for `cancelled`, so dashboards carry over.
 */
export function outcomeLabel(outcome: CallOutcome): string {
  return outcome === 'cancelled' ? 'canceled' : outcome;
}

/** The detached-call store's instruments. */
export interface StoreMetrics {
  /** Results the store refused because they did not fit in its byte bound. */
  resultsRefused: Counter;
}

/**
 * Creates the store's instruments on a meter of `provider`. The byte gauges are read from
 * `health` when metrics are collected (a cached answer for Redis), and say nothing while the
 * store does not answer rather than a stale figure.
 */
export function createStoreMetrics(provider: MeterProvider, health: () => Promise<StoreHealth>): StoreMetrics {
  const meter = provider.getMeter('sluice-gateway');
  const stored = meter.createObservableGauge('sluice_store_bytes', { description: 'Bytes the detached-call store keeps for finished calls and their results (shared by gateways on one Redis)' });
  const bound = meter.createObservableGauge('sluice_store_max_bytes', { description: 'The byte bound of the detached-call store (maxStoredBytes)' });
  meter.addBatchObservableCallback(async (observe) => {
    const now = await health();
    if (!now.ok) return;
    observe.observe(stored, now.storedBytes);
    observe.observe(bound, now.maxStoredBytes);
  }, [stored, bound]);
  return {
    resultsRefused: meter.createCounter('sluice_store_results_refused', { description: 'Finished detached calls whose result the store refused for lack of room (the call failed with GW_STORE_FULL)' }),
  };
}
