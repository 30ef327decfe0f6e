/**
 * The load generator: one undici Pool of keep-alive connections per target, driven either
 * closed-loop (N connections, each sending its next request when the last one answered) or
 * open-loop (requests leave on a fixed schedule whatever the answers do).
 *
 * Closed loop measures capacity, but a slow answer also delays the next send, so queueing a
 * real client would suffer is never seen ("coordinated omission"). Open loop keeps the schedule
 * and measures every latency from the time the request *should* have left, so a stall shows up
 * in every request that queued behind it.
 */
import { setMaxListeners } from 'node:events';
import { performance } from 'node:perf_hooks';
import { Pool } from 'undici';
import type { Dispatcher } from 'undici';
import { BenchTargetError } from './errors.ts';
import { LIMITS, checkInteger, show } from './options.ts';
import { Recorder } from './record.ts';
import type { LoadResult } from './record.ts';

/** One endpoint to load: where, and the request sent each time. */
export interface LoadTarget {
  /** Label in results and tables. */
  name: string;
  /** Full URL, path included; must be http on 127.0.0.1 or localhost. */
  url: string;
  /** @default 'POST' when there is a body, else 'GET' */
  method?: Dispatcher.HttpMethod;
  headers?: Record<string, string>;
  body?: string;
}

/** Options of a {@link LoadClient}. */
export interface LoadClientOptions {
  /** Most connections opened to the target. @default 32 */
  connections?: number;
  /** Longest wait for a response's headers, and between body chunks, ms. @default 10000 */
  requestTimeout?: number;
}

const LOCAL_HOSTS = new Set(['127.0.0.1', 'localhost']);

/**
 * Parses `url` and checks it points at this machine.
 * @throws {BenchTargetError} unless it is http on 127.0.0.1 or localhost.
 */
export function assertLocalTarget(url: string | URL): URL {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new BenchTargetError(`target ${show(String(url))} is not a valid URL`);
  }
  if (parsed.protocol !== 'http:' || !LOCAL_HOSTS.has(parsed.hostname)) {
    throw new BenchTargetError(
      `target ${show(String(url))} is not http on 127.0.0.1 or localhost; the bench driver only loads this machine`,
    );
  }
  return parsed;
}

/** Keep-alive connections to one target, and the one request the runs send. */
export class LoadClient {
  readonly target: LoadTarget;
  readonly connections: number;
  readonly #pool: Pool;
  readonly #request: Dispatcher.RequestOptions;

  /** @throws {BenchTargetError} when the target is not local; {@link BenchOptionError} for a bad option. */
  constructor(target: LoadTarget, options: LoadClientOptions = {}) {
    const url = assertLocalTarget(target.url);
    this.target = target;
    this.connections = checkInteger('connections', options.connections ?? 32, 1, LIMITS.maxConnections);
    const timeout = checkInteger('requestTimeout', options.requestTimeout ?? 10_000, 1, LIMITS.maxDuration, 'ms');
    this.#pool = new Pool(url.origin, { connections: this.connections, pipelining: 1, keepAliveTimeout: 30_000 });
    this.#request = {
      method: target.method ?? (target.body === undefined ? 'GET' : 'POST'),
      path: url.pathname + url.search,
      headers: target.headers ?? {},
      ...(target.body === undefined ? {} : { body: target.body }),
      headersTimeout: timeout,
      bodyTimeout: timeout,
    };
  }

  /**
   * Sends the request once and records it in `rec`, with times measured from `since` (the
   * scheduled send time, on performance.now()'s clock). Never rejects: a failure is recorded.
   */
  async send(rec: Recorder, since: number, signal?: AbortSignal): Promise<void> {
    const sentAt = performance.now();
    try {
      const res = await this.#pool.request(signal ? { ...this.#request, signal } : this.#request);
      let first = Number.NaN;
      // Reading the body is part of the latency; the first chunk is what a stream's client waits for.
      await new Promise<void>((resolve, reject) => {
        res.body.on('data', () => {
          if (Number.isNaN(first)) first = performance.now();
        });
        res.body.once('end', resolve);
        res.body.once('error', reject);
      });
      rec.response(res.statusCode, performance.now() - since, first - since, sentAt - since);
    } catch (error) {
      rec.failure(error, sentAt - since);
    }
  }

  /** Closes the connections once idle. */
  close(): Promise<void> {
    return this.#pool.close();
  }
}

/** Bounds shared by both loops. */
export interface RunBounds {
  /** How long requests are sent, ms. */
  duration: number;
  /** Most requests sent, whatever the duration. @default 5000000 */
  maxRequests?: number;
  /** Stops sending and aborts requests in flight. */
  signal?: AbortSignal;
}

/** Closed loop: `client.connections` workers, each sending back to back until a bound is hit. */
export async function runClosedLoop(client: LoadClient, bounds: RunBounds): Promise<LoadResult> {
  const { duration, maxRequests } = checkBounds(bounds);
  const { signal, release } = runSignal(bounds.signal);
  const rec = new Recorder();
  const start = performance.now();
  const end = start + duration;
  let sent = 0;
  const worker = async (): Promise<void> => {
    while (!signal?.aborted && sent < maxRequests && performance.now() < end) {
      sent++;
      await client.send(rec, performance.now(), signal);
    }
  };
  await Promise.all(Array.from({ length: client.connections }, worker));
  release();
  return runResult(rec, client, start, { mode: 'closed', durationMs: duration, sent, dropped: 0 });
}

