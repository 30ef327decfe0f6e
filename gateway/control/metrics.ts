/**
 * The instruments of deployments: replicas by state and operations read from the reconciler's
 * status when metrics are collected, and its events (scale, ready, failed, dead-letter, replaced) counted
 * as they happen. Calls that waited for a cold start are the call path's (gateway/observe/metrics.ts).
 */
import type { Attributes, MeterProvider } from '@opentelemetry/api';
import type { ReconcilerDeploymentStatus, ReconcilerEvent } from './reconciler-options.ts';

/** Replica start time spans a simulator's second to a large model's many minutes, in seconds. */
const START_BUCKETS = [0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1200];

/** What the instruments read: the deployed models and each one's status. */
export interface DeploymentSource {
  models(): readonly string[];
  status(model: string): ReconcilerDeploymentStatus;
}

/** Counts the reconciler's events; hand {@link DeploymentMetrics.record} to its `events` option. */
export interface DeploymentMetrics {
  record(event: ReconcilerEvent): void;
}

/** Creates the instruments on a meter of `provider`. */
export function createDeploymentMetrics(provider: MeterProvider, source: DeploymentSource): DeploymentMetrics {
  const meter = provider.getMeter('sluice-gateway');
  const replicas = meter.createObservableGauge('sluice_deployment_replicas', {
    description:
      'Replicas of a deployment, by model and state (wanted, starting, ready, draining, outdated: ordered at an older revision, being replaced)',
  });
  const operations = meter.createObservableGauge('sluice_deployment_operations', {
    description:
      'Start operations of a deployment waiting for a retry (pending) or given up on (dead_lettered), by model',
  });
  meter.addBatchObservableCallback(
    (observe) => {
      for (const model of source.models()) {
        const s = source.status(model);
        for (const state of ['wanted', 'starting', 'ready', 'draining', 'outdated'] as const)
          observe.observe(replicas, s[state], { model, state });
        observe.observe(operations, s.pending.length, { model, state: 'pending' });
        observe.observe(operations, s.deadLettered.length, { model, state: 'dead_lettered' });
      }
    },
    [replicas, operations],
  );
  const scaleEvents = meter.createCounter('sluice_deployment_scale_events', {
    description: 'Changes of the replicas a deployment wants, by model and direction (up, down)',
  });
  const coldStarts = meter.createCounter('sluice_deployment_cold_starts', {
    description: 'Scale-ups of a deployment from zero replicas, by model',
  });
  const startTime = meter.createHistogram('sluice_replica_start_seconds', {
    description: 'Time from a replica start order to its engine being ready, by model',
    unit: 's',
    advice: { explicitBucketBoundaries: START_BUCKETS },
  });
  const failures = meter.createCounter('sluice_replica_start_failures', {
    description: 'Replica starts that failed (engine exit, start timeout, runner lost, order not taken), by model',
  });
  const deadLetters = meter.createCounter('sluice_replica_dead_letters', {
    description: 'Start operations given up on after their attempts, by model',
  });
  const replaced = meter.createCounter('sluice_replicas_replaced', {
    description:
      'Replicas of an older revision of their deployment stopped once a current one was ready in their place, by model',
  });
  // One attribute set per model, built once.
  const byModel = new Map<string, Attributes>();
  const of = (model: string): Attributes => {
    let attributes = byModel.get(model);
    if (!attributes) byModel.set(model, (attributes = { model }));
    return attributes;
  };
  return {
    record(event) {
      switch (event.kind) {
        case 'scale':
          scaleEvents.add(1, { model: event.model, direction: event.to > event.from ? 'up' : 'down' });
          if (event.from === 0 && event.to > 0) coldStarts.add(1, of(event.model));
          break;
        case 'ready':
          startTime.record(event.startMs / 1000, of(event.model));
          break;
        case 'failed':
          failures.add(1, of(event.model));
          break;
        case 'dead-letter':
          deadLetters.add(1, of(event.model));
          break;
        case 'replaced':
          replaced.add(1, of(event.model));
          break;
        default:
          break;
      }
    },
  };
}
