/**
 * The runner's own metrics, served in Prometheus text at its GET /metrics: admission (calls that
 * took a slot, busy answers by reason), the calls it served, saw fail or refused, its engine's
 * state and restarts, and the engine's load as the runner last read it.
 *
 * Everything but the busy answers is read from what the runner keeps anyway (its counts, its
 * slots, its engine's status) when the page is collected: a call pays an addition at most. The
 * OpenTelemetry SDK is loaded at the first scrape, not at start: a runner nobody scrapes does not
 * pay its load time, and a runner's start is what a cold start waits on. The
 * meter provider is the runner's own, never the global one, so several runners in one process
 * (tests, `sluice up`) keep separate pages. Its resource is set, not detected, exactly as the
 * gateway's (gateway/observe/telemetry.ts says why): the page carries no command line, user or host.
 */
import type { Attributes } from '@opentelemetry/api';
import type { BusyReason } from './admission.ts';
import type { EngineStatus } from './protocol/index.ts';
import type { CallCounts } from './status.ts';
import { VERSION } from './protocol/version.ts';

/** The states an engine is reported in; `none` while the runner hosts no engine. */
export const ENGINE_STATES = ['none', 'starting', 'ready', 'unreachable', 'failed', 'draining'] as const;

/** Where the page's values are read from at collection. */
export interface RunnerMetricsSources {
  /** The runner's id: the page's service.instance.id. */
  id: string;
  counts: Readonly<CallCounts>;
  /** Calls that took a slot since the runner started. */
  admitted(): number;
  slots(): { total: number; inUse: number };
  /** The engine as /status shows it; undefined while there is none. */
  engine(): EngineStatus | undefined;
  /** What each gateway's cache feed sent so far (runner/cache-forwarder.ts). @default none */
  cacheFeeds?(): ReadonlyArray<{ readonly gateway: string; readonly updates: number; readonly bytes: number }>;
}

/** A runner's metrics. */
export interface RunnerMetrics {
  /** Counts one busy answer. */
  busy(reason: BusyReason): void;
  /** Collects and serializes the current values as Prometheus text. */
  render(): Promise<string>;
  /** Idempotent. */
  shutdown(): Promise<void>;
}

/** The page once the SDK is loaded. */
interface Page {
  render(): Promise<string>;
  shutdown(): Promise<void>;
}

/** Creates the runner's metrics; the meter provider and its instruments come with the first {@link RunnerMetrics.render}. */
export function createRunnerMetrics(sources: RunnerMetricsSources): RunnerMetrics {
  const busyByReason = new Map<BusyReason, number>();
  let page: Promise<Page> | undefined;
  let shutdown: Promise<void> | undefined;
  return {
    busy(reason) {
      busyByReason.set(reason, (busyByReason.get(reason) ?? 0) + 1);
    },
    async render() {
      page ??= openPage(sources, busyByReason);
      return (await page).render();
    },
    shutdown: () => (shutdown ??= page ? page.then((p) => p.shutdown()) : Promise.resolve()),
  };
}