/** Options of {@link runOpenLoop}. */
export interface OpenLoopOptions extends RunBounds {
  /** Arrival rate, requests per second. */
  rate: number;
  /** Requests allowed to wait for an answer at once; past that a scheduled request is dropped. @default 10000 */
  maxInFlight?: number;
}

/**
 * Open loop: request i is due at start + i / rate. Due requests leave in batches on each timer
 * tick (Node timers have a 1 ms floor), and each latency counts from its due time, so both a
 * slow target and a late driver show up in the figures; `sendLag` tells the two apart.
 */
export function runOpenLoop(client: LoadClient, options: OpenLoopOptions): Promise<LoadResult> {
  const { duration, maxRequests } = checkBounds(options);
  const rate = checkInteger('rate', options.rate, 1, LIMITS.maxRate);
  const maxInFlight = checkInteger('maxInFlight', options.maxInFlight ?? 10_000, 1, 100_000);
  const { signal, release } = runSignal(options.signal);
  const total = Math.min(maxRequests, Math.floor((rate * duration) / 1000));
  const rec = new Recorder();
  const start = performance.now();
  let dropped = 0;
  const run = openLoopSchedule(
    { rate, total, maxInFlight, start, ...(signal ? { signal } : {}) },
    { send: (_seq, due) => client.send(rec, due, signal), drop: () => void dropped++ },
  );
  return run.done.then(() => {
    release();
    return runResult(rec, client, start, { mode: 'open', rate, durationMs: duration, sent: run.scheduled(), dropped });
  });
}

/** What a run of `client` that began at `start` (performance.now()) recorded in `rec`, ending now. */
function runResult(
  rec: Recorder,
  client: LoadClient,
  start: number,
  run: Pick<LoadResult, 'mode' | 'rate' | 'durationMs' | 'sent' | 'dropped'>,
): LoadResult {
  const { mode, rate, durationMs, sent, dropped } = run;
  const elapsedMs = performance.now() - start;
  const target = client.target.name;
  return rec.result({
    target,
    mode,
    connections: client.connections,
    ...(rate === undefined ? {} : { rate }),
    durationMs,
    elapsedMs,
    sent,
    dropped,
  });
}

/** What {@link openLoopSchedule} paces. */
export interface OpenLoopSchedule {
  /** Arrivals per second. */
  rate: number;
  /** Arrivals in all. */
  total: number;
  /** Sends waiting for an answer at once; an arrival past that is dropped. */
  maxInFlight: number;
  /** performance.now() of arrival 0. */
  start: number;
  signal?: AbortSignal;
}

/**
 * The open loop's pacing, for every driver that needs one: arrival i is due at start + i / rate;
 * due arrivals leave in batches on each timer tick (Node timers have a 1 ms floor), each given to
 * `send` with its sequence number and due time, or to `drop` when maxInFlight sends are waiting.
 * `done` resolves once every arrival was scheduled (or the signal aborted) and every send settled.
 * `send` must not reject.
 */
export function openLoopSchedule(
  plan: OpenLoopSchedule,
  hooks: { send(seq: number, due: number): Promise<unknown>; drop(seq: number, due: number): void },
): { done: Promise<void>; inFlight(): number; scheduled(): number } {
  const { rate, total, maxInFlight, start, signal } = plan;
  const interval = 1000 / rate;
  let scheduled = 0;
  let inFlight = 0;
  const done = new Promise<void>((resolve) => {
    let schedulingDone = false;
    const finishIfDone = (): void => {
      if (schedulingDone && inFlight === 0) resolve();
    };
    const settle = (): void => {
      inFlight--;
      finishIfDone();
    };
    const tick = (): void => {
      const now = performance.now();
      while (scheduled < total && start + scheduled * interval <= now && !signal?.aborted) {
        const seq = scheduled++;
        const due = start + seq * interval;
        if (inFlight >= maxInFlight) {
          hooks.drop(seq, due);
          continue;
        }
        inFlight++;
        void hooks.send(seq, due).then(settle, settle);
      }
      if (scheduled < total && !signal?.aborted) {
        setTimeout(tick, Math.max(0, start + scheduled * interval - performance.now()));
      } else {
        schedulingDone = true;
        finishIfDone();
      }
    };
    tick();
  });
  return { done, inFlight: () => inFlight, scheduled: () => scheduled };
}

/**
 * A signal for one run's requests, following the caller's. Every request in flight listens on
 * it, so it is allowed more than Node's default of 10 listeners (which would warn of a leak),
 * and the link to the caller's signal is undone when the run ends so runs do not pile up on it.
 */
export function runSignal(outer: AbortSignal | undefined): { signal: AbortSignal | undefined; release: () => void } {
  if (!outer) return { signal: undefined, release: () => {} };
  const controller = new AbortController();
  setMaxListeners(0, controller.signal);
  const abort = (): void => controller.abort(outer.reason);
  if (outer.aborted) abort();
  else outer.addEventListener('abort', abort, { once: true });
  return { signal: controller.signal, release: () => outer.removeEventListener('abort', abort) };
}

function checkBounds(bounds: RunBounds): { duration: number; maxRequests: number } {
  return {
    duration: checkInteger('duration', bounds.duration, 1, LIMITS.maxDuration, 'ms'),
    maxRequests: checkInteger('maxRequests', bounds.maxRequests ?? LIMITS.maxRequests, 1, LIMITS.maxRequests),
  };
}
