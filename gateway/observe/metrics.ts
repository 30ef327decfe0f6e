/**
 * The gateway's instruments, through @opentelemetry/api only: a no-op until the entry point
 * wires an SDK. Names and buckets follow Fn's LB agent so dashboards carry over.
 *
 * Counts a call moves (calls, outcomes, refusals, what is uploading, queued or running) are kept
 * in plain numbers ({@link Count}) and handed to the SDK only when metrics are collected: a
 * call pays an addition, not an SDK record with its attribute set hashed. Histograms, whose
 * buckets need every value, are recorded per call, with attribute sets built once; on a provider
 * whose reader renders tallies (gateway/observe/tally.ts) they are tallies, which hash a set only
 * the first time they see it.
 */
import type {
  Attributes,
  Counter,
  Histogram,
  Meter,
  MeterProvider,
  MetricOptions,
  ObservableResult,
  UpDownCounter,
} from '@opentelemetry/api';
import type { CallOutcome } from '../http/index.ts';
import type { StoreHealth } from '../store/index.ts';
import { talliesOf } from './tally.ts';

/** Fn's lb_call_latency buckets, in s (its 1 ms to 120 s). */
const LATENCY_BUCKETS = [0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 10, 60, 120];
/** Runner execution time spans from milliseconds to many minutes for long generations; in s. */
const EXEC_BUCKETS = [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];
/** Fn's placer attempt buckets. */
const ATTEMPT_BUCKETS = [0, 2, 3, 4, 8, 16, 32, 64, 128, 256];
/** A replica takes from about a second (a small engine on a warm node) to minutes (a large model loaded from disk); in s. */
const COLD_START_BUCKETS = [0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600];

/**
 * A count kept in plain numbers, by the value of at most one label, and observed by the SDK
 * when metrics are collected. A label value's attribute set is built the first time it is seen.
 */
export class Count {
  readonly #label: string | undefined;
  readonly #values = new Map<string, number>();
  readonly #attributes = new Map<string, Attributes>();

  /** @param label the label's name; undefined for a count without one */
  constructor(label?: string) {
    this.#label = label;
  }

  /** Every label value seen and its count now ('' for a count without a label). */
  entries(): IterableIterator<[string, number]> {
    return this.#values.entries();
  }

  /** Adds `n` (negative to take away) to the count of `value` (of the label; '' without one). */
  add(n: number, value = ''): void {
    this.#values.set(value, (this.#values.get(value) ?? 0) + n);
  }

  /** The count of `value` now. */
  get(value = ''): number {
    return this.#values.get(value) ?? 0;
  }

  /** Hands every label value's count to an observable instrument's callback. */
  observe(result: ObservableResult): void {
    for (const [value, n] of this.#values) result.observe(n, this.#attributesOf(value));
  }

  #attributesOf(value: string): Attributes {
    let attributes = this.#attributes.get(value);
    if (attributes === undefined) {
      attributes = this.#label === undefined ? {} : { [this.#label]: value };
      this.#attributes.set(value, attributes);
    }
    return attributes;
  }
}

/** The gateway's counts and histograms. */
export interface GatewayMetrics {
  calls: Count;
  rejected: Count;
  /**
   * Calls counted in `calls` that ended with an error after placement began (a placer timeout,
   * a runner's failure, a call timeout), by code; refusals already in `rejected` are not here.
   */
  failed: Count;
  queued: Count;
  running: Count;
  outcomes: Record<CallOutcome, Count>;
  /** Histograms recorded per call, and each one's attribute set per outcome label. */
  latency: Histogram;
  execTime: Histogram;
  /** `{ outcome }` for each outcome, built once: see {@link outcomeLabel}. */
  outcomeAttributes: Readonly<Record<CallOutcome, Attributes>>;
  placerAttempts: Histogram;
  placerRetries: Count;
  /** Calls in the wait queue now, by model and priority. */
  queueDepth: UpDownCounter;
  /** Time from a call's first wait in the queue to its placement or end, by priority. */
  queueTime: Histogram;
  /** Calls refused with GW_QUEUE_FULL, by the bound they met (`total` or `flow`). */
  queueRefused: Counter;
  /** Calls that waited for a replica of their model (a cold start), by model. */
  coldStartCalls: Count;
  /** How long each of them waited, in s, from its first wait for a replica to its placement or end. */
  coldStartWait: Histogram;
  /** `{ model }` for a model, built the first time it is asked for. */
  modelAttributes(model: string): Attributes;
  /** The inference histograms (OpenTelemetry's GenAI names), recorded by gateway/calls/inference.ts. */
  inference: InferenceInstruments;
}

