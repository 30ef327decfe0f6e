/**
 * Replaying a workload trace against one target, open loop: every call leaves at its due time
 * whatever the answers before it did, and each time is measured from that due time, so a target
 * that queues calls shows it in every call that queued. Each call is a streamed chat completion;
 * its time to first token is the arrival of the first body chunk (the simulated engine's first
 * event carries the first token), and its output tokens are read from the usage in its last event.
 *
 * The figures ({@link placementFigures}) are shared with the virtual-clock simulator, which
 * produces the same call records without a network, so the two can be compared line by line.
 */
import { performance } from 'node:perf_hooks';
import { Pool } from 'undici';
import { assertLocalTarget } from './load.ts';
import { distribution, perSecond } from './stats.ts';
import type { Distribution } from './stats.ts';
import { bodyOf } from './workload.ts';
import type { TraceCall, WorkloadShape } from './workload.ts';

/** What happened to one call of a trace. Times are ms from the call's due time. */
export interface CallRecord {
  /** Due time, ms from the start of the trace. */
  readonly at: number;
  readonly turn: number;
  /** HTTP status, or 0 when no answer came. */
  readonly status: number;
  /** Time to the first token; NaN when none came. */
  readonly ttft: number;
  /** Time to the end of the stream; NaN when it did not end well. */
  readonly latency: number;
  /** Output tokens the answer reported (0 when it reported none). */
  readonly tokens: number;
  /** Why the call failed: `status 429`, a transport error code, `incomplete`; absent on success. */
  readonly error?: string;
}

/** The figures of one contender at one load. */
export interface PlacementFigures {
  /** Calls due in the measured window. */
  calls: number;
  /** Failed calls by reason. */
  errors: Record<string, number>;
  errorCount: number;
  /** Time to first token of the calls that got one. */
  ttft: Distribution;
  /** End-to-end time of the calls that finished. */
  latency: Distribution;
  /** Output tokens of the measured calls per second of the measured window: the fleet's useful throughput. */
  tokensPerSecond: number;
}

/**
 * The figures of the calls due in [`fromMs`, `fromMs + durationMs`): calls due in the warm-up
 * before it are left out, since their sessions' earlier turns were never sent.
 */
export function placementFigures(records: readonly CallRecord[], fromMs: number, durationMs: number): PlacementFigures {
  const measured = records.filter((r) => r.at >= fromMs && r.at < fromMs + durationMs);
  const errors: Record<string, number> = {};
  let tokens = 0;
  for (const r of measured) {
    tokens += r.tokens;
    if (r.error !== undefined) errors[r.error] = (errors[r.error] ?? 0) + 1;
  }
  return {
    calls: measured.length,
    errors,
    errorCount: Object.values(errors).reduce((a, b) => a + b, 0),
    ttft: distribution(measured.filter((r) => Number.isFinite(r.ttft)).map((r) => r.ttft)),
    latency: distribution(measured.filter((r) => r.error === undefined).map((r) => r.latency)),
    tokensPerSecond: perSecond(tokens, durationMs),
  };
}

/** What a trace is replayed against: sends one call, records it, never rejects. */
export interface CallTarget {
  readonly name: string;
  call(
    shape: WorkloadShape,
    call: TraceCall,
    due: number,
    timeoutMs: number,
    signal?: AbortSignal,
  ): Promise<CallRecord>;
  close(): Promise<void>;
}

/** A target a trace can be replayed against: an OpenAI-compatible base URL on this machine. */
export class TraceTarget implements CallTarget {
  readonly name: string;
  readonly #pool: Pool;
  readonly #path: string;

  /** @throws {BenchTargetError} unless `baseUrl` is http on 127.0.0.1 or localhost. */
  constructor(name: string, baseUrl: string, connections: number) {
    const url = assertLocalTarget(new URL('/v1/chat/completions', baseUrl));
    this.name = name;
    this.#path = url.pathname;
    this.#pool = new Pool(url.origin, { connections, pipelining: 1, keepAliveTimeout: 30_000 });
  }

