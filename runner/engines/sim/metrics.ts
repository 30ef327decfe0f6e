/**
 * The `/metrics` page in Prometheus text format. The gauges carry vLLM's names and label so that a
 * runner or placer scraping the simulator runs the same code it runs against vLLM; the counters are
 * the simulator's own, read by tests to prove how often a call ran and that an abort arrived.
 */
import type { SchedulerTotals } from './scheduler.ts';

/** The figures one page shows. */
export interface MetricsSnapshot {
  /** vLLM labels its gauges with the first served model name only; so do we. */
  readonly modelName: string;
  readonly running: number;
  readonly waiting: number;
  readonly totals: SchedulerTotals;
}

/** The Content-Type of Prometheus text exposition format 0.0.4. */
export const METRICS_CONTENT_TYPE = 'text/plain; version=0.0.4; charset=utf-8';

function escapeLabel(value: string): string {
  return value.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n');
}

function metric(name: string, type: 'gauge' | 'counter', help: string, sample: string): string {
  return `# HELP ${name} ${help}\n# TYPE ${name} ${type}\n${sample}\n`;
}

/** Renders one scrape. */
export function renderMetrics({ modelName, running, waiting, totals }: MetricsSnapshot): string {
  const label = `{model_name="${escapeLabel(modelName)}"}`;
  return (
    metric('vllm:num_requests_running', 'gauge', 'Number of requests currently running on the engine.', `vllm:num_requests_running${label} ${running}`) +
    metric('vllm:num_requests_waiting', 'gauge', 'Number of requests waiting for a slot.', `vllm:num_requests_waiting${label} ${waiting}`) +
    metric('sluice_sim_requests_total', 'counter', 'Calls offered to the scheduler, including refused ones.', `sluice_sim_requests_total ${totals.received}`) +
    metric('sluice_sim_requests_completed_total', 'counter', 'Calls that ran to their last byte.', `sluice_sim_requests_completed_total ${totals.completed}`) +
    metric('sluice_sim_requests_aborted_total', 'counter', 'Calls whose client went away while waiting or running.', `sluice_sim_requests_aborted_total ${totals.aborted}`) +
    metric('sluice_sim_requests_rejected_total', 'counter', 'Calls refused with 429 because the queue was full.', `sluice_sim_requests_rejected_total ${totals.rejected}`)
  );
}