/**
 * The inference histograms, in OpenTelemetry's GenAI metric names and units (seconds, tokens),
 * recorded per model and runner with the attribute sets of {@link InferenceAttributes}.
 */
export interface InferenceInstruments {
  /** gen_ai.server.time_to_first_token: call start to the first body chunk of a stream, in s. */
  timeToFirstToken: Histogram;
  /** gen_ai.server.time_per_output_token: a stream's mean gap between its events after the first, in s. */
  timePerOutputToken: Histogram;
  /** gen_ai.server.request.duration: call start to the end of the answer, in s. */
  requestDuration: Histogram;
  /** gen_ai.client.token.usage: the engine's reported input and output tokens per call. */
  tokenUsage: Histogram;
  /** sluice_request_queue_wait_seconds: a placed call's time in the wait queue, 0 when it never waited. */
  queueWait: Histogram;
}

/** A monotonic {@link Count} read by the SDK at collection, as a counter. */
function observedCounter(meter: Meter, name: string, description: string, label?: string): Count {
  const count = new Count(label);
  meter.createObservableCounter(name, { description }).addCallback((result) => count.observe(result));
  return count;
}

/** A {@link Count} that goes up and down, read by the SDK at collection (a gauge in Prometheus). */
function observedUpDown(meter: Meter, name: string, description: string): Count {
  const count = new Count();
  meter.createObservableUpDownCounter(name, { description }).addCallback((result) => count.observe(result));
  return count;
}

/**
 * Buckets in seconds, after OpenTelemetry's advice for the GenAI metrics, stretched to minutes:
 * behind a queue or a cold start, a first token or a whole answer can take that long.
 */
const TTFT_BUCKETS = [
  0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 30, 60, 120, 300,
];
const TPOT_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5];
const DURATION_BUCKETS = [
  0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92, 163.84, 327.68, 655.36,
];
const TOKEN_BUCKETS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576];
const QUEUE_WAIT_BUCKETS = [0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600];

/** Makes a histogram: a tally where the provider's reader renders them, else the SDK's. */
type MakeHistogram = (name: string, options: MetricOptions) => Histogram;

/** How histograms are made on `meter` of `provider`. */
function histogramsOf(provider: MeterProvider, meter: Meter): MakeHistogram {
  const tallies = talliesOf(provider);
  return tallies
    ? (name, options) => tallies.histogram(name, options)
    : (name, options) => meter.createHistogram(name, options);
}

/** The inference histograms, made by `make`. */
function createInferenceInstruments(make: MakeHistogram): InferenceInstruments {
  const histogram = (name: string, description: string, unit: string, buckets: number[]) =>
    make(name, { description, unit, advice: { explicitBucketBoundaries: buckets } });
  return {
    timeToFirstToken: histogram(
      'gen_ai.server.time_to_first_token',
      "Time from a streamed call's start (its body in) to the first body chunk of its answer",
      's',
      TTFT_BUCKETS,
    ),
    timePerOutputToken: histogram(
      'gen_ai.server.time_per_output_token',
      "A streamed answer's mean time between its events after the first (a token each for engines that stream one per event)",
      's',
      TPOT_BUCKETS,
    ),
    requestDuration: histogram(
      'gen_ai.server.request.duration',
      "Time from a call's start (its body in) to the end of its answer, for answers relayed in full with a 2xx status",
      's',
      DURATION_BUCKETS,
    ),
    tokenUsage: histogram(
      'gen_ai.client.token.usage',
      "Input and output tokens of a call, as its engine's usage block reported them",
      '{token}',
      TOKEN_BUCKETS,
    ),
    queueWait: histogram(
      'sluice_request_queue_wait_seconds',
      'Time a placed call spent in the wait queue, from its first wait to its placement; 0 for a call that never waited',
      's',
      QUEUE_WAIT_BUCKETS,
    ),
  };
}

/** What the gateway's gauges read from the parts that keep the count. */
export interface GaugeSources {
  /** Request bodies being received now: the upload budget's own count. */
  uploads: () => number;
}

