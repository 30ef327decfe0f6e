/**
 * The serverless scenario's load: a bursty trace (quiet, a burst, quiet) of streamed chat calls
 * sent open-loop, each timed to its first token and its end, with the gateway's cold-start
 * header read; and a sampler of the deployment's replicas from the gateway's status route.
 */
import { performance } from 'node:perf_hooks';
import { setTimeout as delay } from 'node:timers/promises';
import { Pool } from 'undici';
import { assertLocalTarget } from '../load.ts';
import { SERVERLESS_FLEET, SERVERLESS_MODEL } from './fleet.ts';

/** One phase of the trace: `rate` calls a second for `ms`. */
export interface Phase {
  readonly name: string;
  readonly ms: number;
  readonly rate: number;
}

/**
 * The trace for a run of `durationMs` at a burst of `rate` calls/s: a quarter quiet (the
 * deployment sits at zero), a quarter of burst, half quiet (it scales back down to zero).
 */
export function burstTrace(durationMs: number, rate: number): Phase[] {
  const quarter = Math.round(durationMs / 4);
  return [
    { name: 'quiet', ms: quarter, rate: 0 },
    { name: 'burst', ms: quarter, rate },
    { name: 'quiet', ms: durationMs - 2 * quarter, rate: 0 },
  ];
}

/** One call as the client saw it; times in ms from the trace's start. */
export interface TracedCall {
  readonly sentMs: number;
  readonly status: number;
  /** Time to the first streamed chunk, ms; undefined when none came. */
  readonly ttftMs?: number;
  readonly totalMs: number;
  /** The gateway's `sluice-cold-start`: ms the call waited for a replica to start. */
  readonly coldStartMs?: number;
  /** Why the call failed (an error code, `stream-error`, or the client's error); undefined when it succeeded. */
  readonly error?: string;
}

/** Longest wait for a call: the engine's start and a full stream, with room. */
const CALL_TIMEOUT_MS = 60_000;

/**
 * Sends the trace and resolves with every call once each has ended. Calls go at their planned
 * times whatever the earlier ones are doing (open loop), bounded by the trace's total.
 */
export async function runTrace(
  gatewayUrl: string,
  phases: readonly Phase[],
  signal?: AbortSignal,
): Promise<{ calls: TracedCall[]; startedAt: number }> {
  const url = assertLocalTarget(gatewayUrl);
  const pool = new Pool(url.origin, { connections: 256, keepAliveTimeout: 30_000 });
  const startedAt = performance.now();
  const pending: Promise<TracedCall>[] = [];
  try {
    let at = 0;
    for (const phase of phases) {
      if (phase.rate > 0) {
        const every = 1000 / phase.rate;
        for (let t = 0; t < phase.ms; t += every) {
          const due = startedAt + at + t;
          const wait = due - performance.now();
          if (wait > 0) await delay(wait, undefined, signal ? { signal } : {});
          pending.push(oneCall(pool, startedAt, pending.length));
        }
      }
      at += phase.ms;
      const wait = startedAt + at - performance.now();
      if (wait > 0) await delay(wait, undefined, signal ? { signal } : {});
    }
    return { calls: await Promise.all(pending), startedAt };
  } finally {
    await Promise.allSettled(pending);
    await pool.close();
  }
}

async function oneCall(pool: Pool, origin: number, seq: number): Promise<TracedCall> {
  const sent = performance.now();
  const since = (): number => performance.now() - sent;
  const body = JSON.stringify({
    model: SERVERLESS_MODEL,
    messages: [{ role: 'user', content: `serverless call ${seq}` }],
    max_tokens: SERVERLESS_FLEET.outputTokens,
    stream: true,
  });
  try {
    const res = await pool.request({
      method: 'POST',
      path: '/v1/chat/completions',
      headers: { 'content-type': 'application/json' },
      body,
      headersTimeout: CALL_TIMEOUT_MS,
      bodyTimeout: CALL_TIMEOUT_MS,
    });
    const cold = res.headers['sluice-cold-start'];
    const coldStartMs = cold === undefined ? undefined : Number(cold);
    let ttftMs: number | undefined;
    let text = '';
    for await (const chunk of res.body) {
      ttftMs ??= since();
      if (text.length < 65_536) text += (chunk as Buffer).toString('utf8');
    }
    const base = {
      sentMs: sent - origin,
      status: res.statusCode,
      totalMs: since(),
      ...(ttftMs === undefined ? {} : { ttftMs }),
      ...(coldStartMs === undefined || Number.isNaN(coldStartMs) ? {} : { coldStartMs }),
    };
    if (res.statusCode !== 200)
      return { ...base, error: /"code"\s*:\s*"([^"]+)"/.exec(text)?.[1] ?? `status ${res.statusCode}` };
    if (/^data: \{"error"/m.test(text)) return { ...base, error: 'stream-error' };
    return base;
  } catch (error) {
    return { sentMs: sent - origin, status: 0, totalMs: since(), error: (error as Error).message };
  }
}

/** One reading of the deployment's replicas, ms from the trace's start. */
export interface ReplicaSample {
  readonly ms: number;
  readonly wanted: number;
  readonly starting: number;
  readonly ready: number;
  readonly draining: number;
}

/** Reads GET /v1/deployments/{model} every `everyMs` until stopped; a failed read is skipped. */
export function sampleReplicas(
  gatewayUrl: string,
  operatorToken: string,
  origin: () => number,
  everyMs: number,
): { samples: ReplicaSample[]; stop(): Promise<void> } {
  const url = `${assertLocalTarget(gatewayUrl).origin}/v1/deployments/${encodeURIComponent(SERVERLESS_MODEL)}`;
  const samples: ReplicaSample[] = [];
  let stopped = false;
  const loop = (async () => {
    while (!stopped) {
      const at = performance.now();
      try {
        const res = await fetch(url, {
          headers: { authorization: `Bearer ${operatorToken}` },
          signal: AbortSignal.timeout(2_000),
        });
        if (res.ok) {
          const { status: s } = (await res.json()) as { status: Omit<ReplicaSample, 'ms'> };
          samples.push({
            ms: at - origin(),
            wanted: s.wanted,
            starting: s.starting,
            ready: s.ready,
            draining: s.draining,
          });
        }
      } catch {
        // A missed reading leaves a gap; the integral spans it from the reading before.
      }
      await delay(Math.max(0, everyMs - (performance.now() - at)));
    }
  })();
  return {
    samples,
    stop: async () => {
      stopped = true;
      await loop;
    },
  };
}
