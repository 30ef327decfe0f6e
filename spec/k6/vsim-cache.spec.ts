import { describe, expect, it } from 'vitest';
import { PrefixCache, blockHashes } from '../../runner/engines/sim/prefix-cache.ts';
import { H100_8B_PROFILE } from '../../runner/engines/sim/profiles.ts';
import type { SimProfile } from '../../runner/engines/sim/profiles.ts';
import { seededRandom } from '../../placer/kernel/index.ts';
import { BlockRunCache } from '../../k6/driver/vsim/block-cache.ts';
import { PendingPlacements, liveTruth, mirroredTruth, promptCacheOf } from '../../k6/driver/vsim/cache-truth.ts';
import { VirtualEngine } from '../../k6/driver/vsim/engine.ts';
import { EventQueue } from '../../k6/driver/vsim/event-queue.ts';
import { ORACLE, SIM_CONTENDERS, feedLoads, simulateRun } from '../../k6/driver/vsim/simulation.ts';
import type { SimRunSpec } from '../../k6/driver/vsim/simulation.ts';
import { FleetSlots, RunnerSlots, SimRunner } from '../../k6/driver/vsim/sluice.ts';
import { promptBlocksOf } from '../../k6/driver/vsim/trace.ts';
import type { PromptBlocks } from '../../k6/driver/vsim/trace.ts';
import {
  CACHE_PRESSURE,
  cacheDemandOf,
  cachePressureWorkload,
  promptTokensOf,
  traceCalls,
} from '../../k6/driver/workload.ts';

const STEADY: SimProfile = Object.freeze({ ...H100_8B_PROFILE, prefillJitterStdMs: 0, itlJitterStdMs: 0 });
const { cacheBlocks } = H100_8B_PROFILE;

describe('the cache-pressure workload', () => {
  it("sizes its tenants so that their contexts are the demanded share of the fleet's cache", () => {
    for (const engines of [4, 64, 1_000]) {
      const shape = cachePressureWorkload(engines, cacheBlocks);
      expect(cacheDemandOf(shape, engines, cacheBlocks)).toBeCloseTo(0.73, 2);
    }
    // 0.73 x 64 x 27,000 blocks / 375 blocks per context.
    expect(cachePressureWorkload(64, cacheBlocks).systemPrompts).toBe(3_364);
    expect(cachePressureWorkload(1_000, cacheBlocks).systemPrompts).toBe(52_560);
    expect(cacheDemandOf(cachePressureWorkload(64, cacheBlocks, 0.6), 64, cacheBlocks)).toBeCloseTo(0.6, 2);
  });

  it('sends one query of 1,200 tokens on a 6,000-token context per session', () => {
    const shape = cachePressureWorkload(64, cacheBlocks);
    expect(shape.turns).toBe(1);
    expect(promptTokensOf(shape, 1)).toEqual({
      total: CACHE_PRESSURE.contextTokens + CACHE_PRESSURE.queryTokens,
      shared: CACHE_PRESSURE.contextTokens,
    });
    const calls = [...traceCalls(shape, { rate: 200, durationMs: 10_000, seed: 1 })];
    expect(new Set(calls.map((c) => c.session)).size).toBe(calls.length);
    // Tenants drawn uniformly: a thousand or so calls over 3,364 tenants repeat few.
    expect(new Set(calls.map((c) => c.system)).size).toBeGreaterThan(calls.length * 0.7);
  });

  it('refuses a demand out of range', () => {
    expect(() => cachePressureWorkload(64, cacheBlocks, 0)).toThrow(RangeError);
    expect(() => cachePressureWorkload(0, cacheBlocks)).toThrow(RangeError);
  });
});

