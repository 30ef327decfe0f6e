/**
 * The names the gateway's and runner's pages carry, held to Prometheus's conventions: base units
 * (seconds, bytes, a 0..1 ratio), the unit at the end of the name, `_total` on counters.
 * OpenTelemetry's GenAI instruments keep their own names (the unit in their metadata), as those
 * conventions say. Every instrument is made to show on the page, then each family is checked.
 */
import type { Histogram } from '@opentelemetry/api';
import { describe, expect, it } from 'vitest';
import { createDeploymentMetrics } from '../../../gateway/control/metrics.ts';
import { createGatewayMetrics, createStoreMetrics } from '../../../gateway/observe/metrics.ts';
import { createPrometheusMetrics } from '../../../gateway/observe/telemetry.ts';
import { createRunnerMetrics } from '../../../runner/metrics.ts';

/** Each family on a Prometheus page: its type and its unit, if it says one. */
function families(page: string): Map<string, { type: string; unit?: string }> {
  const found = new Map<string, { type: string; unit?: string }>();
  for (const line of page.split('\n')) {
    const type = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (type) found.set(type[1]!, { ...found.get(type[1]!), type: type[2]! });
    const unit = /^# UNIT (\S+) (\S+)$/.exec(line);
    if (unit) found.set(unit[1]!, { type: found.get(unit[1]!)?.type ?? '', unit: unit[2]! });
  }
  return found;
}

/** The rule a family breaks, or undefined when it keeps them all. */
function broken(name: string, family: { type: string; unit?: string }): string | undefined {
  if (name === 'target_info') return undefined;
  if (family.type === 'counter' && !name.endsWith('_total')) return 'a counter without _total';
  if (family.unit === 'ms') return 'milliseconds, not the base unit';
  if (name.startsWith('gen_ai_')) return undefined;
  if (family.unit === 's' && !name.endsWith('_seconds')) return 'seconds without _seconds';
  if (family.unit === 'By' && !/_bytes(_total)?$/.test(name)) return 'bytes without _bytes';
  return undefined;
}

async function gatewayPage(): Promise<string> {
  const telemetry = createPrometheusMetrics();
  const m = createGatewayMetrics(telemetry.meterProvider, { uploads: () => 0 });
  m.calls.add(1, 'chat');
  m.rejected.add(1, 'GW_INVALID_JSON');
  m.failed.add(1, 'PLACER_TIMEOUT');
  m.placerRetries.add(1, 'busy');
  m.coldStartCalls.add(1, 'm');
  for (const outcome of Object.values(m.outcomes)) outcome.add(1);
  m.queueDepth.add(1, { model: 'm', priority: 'interactive' });
  m.queueRefused.add(1, { scope: 'total' });
  const histograms: Histogram[] = [
    m.latency,
    m.execTime,
    m.placerAttempts,
    m.queueTime,
    m.coldStartWait,
    ...Object.values(m.inference),
  ];
  for (const histogram of histograms) histogram.record(1, { outcome: 'completed' });
  const store = createStoreMetrics(telemetry.meterProvider, async () => ({
    ok: true,
    storedBytes: 1,
    maxStoredBytes: 2,
  }));
  store.resultsRefused.add(1);
  const deployments = createDeploymentMetrics(telemetry.meterProvider, {
    models: () => [],
    status: () => {
      throw new Error('no deployment');
    },
  });
  deployments.record({ kind: 'ready', model: 'm', replica: 'x', runner: 'r', startMs: 1000 });
  deployments.record({ kind: 'scale', model: 'm', from: 0, to: 1, reason: 'a call' });
  deployments.record({ kind: 'failed', model: 'm', replica: 'x', runner: 'r', reason: 'exit' });
  deployments.record({ kind: 'dead-letter', model: 'm', attempts: [] });
  deployments.record({ kind: 'replaced', model: 'm', replica: 'x', runner: 'r', by: 'y' });
  try {
    return await telemetry.render();
  } finally {
    await telemetry.shutdown();
  }
}

async function runnerPage(): Promise<string> {
  const metrics = createRunnerMetrics({
    id: 'r-1',
    counts: { served: 1, failed: 0, unauthorized: 0 } as never,
    admitted: () => 1,
    slots: () => ({ total: 1, inUse: 0 }),
    engine: () =>
      ({
        state: 'ready',
        supervised: { restarts: 0 },
        load: { running: 1, waiting: 0, kvCacheUsage: 0.5 },
        loadAgeMs: 10,
      }) as never,
    cacheFeeds: () => [{ gateway: 'gw', updates: 1, bytes: 1 }],
  });
  metrics.busy('slots');
  try {
    return await metrics.render();
  } finally {
    await metrics.shutdown();
  }
}

describe('metric names', () => {
  it.each([
    ['gateway', gatewayPage],
    ['runner', runnerPage],
  ])('returns no %s family that breaks the naming rules', async (_name, render) => {
    const page = await render();
    const all = families(page);
    expect(all.size).toBeGreaterThan(5);
    const wrong = [...all].flatMap(([name, family]) => {
      const rule = broken(name, family);
      return rule === undefined ? [] : [`${name}: ${rule}`];
    });
    expect(wrong).toEqual([]);
  });

  it('returns the latency histograms in seconds under their _seconds names', async () => {
    const all = families(await gatewayPage());
    for (const name of [
      'sluice_call_overhead_seconds',
      'sluice_runner_execution_seconds',
      'sluice_queue_time_seconds',
      'sluice_request_queue_wait_seconds',
      'sluice_cold_start_wait_seconds',
      'sluice_replica_start_seconds',
    ])
      expect(all.get(name), name).toEqual({ type: 'histogram', unit: 's' });
  });

  it('returns the KV cache share as a ratio and the feed in bytes on the runner page', async () => {
    const all = families(await runnerPage());
    expect(all.get('sluice_runner_engine_kv_cache_usage_ratio')?.type).toBe('gauge');
    expect(all.get('sluice_runner_cache_feed_bytes_total')).toEqual({ type: 'counter', unit: 'By' });
  });
});