  /** Sends one call and records it; never rejects. `due` is the call's due time on performance.now()'s clock. */
  async call(
    shape: WorkloadShape,
    call: TraceCall,
    due: number,
    timeoutMs: number,
    signal?: AbortSignal,
  ): Promise<CallRecord> {
    const base = { at: call.at, turn: call.turn };
    const failed = (status: number, error: string, ttft = Number.NaN): CallRecord => ({
      ...base,
      status,
      ttft,
      latency: Number.NaN,
      tokens: 0,
      error,
    });
    try {
      const res = await this.#pool.request({
        method: 'POST',
        path: this.#path,
        headers: { 'content-type': 'application/json' },
        body: bodyOf(shape, call),
        headersTimeout: timeoutMs,
        bodyTimeout: timeoutMs,
        ...(signal ? { signal } : {}),
      });
      if (res.statusCode !== 200) {
        await res.body.dump().catch(() => undefined);
        return failed(res.statusCode, `status ${res.statusCode}`);
      }
      let ttft = Number.NaN;
      // Only the end of the stream is kept: usage and [DONE] are in the last events.
      let tail = '';
      const decoder = new TextDecoder();
      for await (const chunk of res.body) {
        if (Number.isNaN(ttft)) ttft = performance.now() - due;
        tail = (tail + decoder.decode(chunk as Uint8Array, { stream: true })).slice(-1024);
      }
      const latency = performance.now() - due;
      const usage = /"completion_tokens":(\d+)/.exec(tail.slice(tail.lastIndexOf('"usage"')));
      if (!tail.includes('data: [DONE]') || !usage) return failed(200, 'incomplete', ttft);
      return { ...base, status: 200, ttft, latency, tokens: Number(usage[1]) };
    } catch (error) {
      const e = error as { code?: unknown; name?: unknown };
      return failed(0, typeof e.code === 'string' ? e.code : typeof e.name === 'string' ? e.name : 'unknown');
    }
  }

  /** Closes the connections. */
  close(): Promise<void> {
    return this.#pool.close();
  }
}

/**
 * Several targets taken in turn, one call each, as an L4 balancer in front of several gateways
 * spreads connections: each target sees every n-th call.
 */
export class RotatingTarget implements CallTarget {
  readonly name: string;
  readonly #targets: readonly TraceTarget[];
  #next = 0;

  /** @throws {BenchTargetError} unless every URL is http on 127.0.0.1 or localhost. */
  constructor(name: string, baseUrls: readonly string[], connections: number) {
    if (baseUrls.length === 0) throw new RangeError(`${name}: a rotating target needs at least one URL`);
    this.name = name;
    const each = Math.max(1, Math.ceil(connections / baseUrls.length));
    this.#targets = baseUrls.map((url, i) => new TraceTarget(`${name} ${i + 1}`, url, each));
  }

  /** Sends `call` to the next target in turn. */
  call(...args: Parameters<CallTarget['call']>): Promise<CallRecord> {
    const target = this.#targets[this.#next]!;
    this.#next = (this.#next + 1) % this.#targets.length;
    return target.call(...args);
  }

  /** Closes every target's connections. */
  async close(): Promise<void> {
    await Promise.all(this.#targets.map((t) => t.close()));
  }
}

/** Bounds of one replay. */
export interface ReplayOptions {
  /** Per-call limit on the wait for headers and between body chunks, ms. */
  readonly timeoutMs: number;
  /** Calls allowed to wait for an answer at once; a call due past that is recorded as `dropped`. */
  readonly maxInFlight: number;
  readonly signal?: AbortSignal;
}

/**
 * Sends every call of `calls` at its due time and resolves with every record once the last
 * answer is in. Due calls leave in batches on each timer tick (Node timers have a 1 ms floor).
 */
export function replay(
  target: CallTarget,
  shape: WorkloadShape,
  calls: Iterable<TraceCall>,
  options: ReplayOptions,
): Promise<CallRecord[]> {
  const records: CallRecord[] = [];
  const iterator = calls[Symbol.iterator]();
  const start = performance.now();
  let next = iterator.next();
  let inFlight = 0;
  let done = false;
  return new Promise<CallRecord[]>((resolve) => {
    const finishIfDone = (): void => {
      if (done && inFlight === 0) resolve(records.sort((a, b) => a.at - b.at));
    };
    const tick = (): void => {
      const now = performance.now();
      while (!next.done && start + next.value.at <= now && !options.signal?.aborted) {
        const call = next.value;
        next = iterator.next();
        if (inFlight >= options.maxInFlight) {
          records.push({
            at: call.at,
            turn: call.turn,
            status: 0,
            ttft: Number.NaN,
            latency: Number.NaN,
            tokens: 0,
            error: 'dropped',
          });
          continue;
        }
        inFlight++;
        void target.call(shape, call, start + call.at, options.timeoutMs, options.signal).then((record) => {
          records.push(record);
          inFlight--;
          finishIfDone();
        });
      }
      if (!next.done && !options.signal?.aborted) {
        setTimeout(tick, Math.max(0, start + next.value.at - performance.now()));
      } else {
        done = true;
        finishIfDone();
      }
    };
    tick();
  });
}