describe('the block-run cache under cache pressure', () => {
  it('holds the same blocks as the live per-block LRU while contexts evict each other', () => {
    // Room for about four of the twelve tenants' contexts with their queries: most inserts evict.
    const shape = cachePressureWorkload(1, 2_000);
    const capacity = 2_000;
    const live = new PrefixCache(capacity);
    const runs = new BlockRunCache(capacity);
    const random = seededRandom(9);
    const hits: [number, number][] = [];
    for (let session = 0; session < 150; session++) {
      // Skewed: low tenants come back often, high ones seldom.
      const system = Math.floor(random() ** 2 * 12);
      const prompt = promptBlocksOf(shape, { at: 0, session, turn: 1, system });
      const { total, shared } = promptTokensOf(shape, 1);
      const tokens = Array.from({ length: total }, (_, i) => (i < shared ? `s${system}t${i}` : `u${session}t${i}`));
      const hashes = blockHashes(tokens);
      hits.push([live.lookup(hashes, prompt.tokens), runs.lookup(prompt)]);
      live.insert(hashes);
      runs.insert(prompt);
      expect(runs.size).toBe(live.size);
    }
    expect(hits.filter(([a, b]) => a !== b)).toEqual([]);
    expect(hits.filter(([a]) => a === 0).length).toBeGreaterThan(20);
    expect(hits.filter(([a]) => a > 0).length).toBeGreaterThan(20);
    expect(runs.totals()).toEqual(live.totals());
    // A copy holds the same blocks in the same recency: fed the same inserts, it stays equal.
    const copy = runs.copy();
    for (let session = 150; session < 170; session++) {
      const prompt = promptBlocksOf(shape, { at: 0, session, turn: 1, system: session % 12 });
      for (let system = 0; system < 12; system++) {
        const probe = promptBlocksOf(shape, { at: 0, session, turn: 1, system });
        expect(copy.holding(probe)).toEqual(runs.holding(probe));
      }
      copy.insert(prompt);
      runs.insert(prompt);
    }
  });
});

describe('shared runner slots', () => {
  it('answers busy to every gateway once all slots hold calls, whichever gateways sent them', () => {
    const queue = new EventQueue<(now: number) => void>();
    const engine = new VirtualEngine(0, STEADY, seededRandom(1), (at, h) => queue.push(at, h));
    const fleet = new FleetSlots();
    const slots = new RunnerSlots(2, fleet);
    const a = new SimRunner('runner-1', 2, engine, fleet, slots);
    const b = new SimRunner('runner-1', 2, engine, fleet, slots);
    expect(fleet.free).toBe(2);
    expect(a.offer().kind).toBe('placed');
    expect(b.offer().kind).toBe('placed');
    expect(a.offer().kind).toBe('busy');
    expect(b.offer().kind).toBe('busy');
    expect(fleet.free).toBe(0);
    // Each gateway counts its own calls; the runner's report counts everyone's.
    expect([a.inFlight, b.inFlight]).toEqual([1, 1]);
    b.probe(5);
    expect(b.load().reported?.running).toBe(2);
    a.finished(0, 10);
    expect([a.free, b.free, fleet.free]).toEqual([1, 1, 1]);
    expect(b.offer().kind).toBe('placed');
  });

  it('never runs more calls on an engine than its runner has slots, with three gateways over capacity', async () => {
    const shape = cachePressureWorkload(4, cacheBlocks);
    const result = await simulateRun(pressureSpec(shape, 'least-loaded', { rate: 40, gateways: 3 }));
    expect(result.engineQueuePeak).toBe(0);
    expect(result.waited).toBeGreaterThan(20);
    expect(result.records.filter((r) => r.status === 429)).toEqual([]);
  });

  it('gives one gateway the same records as a run that names none', async () => {
    const shape = cachePressureWorkload(4, cacheBlocks);
    for (const contender of ['prefix-affinity', 'kv-aware']) {
      const spec = pressureSpec(shape, contender, { rate: 20 });
      const named = await simulateRun({ ...spec, gateways: 1 });
      expect(named.records).toEqual((await simulateRun(spec)).records);
    }
  });
});

describe("runners' loads on their cache feeds", () => {
  it("shows every gateway a runner's load within the feed delay of its change, one report per delay", () => {
    const queue = new EventQueue<(now: number) => void>();
    const schedule = (at: number, h: (now: number) => void) => queue.push(at, h);
    const engine = new VirtualEngine(0, STEADY, seededRandom(1), schedule);
    const fleet = new FleetSlots();
    const slots = new RunnerSlots(4, fleet);
    const views = [0, 1, 2].map(() => new SimRunner('runner-1', 4, engine, fleet, slots));
    const reports: number[] = [];
    const gateways = views.map((view) => ({
      reported(index: number, at: number) {
        expect(index).toBe(0);
        reports.push(at);
        view.probe(at);
      },
    }));
    feedLoads([slots], gateways, { delayMs: 50, schedule, now: () => queue.now });
    const runUntil = (time: number) => {
      while (queue.size > 0 && queue.peekTime() <= time) queue.pop()!(queue.now);
    };
    // The first gateway places two calls at 0 and 10: the others see nothing until 50.
    views[0]!.offer();
    runUntil(10);
    views[0]!.offer();
    runUntil(49);
    expect(views[1]!.load().reported).toBeUndefined();
    runUntil(50);
    expect(reports).toEqual([50, 50, 50]);
    for (const view of views.slice(1))
      expect(view.load()).toMatchObject({ inFlight: 0, reported: { running: 2, at: 50 } });
    // One ends at 70: reported at 120, and not before.
    schedule(70, (now) => views[0]!.finished(0, now));
    runUntil(119);
    expect(views[2]!.load().reported?.running).toBe(2);
    runUntil(120);
    expect(views[2]!.load().reported).toMatchObject({ running: 1, at: 120 });
    expect(reports).toEqual([50, 50, 50, 120, 120, 120]);
    // No change, no report.
    runUntil(1_000);
    expect(reports).toHaveLength(6);
  });

  it('leaves the contenders without cache feeds on their status reports alone', async () => {
    const shape = cachePressureWorkload(4, cacheBlocks);
    const spec = pressureSpec(shape, 'least-loaded', { rate: 40, gateways: 3 });
    const slow = await simulateRun({ ...spec, feedDelayMs: 60_000 });
    expect((await simulateRun({ ...spec, feedDelayMs: 0 })).records).toEqual(slow.records);
  });
});

