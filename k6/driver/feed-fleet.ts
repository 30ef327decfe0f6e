/**
 * The fleet the feed scenario measures, as real `sluice` processes on 127.0.0.1 wired as
 * `sluice up` wires them: a simulated engine publishing its KV-cache events on an ipc socket in a
 * scratch folder, a runner in front of it subscribing to them and registered (with a runner token
 * of the run's) with a gateway placing with `kv-aware`; and what reads the feed's counters from
 * both ends and sends the chat calls.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { Pool } from 'undici';
import { KV_HASH_SEED, kvEventSockets, runnerArgs, simEngineArgs } from '../../placer/index.ts';
import type { ChildService } from '../../placer/index.ts';
import { openLoopSchedule } from './load.ts';
import { startGroup } from './stack.ts';
import type { FleetBase } from './stack.ts';

/** The model the fleet's engine serves. */
export const FEED_MODEL = 'feed-model';

/** The runner's id, as the gateway's counters name it. */
export const FEED_RUNNER = 'feed-runner';

/** What {@link startFeedFleet} started. */
export interface FeedFleet {
  engine: ChildService;
  runner: ChildService;
  gateway: ChildService;
  /** Reads both ends' feed counters now. */
  counters(): Promise<FeedCounters>;
  /** Sends one chat call through the gateway; resolves with its status (0 when it failed to connect). */
  chat(messages: readonly unknown[]): Promise<number>;
  /** Resolves once the gateway counts the runner's cache known (its engine's events heard, after a first call). */
  untilKnown(): Promise<void>;
  stop(): Promise<void>;
}

/** How to start the fleet. */
export interface FeedFleetOptions extends FleetBase {
  /** The simulated engine's flags (profile, timings, sequences). */
  engineFlags: readonly string[];
  /** The runner's slots. */
  slots: number;
}

/** The feed's counters at one moment, from the gateway's /metrics and the runner's. */
export interface FeedCounters {
  /** sluice_cache_feed_bytes_total for the runner. */
  gatewayBytes: number;
  /** sluice_cache_feed_updates_total for the runner, every result. */
  gatewayUpdates: number;
  /** sluice_runner_cache_feed_bytes_total, every gateway. */
  runnerBytes: number;
  /** sluice_runner_cache_feed_updates_total, every gateway. */
  runnerUpdates: number;
  /** performance.now() when read. */
  at: number;
}

/** Longest wait for the runner's feed to reach the gateway, and to be live there, ms. */
const JOIN_TIMEOUT_MS = 30_000;

/** Starts the fleet and waits until the runner's feed reaches the gateway; on failure stops what started. */
export function startFeedFleet(options: FeedFleetOptions): Promise<FeedFleet> {
  return startGroup(options, async ({ env, level, group, startService }) => {
    const sockets = await kvEventSockets('sluice-bench-feed-');
    group.add({ stop: () => sockets.remove() });
    const kvEvents = sockets.endpoint('engine');
    const engine = group.add(
      await startService(
        simEngineArgs({ id: 'feed-sim', kvEvents }, ['--model', FEED_MODEL, ...options.engineFlags, ...level]),
        { env: { ...env, PYTHONHASHSEED: KV_HASH_SEED } },
      ),
    );
    // A runner token and call secret of this run's, in the environment (never argv).
    const secrets = {
      SLUICE_RUNNER_TOKEN: randomBytes(24).toString('base64url'),
      SLUICE_CALL_SECRET: randomBytes(32).toString('base64url'),
    };
    const gateway = group.add(
      await startService(
        ['gateway', '--port', '0', '--placer', 'kv-aware', '--runner-networks', '127.0.0.0/8', ...level],
        { env: { ...env, ...secrets } },
      ),
    );
    const runner = group.add(
      await startService(
        runnerArgs({ engine: engine.url, id: FEED_RUNNER, gateway: gateway.url, kvEvents }, [
          '--slots',
          String(options.slots),
          ...level,
        ]),
        { env: { ...env, ...secrets } },
      ),
    );
    const pool = group.add(poolStopper(new Pool(new URL(gateway.url).origin, { connections: 256 })));
    const token = env.SLUICE_OPERATOR_TOKEN ?? '';
    const counters = () => readCounters(gateway.url, runner.url, token);
    // Registered, and its feed heard: the engine's events make it live with the first call.
    await untilMetric(gateway.url, token, 'sluice_cache_feed_updates_total', (n) => n > 0);
    return {
      engine,
      runner,
      gateway,
      counters,
      chat: (messages: readonly unknown[]) => chat(pool.pool, messages),
      untilKnown: () => untilMetric(gateway.url, token, 'sluice_cache_feed_known', (n) => n === 1),
    };
  });
}

