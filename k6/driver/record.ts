/**
 * What one load run records (every request's latency, time to first byte, send lag, status and
 * error) and the summary the report prints. Recording is a few array pushes per request so the
 * driver, which shares the CPUs with what it measures, spends as little as it can.
 */
import { distribution, perSecond } from './stats.ts';
import type { Distribution } from './stats.ts';

/** Closed loop: N connections send back to back. Open loop: requests leave on a fixed schedule. */
export type LoadMode = 'closed' | 'open';

/** Everything a run recorded, raw. Latencies are ms (float) from the scheduled send time. */
export interface LoadResult {
  target: string;
  mode: LoadMode;
  /** Connections (closed loop) or the connection cap (open loop). */
  connections: number;
  /** Arrival rate asked for, requests per second (open loop only). */
  rate?: number;
  durationMs: number;
  /** From the first send to the last response. */
  elapsedMs: number;
  /** Requests sent or scheduled, including dropped ones. */
  sent: number;
  /** Open loop: requests not sent because `maxInFlight` were already waiting (k6's dropped_iterations). */
  dropped: number;
  /** End-to-end latency of every request that got a response, any status. */
  latencies: number[];
  /** Time to the first body byte, for responses that had a body. */
  ttfb: number[];
  /** How late each request left compared with its schedule: the driver's own delay. */
  sendLag: number[];
  /** Responses by status code. */
  statuses: Record<string, number>;
  /** Requests that got no response, by error code (or name). */
  errors: Record<string, number>;
}

/** The figures of one run, as printed and written to JSON. */
export interface RunSummary {
  target: string;
  mode: LoadMode;
  connections: number;
  rate: number | undefined;
  durationMs: number;
  elapsedMs: number;
  sent: number;
  /** 2xx responses. */
  ok: number;
  /** 2xx responses per second of elapsed time: failures do not count as throughput. */
  rps: number;
  /** Non-2xx responses + requests with no response + dropped requests. */
  errors: number;
  non2xx: number;
  transportErrors: number;
  dropped: number;
  latency: Distribution;
  ttfb: Distribution;
  sendLag: Distribution;
  statuses: Record<string, number>;
  errorKinds: Record<string, number>;
}

/** Most distinct error kinds kept; past that they are counted under "other" so a storm stays small. */
const MAX_ERROR_KINDS = 20;

/** Accumulates one run's requests; see {@link LoadResult} for the fields. */
export class Recorder {
  readonly latencies: number[] = [];
  readonly ttfb: number[] = [];
  readonly sendLag: number[] = [];
  readonly statuses: Record<string, number> = {};
  readonly errors: Record<string, number> = {};

  /** A response arrived in full. Times are ms from the scheduled send; `ttfb` is NaN without a body. */
  response(status: number, latency: number, ttfb: number, lag: number): void {
    this.latencies.push(latency);
    if (!Number.isNaN(ttfb)) this.ttfb.push(ttfb);
    this.sendLag.push(lag);
    this.statuses[status] = (this.statuses[status] ?? 0) + 1;
  }

  /** A request got no (complete) response. */
  failure(error: unknown, lag: number): void {
    this.sendLag.push(lag);
    const e = error as { code?: unknown; name?: unknown };
    let kind = typeof e?.code === 'string' ? e.code : typeof e?.name === 'string' ? e.name : 'unknown';
    if (!(kind in this.errors) && Object.keys(this.errors).length >= MAX_ERROR_KINDS) kind = 'other';
    this.errors[kind] = (this.errors[kind] ?? 0) + 1;
  }

  /** The raw result, with the run's description. */
  result(run: Omit<LoadResult, 'latencies' | 'ttfb' | 'sendLag' | 'statuses' | 'errors'>): LoadResult {
    return {
      ...run,
      latencies: this.latencies,
      ttfb: this.ttfb,
      sendLag: this.sendLag,
      statuses: this.statuses,
      errors: this.errors,
    };
  }
}

/** Computes the printed figures of a run. */
export function summarize(result: LoadResult): RunSummary {
  let ok = 0;
  let non2xx = 0;
  for (const [status, count] of Object.entries(result.statuses)) {
    if (status.startsWith('2')) ok += count;
    else non2xx += count;
  }
  const transportErrors = Object.values(result.errors).reduce((a, b) => a + b, 0);
  return {
    target: result.target,
    mode: result.mode,
    connections: result.connections,
    rate: result.rate,
    durationMs: result.durationMs,
    elapsedMs: result.elapsedMs,
    sent: result.sent,
    ok,
    rps: perSecond(ok, result.elapsedMs),
    errors: non2xx + transportErrors + result.dropped,
    non2xx,
    transportErrors,
    dropped: result.dropped,
    latency: distribution(result.latencies),
    ttfb: distribution(result.ttfb),
    sendLag: distribution(result.sendLag),
    statuses: { ...result.statuses },
    errorKinds: { ...result.errors },
  };
}

/**
 * Pools several runs of the same target and mode (the rounds) into one: samples are merged,
 * so percentiles are over every request, and throughput is total 2xx over total time.
 * @throws {Error} when `results` is empty.
 */
export function combine(results: readonly LoadResult[]): LoadResult {
  const [first] = results;
  if (!first) throw new Error('combine needs at least one result');
  const sum = (pick: (r: LoadResult) => number): number => results.reduce((a, r) => a + pick(r), 0);
  const merge = (pick: (r: LoadResult) => Record<string, number>): Record<string, number> => {
    const out: Record<string, number> = {};
    for (const r of results) for (const [k, v] of Object.entries(pick(r))) out[k] = (out[k] ?? 0) + v;
    return out;
  };
  return {
    target: first.target,
    mode: first.mode,
    connections: first.connections,
    ...(first.rate === undefined ? {} : { rate: first.rate }),
    durationMs: sum((r) => r.durationMs),
    elapsedMs: sum((r) => r.elapsedMs),
    sent: sum((r) => r.sent),
    dropped: sum((r) => r.dropped),
    latencies: results.flatMap((r) => r.latencies),
    ttfb: results.flatMap((r) => r.ttfb),
    sendLag: results.flatMap((r) => r.sendLag),
    statuses: merge((r) => r.statuses),
    errors: merge((r) => r.errors),
  };
}