/** Loads the SDK and builds the meter provider, its instruments and its Prometheus reader. */
async function openPage(sources: RunnerMetricsSources, busyByReason: ReadonlyMap<BusyReason, number>): Promise<Page> {
  const [{ PrometheusExporter, PrometheusSerializer }, { resourceFromAttributes }, { MeterProvider }] =
    await Promise.all([
      import('@opentelemetry/exporter-prometheus'),
      import('@opentelemetry/resources'),
      import('@opentelemetry/sdk-metrics'),
    ]);
  const reader = new PrometheusExporter({ preventServerStart: true });
  const serializer = new PrometheusSerializer();
  const provider = new MeterProvider({
    resource: resourceFromAttributes({
      'service.name': 'sluice-runner',
      'service.version': VERSION,
      'service.instance.id': sources.id,
    }),
    readers: [reader],
  });
  const meter = provider.getMeter('sluice-runner');
  const reasonAttributes = new Map<string, Attributes>();
  const attributes = (label: string, value: string): Attributes => {
    const key = `${label}=${value}`;
    let set = reasonAttributes.get(key);
    if (set === undefined) {
      set = Object.freeze({ [label]: value });
      reasonAttributes.set(key, set);
    }
    return set;
  };

  const admitted = meter.createObservableCounter('sluice_runner_calls_admitted', {
    description: 'Calls that took a slot (a later busy answer `late` included)',
  });
  const busy = meter.createObservableCounter('sluice_runner_busy', {
    description: 'Busy answers (503 with sluice-busy), by reason',
  });
  const served = meter.createObservableCounter('sluice_runner_calls_served', {
    description: 'Calls the engine answered and the runner relayed',
  });
  const failed = meter.createObservableCounter('sluice_runner_calls_failed', {
    description: 'Calls whose engine failed before or while answering',
  });
  const unauthorized = meter.createObservableCounter('sluice_runner_calls_unauthorized', {
    description: 'Calls refused as not from a gateway (no valid signature or client certificate)',
  });
  const slots = meter.createObservableUpDownCounter('sluice_runner_slots', {
    description: 'Slots of the runner: calls it runs at once',
  });
  const slotsInUse = meter.createObservableUpDownCounter('sluice_runner_slots_in_use', {
    description: 'Slots held by calls now',
  });
  const state = meter.createObservableGauge('sluice_runner_engine_state', {
    description: 'The engine state: 1 for the state it is in, 0 for the others',
  });
  const restarts = meter.createObservableCounter('sluice_runner_engine_restarts', {
    description: 'Restarts of the engine the runner launched (since that engine was launched)',
  });
  const running = meter.createObservableGauge('sluice_runner_engine_running', {
    description: "Requests in the engine's running batch, as last read from its metrics",
  });
  const waiting = meter.createObservableGauge('sluice_runner_engine_waiting', {
    description: 'Requests waiting inside the engine, as last read from its metrics',
  });
  const kvCache = meter.createObservableGauge('sluice_runner_engine_kv_cache_usage_ratio', {
    description: "Share of the engine's KV cache in use, 0 to 1, as last read from its metrics",
  });
  const loadAge = meter.createObservableGauge('sluice_runner_engine_load_age_seconds', {
    description: "Age of the engine's load as last read, in s",
    unit: 's',
  });
  const feedUpdates = meter.createObservableCounter('sluice_runner_cache_feed_updates', {
    description:
      "Cache updates sent to a gateway (the engine's stored and removed blocks, resets, keep-alives), by gateway",
  });
  const feedBytes = meter.createObservableCounter('sluice_runner_cache_feed_bytes', {
    description: 'Bytes of cache update bodies sent to a gateway, by gateway: the feed costs this per second',
    unit: 'By',
  });

  meter.addBatchObservableCallback(
    (observe) => {
      const { counts } = sources;
      observe.observe(admitted, sources.admitted());
      for (const [reason, n] of busyByReason) observe.observe(busy, n, attributes('reason', reason));
      observe.observe(served, counts.served);
      observe.observe(failed, counts.failed);
      observe.observe(unauthorized, counts.unauthorized);
      const s = sources.slots();
      observe.observe(slots, s.total);
      observe.observe(slotsInUse, s.inUse);
      const engine = sources.engine();
      const now = engine?.state ?? 'none';
      for (const name of ENGINE_STATES) observe.observe(state, name === now ? 1 : 0, attributes('state', name));
      for (const feed of sources.cacheFeeds?.() ?? []) {
        observe.observe(feedUpdates, feed.updates, attributes('gateway', feed.gateway));
        observe.observe(feedBytes, feed.bytes, attributes('gateway', feed.gateway));
      }
      if (engine === undefined) return;
      if (engine.supervised) observe.observe(restarts, engine.supervised.restarts);
      const load = engine.load;
      if (load?.running !== undefined) observe.observe(running, load.running);
      if (load?.waiting !== undefined) observe.observe(waiting, load.waiting);
      if (load?.kvCacheUsage !== undefined) observe.observe(kvCache, load.kvCacheUsage);
      if (engine.loadAgeMs !== undefined) observe.observe(loadAge, engine.loadAgeMs / 1000);
    },
    [
      admitted,
      busy,
      served,
      failed,
      unauthorized,
      slots,
      slotsInUse,
      state,
      restarts,
      running,
      waiting,
      kvCache,
      loadAge,
      feedUpdates,
      feedBytes,
    ],
  );

  return {
    async render() {
      const { resourceMetrics } = await reader.collect();
      return serializer.serialize(resourceMetrics);
    },
    shutdown: () => provider.shutdown(),
  };
}