/** Engines on one event queue, serving `calls`' prompts as they come. */
function enginesServing(count: number, calls: readonly PromptBlocks[], gapMs: number) {
  const queue = new EventQueue<(now: number) => void>();
  const schedule = (at: number, h: (now: number) => void) => queue.push(at, h);
  const small: SimProfile = { ...STEADY, cacheBlocks: 2_000 };
  const engines = Array.from({ length: count }, (_, i) => new VirtualEngine(i, small, seededRandom(i + 1), schedule));
  for (const [i, prompt] of calls.entries()) {
    queue.push(i * gapMs, (now) =>
      engines[i % count]!.submit({ prompt, outputTokens: 4, onFirstToken() {}, onDone() {} }, now),
    );
  }
  return { queue, engines, schedule };
}

describe('cache truth', () => {
  const shape = cachePressureWorkload(2, 2_000);
  const prompts = Array.from({ length: 40 }, (_, i) =>
    promptBlocksOf(shape, { at: 0, session: i, turn: 1, system: i % 7 }),
  );

  it("a mirror fed the engine's inserts 50 ms late holds what the engine held 50 ms before", () => {
    const { queue, engines, schedule } = enginesServing(2, prompts, 40);
    const truth = mirroredTruth(engines, 50, schedule);
    const live = liveTruth(engines);
    const snapshots: { at: number; caches: BlockRunCache[] }[] = [];
    let checked = 0;
    let differed = 0;
    for (let handle = queue.pop(); handle; handle = queue.pop()) {
      handle(queue.now);
      snapshots.push({ at: queue.now, caches: engines.map((e) => e.copyCache()) });
      // The engines' caches as they were at the last event at or before now - 50 ms.
      const before = snapshots.filter((s) => s.at <= queue.now - 50).at(-1);
      if (before === undefined || queue.peekTime() === queue.now) continue;
      for (const prompt of prompts) {
        for (const engine of [0, 1]) {
          expect(truth.holding(engine, prompt)).toEqual(before.caches[engine]!.holding(prompt));
          if (JSON.stringify(truth.holding(engine, prompt)) !== JSON.stringify(live.holding(engine, prompt)))
            differed++;
          checked++;
        }
      }
    }
    expect(checked).toBeGreaterThan(1_000);
    expect(differed).toBeGreaterThan(0);
    // Once the last insert is 50 ms old, the mirror is the live cache.
    for (const prompt of prompts)
      for (const engine of [0, 1]) expect(truth.holding(engine, prompt)).toEqual(live.holding(engine, prompt));
  });

  it('counts a placement as held until the feed reports it stored or the pending time passes', () => {
    const engines = [0, 1].map((i) => new VirtualEngine(i, STEADY, seededRandom(1), () => {}));
    const truth = liveTruth(engines);
    const pending = new PendingPlacements(2_000);
    truth.onStored((prompt) => pending.stored(prompt));
    const [first, second] = prompts.filter((p) => p.system === 0);
    const ids = ['runner-1', 'runner-2'];
    expect(promptCacheOf(second!, truth, pending, ids, 0).holders.size).toBe(0);
    pending.add(1, first!, 0);
    // The same context: all of it, in whole blocks, counts on runner-2.
    expect([...promptCacheOf(second!, truth, pending, ids, 10).holders]).toEqual([['runner-2', 6_000]]);
    expect(promptCacheOf(second!, truth, pending, ids, 2_000).holders.size).toBe(0);
    pending.add(1, first!, 3_000);
    engines[1]!.warm([first!]);
    // warm() tells no listener: the pending entry stands until the feed reports the prompt.
    expect(promptCacheOf(second!, truth, pending, ids, 3_010).holders.get('runner-2')).toBe(6_000);
    pending.stored(first!);
    expect(promptCacheOf(second!, truth, pending, ids, 3_010).holders.get('runner-2')).toBe(6_000);
    expect(promptCacheOf(second!, truth, new PendingPlacements(2_000), ids, 9_000).holders.get('runner-2')).toBe(6_000);
  });
});

