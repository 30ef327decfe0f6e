/**
 * The `/metrics` page in Prometheus text format. The `vllm:*` families carry vLLM's names, types
 * and `model_name` label (counters exposed as `<name>_total`, as vLLM's Python client writes them),
 * so that a runner or placer scraping the simulator runs the same code it runs against vLLM. The
 * `sluice_sim_*` counters are the simulator's own, read by tests to prove how often a call ran,
 * that an abort arrived, or that a fault fired.
 */
import type { FaultTotals } from './faults.ts';
import type { PrefixCacheTotals } from './prefix-cache.ts';
import type { SchedulerTotals } from './scheduler.ts';

/** vLLM's bucket bounds for `vllm:time_to_first_token_seconds`, in seconds. */
const TTFT_BUCKETS: readonly number[] = [
  0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560,
];

/** A cumulative histogram of times to first token, measured from arrival (queue wait included, as vLLM does). */
export class TtftHistogram {
  readonly #counts = new Array<number>(TTFT_BUCKETS.length).fill(0);
  #count = 0;
  #sum = 0;

  /** Records one time to first token, in seconds. */
  observe(seconds: number): void {
    this.#count += 1;
    this.#sum += seconds;
    // Buckets are cumulative, so a value lands in every bucket whose bound it does not exceed.
    for (let i = 0; i < TTFT_BUCKETS.length; i += 1) if (seconds <= TTFT_BUCKETS[i]!) this.#counts[i]! += 1;
  }

  /** Samples in exposition order: the buckets, +Inf, then count and sum. */
  samples(name: string, labels: string): string[] {
    const lines = TTFT_BUCKETS.map((bound, i) => `${name}_bucket{${labels},le="${bound}"} ${this.#counts[i]}`);
    lines.push(
      `${name}_bucket{${labels},le="+Inf"} ${this.#count}`,
      `${name}_count{${labels}} ${this.#count}`,
      `${name}_sum{${labels}} ${this.#sum}`,
    );
    return lines;
  }
}

/** The figures one page shows. */
export interface MetricsSnapshot {
  /** vLLM labels its families with the first served model name only; so do we. */
  readonly modelName: string;
  readonly running: number;
  readonly waiting: number;
  readonly totals: SchedulerTotals;
  /** KV blocks held over the total, 0..1. */
  readonly kvUsage: number;
  /** Total KV blocks, published in `vllm:cache_config_info` as vLLM does. */
  readonly kvBlocks: number;
  /** Block size, published in `vllm:cache_config_info`. */
  readonly blockSize: number;
  readonly prefix: PrefixCacheTotals;
  readonly faults: FaultTotals;
  readonly ttft: TtftHistogram;
}

/** The Content-Type of Prometheus text exposition format 0.0.4. */
export const METRICS_CONTENT_TYPE = 'text/plain; version=0.0.4; charset=utf-8';

function escapeLabel(value: string): string {
  return value.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n');
}

function family(
  name: string,
  type: 'gauge' | 'counter' | 'histogram',
  help: string,
  samples: readonly string[],
): string {
  return `# HELP ${name} ${help}\n# TYPE ${name} ${type}\n${samples.join('\n')}\n`;
}

/** Renders one scrape. */
export function renderMetrics(snapshot: MetricsSnapshot): string {
  const { running, waiting, totals, kvUsage, prefix, faults } = snapshot;
  const model = `model_name="${escapeLabel(snapshot.modelName)}"`;
  const label = `{${model}}`;
  const config = `{block_size="${snapshot.blockSize}",enable_prefix_caching="True",num_gpu_blocks="${snapshot.kvBlocks}"}`;
  return [
    family('vllm:num_requests_running', 'gauge', 'Number of requests currently running on the engine.', [
      `vllm:num_requests_running${label} ${running}`,
    ]),
    family('vllm:num_requests_waiting', 'gauge', 'Number of requests waiting for a slot.', [
      `vllm:num_requests_waiting${label} ${waiting}`,
    ]),
    family('vllm:kv_cache_usage_perc', 'gauge', 'KV-cache usage. 1 means 100 percent usage.', [
      `vllm:kv_cache_usage_perc${label} ${kvUsage}`,
    ]),
    family('vllm:prefix_cache_queries', 'counter', 'Prefix cache queries, in terms of number of queried tokens.', [
      `vllm:prefix_cache_queries_total${label} ${prefix.queries}`,
    ]),
    family('vllm:prefix_cache_hits', 'counter', 'Prefix cache hits, in terms of number of cached tokens.', [
      `vllm:prefix_cache_hits_total${label} ${prefix.hits}`,
    ]),
    family('vllm:cache_config_info', 'gauge', 'Information of the KV-cache configuration.', [
      `vllm:cache_config_info${config} 1`,
    ]),
    family(
      'vllm:time_to_first_token_seconds',
      'histogram',
      'Histogram of time to first token in seconds.',
      snapshot.ttft.samples('vllm:time_to_first_token_seconds', model),
    ),
    family('sluice_sim_requests_total', 'counter', 'Calls offered to the scheduler, including refused ones.', [
      `sluice_sim_requests_total ${totals.received}`,
    ]),
    family('sluice_sim_requests_completed_total', 'counter', 'Calls that ran to their last byte.', [
      `sluice_sim_requests_completed_total ${totals.completed}`,
    ]),
    family('sluice_sim_requests_aborted_total', 'counter', 'Calls whose client went away while waiting or running.', [
      `sluice_sim_requests_aborted_total ${totals.aborted}`,
    ]),
    family('sluice_sim_requests_rejected_total', 'counter', 'Calls refused with 429 because the queue was full.', [
      `sluice_sim_requests_rejected_total ${totals.rejected}`,
    ]),
    family(
      'sluice_sim_injected_failures_total',
      'counter',
      'Calls refused by fault injection, by status.',
      ([429, 503, 500] as const).map(
        (status) => `sluice_sim_injected_failures_total{status="${status}"} ${faults.injected[status]}`,
      ),
    ),
    family('sluice_sim_loading_rejected_total', 'counter', 'Requests answered 503 while the model was loading.', [
      `sluice_sim_loading_rejected_total ${faults.loading}`,
    ]),
  ].join('');
}