function poolStopper(pool: Pool): { pool: Pool; stop(): Promise<void> } {
  return { pool, stop: () => pool.close() };
}

/**
 * Resolves once the gateway's counter for the runner `name` (a metric and a label test) passes
 * `test`; throws with the feed's lines of the gateway's /metrics after {@link JOIN_TIMEOUT_MS}.
 */
async function untilMetric(gatewayUrl: string, token: string, name: string, test: (n: number) => boolean) {
  const until = Date.now() + JOIN_TIMEOUT_MS;
  let text = '';
  while (Date.now() < until) {
    text = await metricsText(gatewayUrl, token).catch((error: Error) => error.message);
    if (test(sumOf(text, name, `runner="${FEED_RUNNER}"`))) return;
    await delay(50);
  }
  const feedLines = text.split('\n').filter((line) => line.startsWith('sluice_cache_feed'));
  throw new Error(`${name} did not move at the gateway within ${JOIN_TIMEOUT_MS} ms\n${feedLines.join('\n')}`);
}

async function readCounters(gatewayUrl: string, runnerUrl: string, token: string): Promise<FeedCounters> {
  const [gw, rn] = await Promise.all([metricsText(gatewayUrl, token), metricsText(runnerUrl, '')]);
  const runner = `runner="${FEED_RUNNER}"`;
  return {
    gatewayBytes: sumOf(gw, 'sluice_cache_feed_bytes_total', runner),
    gatewayUpdates: sumOf(gw, 'sluice_cache_feed_updates_total', runner),
    runnerBytes: sumOf(rn, 'sluice_runner_cache_feed_bytes_total'),
    runnerUpdates: sumOf(rn, 'sluice_runner_cache_feed_updates_total'),
    at: performance.now(),
  };
}

async function metricsText(base: string, token: string): Promise<string> {
  const res = await fetch(new URL('/metrics', base), {
    headers: token === '' ? {} : { authorization: `Bearer ${token}` },
  });
  if (!res.ok) throw new Error(`GET ${base}/metrics answered ${res.status}`);
  return res.text();
}

/**
 * The sum of every sample of metric `name` in Prometheus text `text` whose labels contain
 * `label` (any sample without it).
 */
export function sumOf(text: string, name: string, label?: string): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(name)) continue;
    const rest = line.slice(name.length);
    if (rest[0] !== '{' && rest[0] !== ' ') continue;
    if (label !== undefined && !rest.includes(label)) continue;
    sum += Number(rest.slice(rest.lastIndexOf(' ') + 1)) || 0;
  }
  return sum;
}

/** Output tokens each call asks for: few, so one engine keeps up, and what the feed carries is the prompt's blocks. */
const MAX_TOKENS = 8;

async function chat(pool: Pool, messages: readonly unknown[]): Promise<number> {
  try {
    const res = await pool.request({
      method: 'POST',
      path: '/v1/chat/completions',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: FEED_MODEL, messages, max_tokens: MAX_TOKENS }),
    });
    await res.body.dump();
    return res.statusCode;
  } catch {
    return 0;
  }
}

/** What one load phase sent. */
export interface PhaseCalls {
  sent: number;
  ok: number;
  failed: number;
}

/**
 * Sends `total` calls at `rate` calls/s, open loop (at most `maxInFlight` waiting; past that an
 * arrival is dropped and counted failed), call i's messages `messagesOf(i)`.
 */
export async function sendPaced(
  fleet: Pick<FeedFleet, 'chat'>,
  plan: { rate: number; total: number; maxInFlight: number; signal?: AbortSignal },
  messagesOf: (i: number) => readonly unknown[],
): Promise<PhaseCalls> {
  const calls: PhaseCalls = { sent: 0, ok: 0, failed: 0 };
  const schedule = openLoopSchedule(
    { ...plan, start: performance.now() },
    {
      send: async (seq) => {
        calls.sent++;
        const status = await fleet.chat(messagesOf(seq));
        if (status === 200) calls.ok++;
        else calls.failed++;
      },
      drop: () => void calls.failed++,
    },
  );
  await schedule.done;
  return calls;
}
