/**
 * The feed scenario: what the cache feed (a runner telling a gateway which blocks its engine
 * stored and removed, with its load) costs on the wire, per runner. Real processes on 127.0.0.1
 * (feed-fleet.ts): a simulated engine publishing KV events, a runner subscribing and feeding a
 * gateway that places with `kv-aware`.
 *
 * Three phases of `--duration` each: idle (keep-alives only), then chat calls at 10 and at 100
 * calls/s, open loop. Each call is a tenant's shared context (one of {@link TENANTS}, primed
 * before the phases) and a query new to the engine, so every call stores the query's blocks. The
 * figures come from both ends' own counters, read before and after each phase: the gateway's
 * `sluice_cache_feed_bytes_total` and `sluice_cache_feed_updates_total` for the runner, and the
 * runner's `sluice_runner_cache_feed_bytes_total` and `..._updates_total`.
 */
import { loadavg } from 'node:os';
import { setTimeout as delay } from 'node:timers/promises';
import { PromptMapper } from '../../../gateway/index.ts';
import { seededRandom } from '../../../placer/index.ts';
import { barChart } from '../bar-chart.ts';
import { sendPaced, startFeedFleet } from '../feed-fleet.ts';
import type { FeedCounters, FeedFleet, PhaseCalls } from '../feed-fleet.ts';
import { formatTable, reportHead, writeResults } from '../report.ts';
import { benchScenario } from '../scenario.ts';
import type { Scenario } from '../types.ts';

/** Tenants whose contexts the calls share. */
export const TENANTS = 8;
/** Words of each tenant's shared context. */
const CONTEXT_WORDS = 900;
/** Words of each call's new query. */
const QUERY_WORDS = 60;
/** Call rates of the loaded phases, calls/s. */
export const FEED_RATES: readonly number[] = Object.freeze([10, 100]);

/**
 * The engine: the h100-8b profile's prefill and decode timings, with 8 output tokens per call and
 * 64 sequences at once, so one engine keeps up with 100 calls/s (about 15 calls in flight).
 */
export const FEED_ENGINE_FLAGS: readonly string[] = Object.freeze([
  '--profile',
  'h100-8b',
  '--output-tokens',
  '8',
  '--max-num-seqs',
  '64',
  '--max-queue',
  '256',
]);

/** After the last answer, time for the runner's last update to reach the gateway before the counters are read, ms. */
const SETTLE_MS = 500;

/** One phase's figures, per runner. */
export interface FeedPhase {
  phase: string;
  /** Target calls/s; 0 when idle. */
  rate: number;
  calls: PhaseCalls;
  /** Blocks of the calls' prompts new to the engine (the query's, and a context's the first time). */
  newBlocks: number;
  /** The measured window, s. */
  seconds: number;
  gateway: WireFigures;
  runner: WireFigures;
}

/** One end's view of the feed over a phase. */
export interface WireFigures {
  bytes: number;
  updates: number;
  bytesPerSecond: number;
  updatesPerSecond: number;
  /** Undefined when no call was answered. */
  bytesPerCall: number | undefined;
  /** Undefined when no new block was stored. */
  bytesPerNewBlock: number | undefined;
}

/** The announcement the runner makes for the simulated engine, for counting the prompts' blocks. */
const SIM_ANNOUNCEMENT = Object.freeze({
  tokenizer: 'sluice-sim',
  scheme: Object.freeze({ algorithm: 'sha256_cbor' as const, seed: '0', blockSize: 16 }),
  events: true,
});

const WORDS = (
  'the gateway places each call on a runner whose engine holds the longest prefix of its prompt ' +
  'blocks of sixteen tokens are hashed in a chain and a runner tells every gateway which blocks ' +
  'its engine stored or removed fleet engine cache tenant query answer context'
).split(' ');

/** The calls' prompts, and how many of their blocks are new to the engine. */
export class FeedPrompts {
  readonly #mapper = new PromptMapper({ prefixCacheEntries: 0 });
  readonly #seen = new Set<string>();
  readonly #contexts: string[];
  #next = 0;

  constructor(seed = 1) {
    const random = seededRandom(seed);
    this.#contexts = Array.from({ length: TENANTS }, (_, t) => `Tenant ${t}. ${words(random, CONTEXT_WORDS)}`);
  }

  /** Tokens of a call's prompt (the same for every call, within a few). */
  promptTokens(): number {
    return (
      this.#mapper.blocksOf({ route: 'chat', messages: this.#messages(0, 0) }, SIM_ANNOUNCEMENT)?.promptTokens ?? 0
    );
  }