/** Creates the instruments on a meter of `provider`; `sources` are read at collection. */
export function createGatewayMetrics(provider: MeterProvider, sources?: GaugeSources): GatewayMetrics {
  const meter = provider.getMeter('sluice-gateway');
  if (sources) {
    const { uploads } = sources;
    meter
      .createObservableUpDownCounter('sluice_uploads', {
        description: 'Request bodies being received now (counted against maxUploads, not maxInFlight)',
      })
      .addCallback((result) => result.observe(uploads()));
  }
  const histogram = histogramsOf(provider, meter);
  const counter = (name: string, description: string) => meter.createCounter(name, { description });
  const count = (name: string, description: string, label?: string) => observedCounter(meter, name, description, label);
  return {
    calls: count('sluice_calls', 'Calls buffered, validated and handed to placement', 'route'),
    rejected: count('sluice_calls_rejected', 'Requests answered with an error before placement, by error code', 'code'),
    failed: count(
      'sluice_calls_failed',
      'Calls that reached placement and ended with an error (placer timeout, runner failure, call timeout), by error code',
      'code',
    ),
    queued: observedUpDown(meter, 'sluice_calls_queued', 'Calls waiting for a runner'),
    running: observedUpDown(meter, 'sluice_calls_running', 'Calls committed to a runner and not yet finished'),
    outcomes: {
      completed: count('sluice_calls_completed', 'Calls whose runner response was relayed in full'),
      // Fn's name, kept so dashboards carry over; the outcome itself is spelled `cancelled`.
      cancelled: count('sluice_calls_canceled', 'Calls whose client went away'),
      timeouts: count('sluice_calls_timeouts', 'Calls that ran past their execution timeout'),
      errors: count('sluice_calls_errors', 'Calls that failed in the gateway or on the runner after commit'),
      server_busy: count('sluice_calls_server_busy', 'Calls no runner took before the placer deadline'),
    },
    outcomeAttributes: {
      completed: { outcome: outcomeLabel('completed') },
      cancelled: { outcome: outcomeLabel('cancelled') },
      timeouts: { outcome: outcomeLabel('timeouts') },
      errors: { outcome: outcomeLabel('errors') },
      server_busy: { outcome: outcomeLabel('server_busy') },
    },
    latency: histogram('sluice_call_overhead_seconds', {
      description: 'What the platform added to a call: end minus startedAt minus runner-reported execution time',
      unit: 's',
      advice: { explicitBucketBoundaries: LATENCY_BUCKETS },
    }),
    execTime: histogram('sluice_runner_execution_seconds', {
      description: 'Execution time reported by runners (engine request start to last byte)',
      unit: 's',
      advice: { explicitBucketBoundaries: EXEC_BUCKETS },
    }),
    placerAttempts: histogram('sluice_placer_attempts', {
      description: 'Runner offers made to place one call',
      unit: '{offer}',
      advice: { explicitBucketBoundaries: ATTEMPT_BUCKETS },
    }),
    placerRetries: count('sluice_placer_retries', 'Runner offers that did not place the call, by reason', 'reason'),
    queueDepth: meter.createUpDownCounter('sluice_queue_depth', {
      description: 'Calls waiting in the wait queue for a runner, by model and priority',
    }),
    queueTime: histogram('sluice_queue_time_seconds', {
      description: 'Time a call spent in the wait queue, from its first wait to its placement or end',
      unit: 's',
      advice: { explicitBucketBoundaries: LATENCY_BUCKETS },
    }),
    queueRefused: counter(
      'sluice_queue_refused',
      'Calls refused with GW_QUEUE_FULL, by the bound met (total, model or flow)',
    ),
    coldStartCalls: count(
      'sluice_cold_start_calls',
      'Calls that waited for a replica of their model to start (a cold start), by model',
      'model',
    ),
    coldStartWait: histogram('sluice_cold_start_wait_seconds', {
      description:
        'Time a call waited for a replica of its model, from its first wait with none serving it to its placement or end',
      unit: 's',
      advice: { explicitBucketBoundaries: COLD_START_BUCKETS },
    }),
    modelAttributes: attributesBy('model'),
    inference: createInferenceInstruments(histogram),
  };
}

/** `{ [label]: value }` for each value, built once and kept: a histogram record per call hashes no new object. */
function attributesBy(label: string): (value: string) => Attributes {
  const built = new Map<string, Attributes>();
  return (value) => {
    let attributes = built.get(value);
    if (attributes === undefined) {
      attributes = Object.freeze({ [label]: value });
      built.set(value, attributes);
    }
    return attributes;
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
  const stored = meter.createObservableGauge('sluice_store_bytes', {
    description:
      'Bytes the detached-call store keeps for finished calls and their results (shared by gateways on one Redis)',
    unit: 'By',
  });
  const bound = meter.createObservableGauge('sluice_store_max_bytes', {
    description: 'The byte bound of the detached-call store (maxStoredBytes)',
    unit: 'By',
  });
  meter.addBatchObservableCallback(
    async (observe) => {
      const now = await health();
      if (!now.ok) return;
      observe.observe(stored, now.storedBytes);
      observe.observe(bound, now.maxStoredBytes);
    },
    [stored, bound],
  );
  return {
    resultsRefused: meter.createCounter('sluice_store_results_refused', {
      description:
        'Finished detached calls whose result the store refused for lack of room (the call failed with GW_STORE_FULL)',
    }),
  };
}