describe('kv-aware against the oracle', () => {
  it('is a contender', () => {
    expect(SIM_CONTENDERS).toContain(ORACLE);
  });

  it.each([1, 3])('gives the same records as the oracle with no feed delay, %i gateways', async (gateways) => {
    const shape = cachePressureWorkload(4, cacheBlocks);
    const spec = pressureSpec(shape, 'kv-aware', { rate: 16, gateways, feedDelayMs: 0 });
    const feed = await simulateRun(spec);
    const oracle = await simulateRun({ ...spec, contender: ORACLE });
    expect(feed.records.length).toBeGreaterThan(400);
    expect(feed.measuredHitShare).toBeGreaterThan(0.5);
    expect(feed.records).toEqual(oracle.records);
    // A feed 2 s late is not the oracle: it places some calls elsewhere.
    const late = await simulateRun({ ...spec, feedDelayMs: 2_000, cachePendingMs: 0 });
    expect(late.records).not.toEqual(oracle.records);
  });

  it('checks itself: the oracle predicts what the engines find, a late feed under-predicts', async () => {
    const shape = cachePressureWorkload(4, cacheBlocks);
    // Above this fleet's capacity, so contexts evict each other and move between engines.
    const spec = pressureSpec(shape, ORACLE, { rate: 20 });
    const oracle = (await simulateRun(spec)).cacheChecks!;
    expect(oracle.calls).toBeGreaterThan(200);
    expect(oracle.reportedTokens).toBeGreaterThan(0);
    // Live truth: what was predicted is what the engine found, but for blocks evicted between
    // placement and prefill (and counted by the pending rule); it never finds more than it was told.
    expect((oracle.overTokens + oracle.underTokens) / oracle.reportedTokens).toBeLessThan(0.05);
    expect(oracle.underTokens / oracle.reportedTokens).toBeLessThan(0.005);
    // A feed 2 s late, with no pending placements: engines hold contexts the gateway has not heard of.
    const late = (await simulateRun({ ...spec, contender: 'kv-aware', feedDelayMs: 2_000, cachePendingMs: 0 }))
      .cacheChecks!;
    expect(late.underTokens).toBeGreaterThan(oracle.underTokens);
    // Contenders that do not place on cache truth have no checks.
    expect((await simulateRun({ ...spec, contender: 'round-robin' })).cacheChecks).toBeUndefined();
  });

  it('finds the contexts the round-robin placer misses', async () => {
    const shape = cachePressureWorkload(4, cacheBlocks);
    const kv = await simulateRun(pressureSpec(shape, 'kv-aware', { rate: 12 }));
    const rr = await simulateRun(pressureSpec(shape, 'round-robin', { rate: 12 }));
    expect(kv.measuredHitShare).toBeGreaterThan(0.7);
    expect(rr.measuredHitShare).toBeLessThan(0.3);
  });

  it('gives the same records for the same spec', async () => {
    const shape = cachePressureWorkload(4, cacheBlocks);
    const spec = pressureSpec(shape, 'kv-aware', { rate: 25, gateways: 3 });
    expect((await simulateRun(spec)).records).toEqual((await simulateRun(spec)).records);
  });
});

/** A cache-pressure run on `shape`'s fleet of 4 engines, 15 s warm-up and 15 s measured. */
function pressureSpec(
  shape: ReturnType<typeof cachePressureWorkload>,
  contender: string,
  extra: Partial<SimRunSpec> & { rate: number },
): SimRunSpec {
  return {
    shape,
    fleet: { runners: 4, slots: 16, profile: H100_8B_PROFILE },
    contender,
    seed: 5,
    firstSession: 5_000_000,
    warmupMs: 15_000,
    measureMs: 15_000,
    warmSystemPrompts: 'spread',
    ...extra,
  };
}