  /** The messages of the next call, to tenant `tenant`, and its blocks new to the engine. */
  next(tenant: number): { messages: readonly unknown[]; newBlocks: number } {
    const messages = this.#messages(tenant % TENANTS, (this.#next += 1));
    const keys = this.#mapper.blocksOf({ route: 'chat', messages }, SIM_ANNOUNCEMENT)?.keys ?? [];
    let newBlocks = 0;
    for (const key of keys) {
      if (this.#seen.has(key)) continue;
      this.#seen.add(key);
      newBlocks += 1;
    }
    return { messages, newBlocks };
  }

  #messages(tenant: number, call: number): unknown[] {
    return [
      { role: 'system', content: this.#contexts[tenant] },
      { role: 'user', content: `Question ${call}: ${words(seededRandom(1_000_000 + call), QUERY_WORDS)}` },
    ];
  }
}

function words(random: () => number, n: number): string {
  return Array.from({ length: n }, () => WORDS[Math.floor(random() * WORDS.length)]).join(' ');
}

/** A phase to measure: a name, a rate (0: idle) and its length, ms. */
export interface PhasePlan {
  phase: string;
  rate: number;
  durationMs: number;
  signal?: AbortSignal;
}

/** Runs one phase on `fleet` and returns its figures from both ends' counters. */
export async function measurePhase(
  fleet: Pick<FeedFleet, 'chat' | 'counters'>,
  prompts: FeedPrompts,
  plan: PhasePlan,
): Promise<FeedPhase> {
  const before = await fleet.counters();
  let newBlocks = 0;
  let calls: PhaseCalls = { sent: 0, ok: 0, failed: 0 };
  if (plan.rate === 0) await delay(plan.durationMs, undefined, plan.signal ? { signal: plan.signal } : {});
  else {
    const total = Math.floor((plan.rate * plan.durationMs) / 1000);
    calls = await sendPaced(
      fleet,
      { rate: plan.rate, total, maxInFlight: 1_000, ...(plan.signal ? { signal: plan.signal } : {}) },
      (i) => {
        const call = prompts.next(i);
        newBlocks += call.newBlocks;
        return call.messages;
      },
    );
    await delay(SETTLE_MS);
  }
  const after = await fleet.counters();
  const seconds = (after.at - before.at) / 1000;
  const figures = (bytes: number, updates: number): WireFigures => ({
    bytes,
    updates,
    bytesPerSecond: bytes / seconds,
    updatesPerSecond: updates / seconds,
    bytesPerCall: calls.ok > 0 ? bytes / calls.ok : undefined,
    bytesPerNewBlock: newBlocks > 0 ? bytes / newBlocks : undefined,
  });
  const delta = (field: keyof Omit<FeedCounters, 'at'>) => after[field] - before[field];
  return {
    phase: plan.phase,
    rate: plan.rate,
    calls,
    newBlocks,
    seconds,
    gateway: figures(delta('gatewayBytes'), delta('gatewayUpdates')),
    runner: figures(delta('runnerBytes'), delta('runnerUpdates')),
  };
}

/** The `feed` scenario. */
export const feed: Scenario = benchScenario(
  "the cache feed's bytes and updates per second per runner, idle and at 10 and 100 chat calls/s (real processes, kv-aware)",
  async (options, { progress, write, startedAt, machine }, ctx) => {
    const fleet = await startFeedFleet({
      env: ctx.env,
      startService: ctx.startService,
      logLevel: options.logLevel,
      engineFlags: FEED_ENGINE_FLAGS,
      slots: 64,
    });
    const phases: FeedPhase[] = [];
    const prompts = new FeedPrompts();
    try {
      // Each tenant's context stored once, and the feed live (the engine's events heard).
      for (let t = 0; t < TENANTS; t++) await fleet.chat(prompts.next(t).messages);
      await fleet.untilKnown();
      const plans: PhasePlan[] = [
        { phase: 'idle', rate: 0, durationMs: options.duration },
        ...FEED_RATES.map((rate) => ({ phase: `${rate} calls/s`, rate, durationMs: options.duration })),
      ];
      for (const plan of plans) {
        if (ctx.signal?.aborted) throw new Error('benchmark interrupted');
        progress(`feed: ${plan.phase} for ${plan.durationMs / 1000} s\n`);
        phases.push(await measurePhase(fleet, prompts, { ...plan, ...(ctx.signal ? { signal: ctx.signal } : {}) }));
      }
    } finally {
      await fleet.stop();
    }
    const loadAfter = loadavg().map((l) => Math.round(l * 100) / 100);
    const promptTokens = prompts.promptTokens();
    write(
      `\nCache feed per runner (prompts of ${promptTokens} tokens: a tenant's context of ${CONTEXT_WORDS} words, one of ${TENANTS}, and a new query of ${QUERY_WORDS})\n` +
        `${formatTable(HEADER, phases.map(rowOf))}\n` +
        `load average ${machine.loadAverage.join(' ')} at start, ${loadAfter.join(' ')} at end\n`,
    );
    const svg = barChart(
      [
        { title: 'bytes/s', groups: phases.map((p) => ({ label: p.phase, values: [p.gateway.bytesPerSecond] })) },
        { title: 'updates/s', groups: phases.map((p) => ({ label: p.phase, values: [p.gateway.updatesPerSecond] })) },
      ],
      [{ name: 'received by the gateway', color: '#4c78a8' }],
      {
        title: 'Cache feed per runner',
        subtitle: `${machine.cpuModel}, ${startedAt.toISOString()}`,
        axis: 'per second',
        format: (v) => v.toFixed(0),
      },
    );
    const report = {
      ...reportHead('feed', startedAt, machine),
      loadAverageAtEnd: loadAfter,
      engineFlags: FEED_ENGINE_FLAGS,
      prompt: { promptTokens, contextWords: CONTEXT_WORDS, queryWords: QUERY_WORDS, tenants: TENANTS },
      phases,
    };
    return { files: await writeResults(ctx, options.out, 'feed', startedAt, report, svg, write) };
  },
);

const HEADER = [
  'phase',
  'calls ok',
  'failed',
  'new blocks',
  'window s',
  'gw B/s',
  'gw upd/s',
  'runner B/s',
  'runner upd/s',
  'B/call',
  'B/new block',
];

function rowOf(p: FeedPhase): string[] {
  const n = (v: number | undefined, digits = 0) => (v === undefined ? '-' : v.toFixed(digits));
  return [
    p.phase,
    String(p.calls.ok),
    String(p.calls.failed),
    String(p.newBlocks),
    n(p.seconds, 1),
    n(p.gateway.bytesPerSecond),
    n(p.gateway.updatesPerSecond, 1),
    n(p.runner.bytesPerSecond),
    n(p.runner.updatesPerSecond, 1),
    n(p.gateway.bytesPerCall),
    n(p.gateway.bytesPerNewBlock, 1),
  ];
}
