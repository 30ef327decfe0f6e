import { describe, expect, it } from 'vitest';
import { blockHashes, PrefixCache } from '../../runner/engines/sim/prefix-cache.ts';
import { H100_8B_PROFILE } from '../../runner/engines/sim/profiles.ts';
import type { SimProfile } from '../../runner/engines/sim/profiles.ts';
import { placeCall } from '../../placer/walk.ts';
import { resolveGatewayOptions } from '../../gateway/options.ts';
import { resolveLoadAware } from '../../placer/load-options.ts';
import { builtinPlacers } from '../../placer/registry.ts';
import { seededRandom } from '../../placer/kernel/index.ts';
import type { Placer, RunnerCall } from '../../placer/types.ts';
import { BlockRunCache } from '../../k6/driver/vsim/block-cache.ts';
import { VirtualEngine } from '../../k6/driver/vsim/engine.ts';
import type { EngineRequest } from '../../k6/driver/vsim/engine.ts';
import { EventQueue } from '../../k6/driver/vsim/event-queue.ts';
import { nginxLeastConn, nginxRoundRobin } from '../../k6/driver/vsim/nginx.ts';
import {
  GATEWAY_DEFAULTS,
  SIM_CONTENDERS,
  SIZED_PREFIX_AFFINITY,
  simulateRun,
  sizedIndexBlocks,
} from '../../k6/driver/vsim/simulation.ts';
import type { SimRunSpec } from '../../k6/driver/vsim/simulation.ts';
import { FleetSlots, SimRunner, placeCallWalker, stepWalker } from '../../k6/driver/vsim/sluice.ts';
import type { SimWalker, WalkEnd, WalkSettings, WalkerContext } from '../../k6/driver/vsim/sluice.ts';
import { promptBlocksOf } from '../../k6/driver/vsim/trace.ts';
import { PLACEMENT_WORKLOAD, promptTokensOf, traceCalls } from '../../k6/driver/workload.ts';
import type { TraceCall } from '../../k6/driver/workload.ts';

const shape = PLACEMENT_WORKLOAD;
/** The H100 profile without jitter, so times are exact. */
const STEADY: SimProfile = Object.freeze({ ...H100_8B_PROFILE, prefillJitterStdMs: 0, itlJitterStdMs: 0 });
/** Prefill of `tokens` uncached tokens on the H100 profile, alone on the engine. */
const prefill = (tokens: number): number => STEADY.prefillOverheadMs + tokens * STEADY.prefillPerTokenMs;
const DECODE_MS = (shape.outputTokens - 1) * STEADY.itlMs;

/** An engine on its own event queue, and a request that notes when its tokens came. */
function engineBench(profile: SimProfile = STEADY) {
  const queue = new EventQueue<(now: number) => void>();
  const engine = new VirtualEngine(0, profile, seededRandom(1), (at, handle) => queue.push(at, handle));
  const request = (call: TraceCall) => {
    const times = { first: Number.NaN, done: Number.NaN };
    const r: EngineRequest = {
      prompt: promptBlocksOf(shape, call),
      outputTokens: shape.outputTokens,
      onFirstToken: (now) => (times.first = now),
      onDone: (now) => (times.done = now),
    };
    return { r, times };
  };
  const runUntilIdle = (): void => {
    for (let handle = queue.pop(); handle; handle = queue.pop()) handle(queue.now);
  };
  return { queue, engine, request, runUntilIdle };
}

const call = (session: number, turn: number, at = 0, system = 0): TraceCall => ({ at, session, turn, system });

describe('EventQueue', () => {
  it('returns events by time, and events due at the same time in the order they were pushed', () => {
    const q = new EventQueue<string>();
    q.push(5, 'a');
    q.push(1, 'b');
    q.push(5, 'c');
    q.push(1, 'd');
    q.push(3, 'e');
    const out: string[] = [];
    for (let item = q.pop(); item !== undefined; item = q.pop()) out.push(`${item}@${q.now}`);
    expect(out).toEqual(['b@1', 'd@1', 'e@3', 'a@5', 'c@5']);
  });

  it('keeps insertion order among many equal times after the heap reshuffles', () => {
    const q = new EventQueue<number>();
    for (let i = 0; i < 200; i++) q.push(i % 2 === 0 ? 10 : 20, i);
    const popped: number[] = [];
    for (let item = q.pop(); item !== undefined; item = q.pop()) popped.push(item);
    const evens = Array.from({ length: 100 }, (_, i) => 2 * i);
    expect(popped).toEqual([...evens, ...evens.map((e) => e + 1)]);
  });

  it('throws RangeError for an event before the clock or at NaN', () => {
    const q = new EventQueue<string>();
    q.push(10, 'x');
    q.pop();
    expect(() => q.push(9, 'y')).toThrow(RangeError);
    expect(() => q.push(Number.NaN, 'y')).toThrow(RangeError);
  });
});

describe('traceCalls at simulator rates', () => {
  it('stays in due order with every call once, at thousands of calls a second', () => {
    const calls = [...traceCalls(shape, { rate: 3_000, durationMs: 20_000, seed: 8, firstSession: 123_000 })];
    expect(calls.every((c, i) => i === 0 || calls[i - 1]!.at <= c.at)).toBe(true);
    expect(new Set(calls.map((c) => `${c.session}/${c.turn}`)).size).toBe(calls.length);
    // Poisson sessions: near 3,000 calls a second once every turn is present (from 9 s on).
    const steady = calls.filter((c) => c.at >= 9_000).length / 11;
    expect(steady).toBeGreaterThan(2_850);
    expect(steady).toBeLessThan(3_150);
  });
});

describe('BlockRunCache', () => {
  // The live cache, fed the same prompts as real block hashes of their structure: the system
  // prompt's blocks, then the session's. Lookups must agree call for call.
  const liveHashes = (system: number, session: number, turn: number): string[] => {
    const { total, shared } = promptTokensOf(shape, turn);
    const tokens = Array.from({ length: total }, (_, i) => (i < shared ? `s${system}t${i}` : `u${session}t${i}`));
    return blockHashes(tokens);
  };

  it('holds the same blocks as the live per-block LRU through evictions', () => {
    const capacity = 300;
    const live = new PrefixCache(capacity);
    const runs = new BlockRunCache(capacity);
    const random = seededRandom(42);
    const turnOf = new Map<number, number>();
    const hits: number[][] = [];
    for (let i = 0; i < 250; i++) {
      const session = Math.floor(random() * 12);
      const turn = Math.min((turnOf.get(session) ?? 0) + 1, shape.turns);
      turnOf.set(session, turn === shape.turns ? 0 : turn);
      const c = call(session, turn, 0, session % 3);
      const prompt = promptBlocksOf(shape, c);
      const hashes = liveHashes(c.system, session, turn);
      hits.push([live.lookup(hashes, prompt.tokens), runs.lookup(prompt)]);
      if (random() < 0.8) {
        live.insert(hashes);
        runs.insert(prompt);
      }
    }
    expect(hits.map(([a, b]) => a === b).every(Boolean)).toBe(true);
    // Capacity 300 is under three prompts' blocks, so evictions did happen, and some lookups hit.
    expect(new Set(hits.map(([a]) => a)).size).toBeGreaterThan(2);
    expect(runs.size).toBe(live.size);
    expect(runs.totals()).toEqual(live.totals());
  });
});

describe('VirtualEngine', () => {
  it('sends a lone call its first token after the profile prefill of its uncached tokens, and ends it after the decode', () => {
    const { engine, request, runUntilIdle } = engineBench();
    const { r, times } = request(call(1, 1));
    expect(engine.submit(r, 0)).toBe(true);
    runUntilIdle();
    const tokens = promptTokensOf(shape, 1).total;
    expect(times.first).toBeCloseTo(prefill(tokens), 9);
    expect(times.done).toBeCloseTo(prefill(tokens) + DECODE_MS, 9);
  });

  it('hits the prefix cache on a second turn for the blocks of the first', () => {
    const { engine, request, runUntilIdle } = engineBench();
    engine.submit(request(call(1, 1)).r, 0);
    runUntilIdle();
    const second = request(call(1, 2, 5_000));
    engine.submit(second.r, 5_000);
    runUntilIdle();
    const firstBlocks = Math.floor(promptTokensOf(shape, 1).total / 16) * 16;
    expect(second.times.first - 5_000).toBeCloseTo(prefill(promptTokensOf(shape, 2).total - firstBlocks), 9);
    expect(engine.cacheTotals().hits).toBe(firstBlocks);
  });

  it('queues first in, first out beyond max-num-seqs and refuses one more than the queue holds', () => {
    const { engine, request, runUntilIdle } = engineBench({ ...STEADY, maxNumSeqs: 2, maxQueue: 2 });
    const calls = [1, 2, 3, 4, 5].map((n) => request(call(n, 1, 0, n)));
    const accepted = calls.map(({ r }) => engine.submit(r, 0));
    expect(accepted).toEqual([true, true, true, true, false]);
    expect(engine.waiting).toBe(2);
    expect(engine.rejected).toBe(1);
    runUntilIdle();
    const [a, b, c, d] = calls.map((x) => x.times);
    // The third starts when the first slot frees, the fourth after it, when the second does.
    expect(c!.first).toBeGreaterThan(Math.min(a!.done, b!.done));
    expect(d!.first).toBeGreaterThan(c!.first);
    expect(Number.isNaN(calls[4]!.times.first)).toBe(true);
    expect(engine.queuePeak).toBe(2);
  });

  it('slows decode down while more sequences run, by the load scale', () => {
    const { engine, request, runUntilIdle } = engineBench();
    const lone = request(call(1, 1));
    engine.submit(lone.r, 0);
    runUntilIdle();
    const { engine: shared, request: requestShared, runUntilIdle: runShared } = engineBench();
    const pair = [requestShared(call(1, 1)), requestShared(call(2, 1))];
    for (const p of pair) shared.submit(p.r, 0);
    runShared();
    // Two running of 16: 1 + (2 - 1) x 1/15 slower, on prefill and decode alike.
    const scale = 1 + 1 / 15;
    expect(pair[0]!.times.done - pair[0]!.times.first).toBeCloseTo((lone.times.done - lone.times.first) * scale, 6);
    expect(engine.running).toBe(0);
  });
});

describe('the sluice path', () => {
  const runnersOf = (n: number, slots: number, fleet = new FleetSlots()) => {
    const q = new EventQueue<(now: number) => void>();
    return Array.from(
      { length: n },
      (_, i) =>
        new SimRunner(
          `runner-${i + 1}`,
          slots,
          new VirtualEngine(i, STEADY, seededRandom(i), (at, h) => q.push(at, h)),
          fleet,
        ),
    );
  };
  const runnerCall = (n: number, deadline = 3_600_000): RunnerCall => ({
    id: `c${n}`,
    fn: 'sim-8b',
    key: `session-${n}`,
    type: 'sync',
    placerDeadline: deadline,
    signal: new AbortController().signal,
  });
  const walk = { retryAllDelay: 10, placerTimeout: 360_000 };
  /**
   * A walker on its own event queue; `at(t, fn)` runs `fn` as an event at virtual time t.
   * `runUntil` handles events up to `t` (all of them without), letting each event's walks step
   * before the next, as the simulation does.
   */
  const walkerOf = (
    runners: readonly SimRunner[],
    fleet: FleetSlots,
    placer: Placer,
    settings: WalkSettings = walk,
    make: (context: WalkerContext) => SimWalker = stepWalker,
  ) => {
    const q = new EventQueue<(now: number) => void>();
    const walker = make({ runners, fleet, placer, settings, schedule: (at, h) => q.push(at, h), now: () => q.now });
    const at = (t: number, fn: (now: number) => void): void => q.push(t, fn);
    const runUntil = async (t = Infinity): Promise<void> => {
      while (q.size > 0 && q.peekTime() <= t) {
        const h = q.pop()!;
        h(q.now);
        await walker.settled();
      }
    };
    return { walker, at, runUntil };
  };
  /** One runner of `slots` slots behind a round-robin walker whose order is fixed, with `settings`. */
  const oneRunnerWalk = (slots: number, settings: WalkSettings = walk) => {
    const fleet = new FleetSlots();
    const runners = runnersOf(1, slots, fleet);
    return { runners, ...walkerOf(runners, fleet, builtinPlacers['round-robin']!({ random: () => 0 }), settings) };
  };
  /** Notes where and when each call was placed, or when it timed out or found the queue full. */
  const ends = () => {
    const placed: { runner: SimRunner; at: number; name: string }[] = [];
    const timedOut: number[] = [];
    const full: number[] = [];
    const endOf = (name: string): WalkEnd => ({
      placed: (runner, at) => placed.push({ runner, at, name }),
      timedOut: (at) => timedOut.push(at),
      queueFull: (at) => full.push(at),
    });
    return { placed, timedOut, full, end: endOf('?'), endOf };
  };

  it('spreads calls evenly with round-robin', async () => {
    const fleet = new FleetSlots();
    const runners = runnersOf(4, 16, fleet);
    const placer = builtinPlacers['round-robin']!({ random: () => 0.5 });
    const { walker, at, runUntil } = walkerOf(runners, fleet, placer);
    const counts = new Map<string, number>();
    for (let i = 0; i < 400; i++) {
      at(i, (now) =>
        walker.start(
          runnerCall(i),
          now,
          {
            placed(runner) {
              counts.set(runner.id, (counts.get(runner.id) ?? 0) + 1);
              runner.finished(now, now);
            },
            timedOut() {
              throw new Error('not placed');
            },
            queueFull() {
              throw new Error('not placed');
            },
          },
          `session-${i}`,
        ),
      );
    }
    await runUntil();
    expect([...counts.values()]).toEqual([100, 100, 100, 100]);
    expect(walker.waited).toBe(0);
  });

  it('answers busy once its slots are full, and reports load the way HttpRunner does', async () => {
    const [runner] = runnersOf(1, 2);
    expect(runner!.load()).toEqual({ inFlight: 0 });
    expect(runner!.offer().kind).toBe('placed');
    expect((await runner!.tryExec(runnerCall(1))).kind).toBe('placed');
    expect(runner!.offer().kind).toBe('busy');
    runner!.probe(500);
    expect(runner!.load()).toEqual({
      inFlight: 2,
      slots: 2,
      reported: { running: 2, waiting: 0, kvCacheUsage: 0, at: 500 },
    });
    // Both calls were sent at 0, before the probe: one ending at 600 is off the report's count.
    runner!.finished(0, 600);
    expect(runner!.load()).toEqual({
      inFlight: 1,
      slots: 2,
      reported: { running: 1, waiting: 0, kvCacheUsage: 0, at: 500 },
    });
    // One sent after the probe was never in it: its end leaves the count as it is.
    expect(runner!.offer().kind).toBe('placed');
    runner!.finished(550, 700);
    expect(runner!.load().reported).toMatchObject({ running: 1 });
  });

  it('works with the live async walk too, as any Runner does', async () => {
    const runners = runnersOf(3, 1);
    const placement = await placeCall(
      runnerCall(1, Date.now() + 3_600_000),
      { runners: () => runners },
      builtinPlacers['least-loaded']!({ random: seededRandom(3) }),
      { retryAllDelay: 10 },
    );
    expect(placement.value.inFlight).toBe(1);
    expect(runners.reduce((n, r) => n + r.inFlight, 0)).toBe(1);
  });

  it('waits in the queue while every slot of the fleet is taken, and takes a slot the moment it frees', async () => {
    const fleet = new FleetSlots();
    const runners = runnersOf(2, 1, fleet);
    const placer = builtinPlacers['round-robin']!({ random: () => 0 });
    const { walker, at, runUntil } = walkerOf(runners, fleet, placer);
    const { placed, end } = ends();
    at(0, (now) => walker.start(runnerCall(1), now, end, 'a'));
    at(0, (now) => walker.start(runnerCall(2), now, end, 'a'));
    at(7, (now) => walker.start(runnerCall(3), now, end, 'a'));
    await runUntil(11);
    expect(placed.map((p) => p.at)).toEqual([0, 0]);
    expect(fleet.free).toBe(0);
    expect(walker.queue.waiting).toBe(1);
    // A call of this gateway ends at 12: the pool tells the queue, and the head walks at once.
    at(12, (now) => {
      placed[0]!.runner.finished(0, now);
      walker.freed(now);
    });
    await runUntil();
    expect(placed.map((p) => p.at)).toEqual([0, 0, 12]);
    expect(walker.waited).toBe(1);
    expect(walker.queue.size).toBe(0);
  });

  it('starts waiting calls in arrival order within a flow, taking turns across flows, once slots free', async () => {
    const { runners, walker, at, runUntil } = oneRunnerWalk(1);
    const { placed, endOf } = ends();
    at(0, (now) => walker.start(runnerCall(0), now, endOf('first'), 'x'));
    // A burst of flow a, then one call of b and two of c, all while the only slot is taken.
    const arrivals: [string, string][] = [
      ['a1', 'a'],
      ['a2', 'a'],
      ['a3', 'a'],
      ['b1', 'b'],
      ['a4', 'a'],
      ['c1', 'c'],
      ['c2', 'c'],
    ];
    arrivals.forEach(([name, flow], i) => at(1 + i, (now) => walker.start(runnerCall(10 + i), now, endOf(name), flow)));
    // Each placed call ends 100 ms later and frees the slot for the next.
    for (let t = 100; t <= 800; t += 100) {
      at(t, (now) => {
        runners[0]!.finished(now - 100, now);
        walker.freed(now);
      });
    }
    await runUntil();
    // a's calls in their order, b's one call and c's first each get a turn before a's second.
    expect(placed.map((p) => p.name)).toEqual(['first', 'a1', 'b1', 'c1', 'a2', 'c2', 'a3', 'a4']);
    expect(placed.map((p) => p.at)).toEqual([0, 100, 200, 300, 400, 500, 600, 700]);
    expect(walker.waited).toBe(7);
  });

  it('lines a new call up behind waiting ones even when a slot is free on its arrival', async () => {
    const { runners, walker, at, runUntil } = oneRunnerWalk(2);
    const { placed, endOf } = ends();
    at(0, (now) => walker.start(runnerCall(1), now, endOf('1'), 'a'));
    at(0, (now) => walker.start(runnerCall(2), now, endOf('2'), 'a'));
    at(1, (now) => walker.start(runnerCall(3), now, endOf('3'), 'b'));
    // A slot frees at 5 without the queue being told (as a call of another gateway would): the
    // waiting call 3 has not walked yet when call 4 comes, and call 4 waits behind it.
    at(5, (now) => runners[0]!.finished(0, now));
    at(6, (now) => walker.start(runnerCall(4), now, endOf('4'), 'c'));
    await runUntil(9);
    expect(placed.map((p) => p.name)).toEqual(['1', '2']);
    expect(walker.queue.waiting).toBe(2);
    // The fallback offers the head of the line every retryAllDelay from the first wait at 1: call 3
    // takes the slot at 11, and placing it wakes the next, which finds nothing and waits again.
    await runUntil(49);
    expect(placed.map((p) => [p.name, p.at])).toEqual([
      ['1', 0],
      ['2', 0],
      ['3', 11],
    ]);
    expect(walker.queue.waiting).toBe(1);
    // Another slot frees unseen at 50: the fallback's next offer, at 51, gives it to call 4.
    at(50, (now) => runners[0]!.finished(0, now));
    await runUntil();
    expect(placed.map((p) => [p.name, p.at])).toEqual([
      ['1', 0],
      ['2', 0],
      ['3', 11],
      ['4', 51],
    ]);
    expect(walker.queue.size).toBe(0);
  });

  it('wakes as many waiting calls as a status report shows free slots', async () => {
    const { runners, walker, at, runUntil } = oneRunnerWalk(3, { ...walk, retryAllDelay: 0 });
    const { placed, endOf } = ends();
    for (let i = 1; i <= 5; i++) at(0, (now) => walker.start(runnerCall(i), now, endOf(String(i)), `f${i}`));
    // Two calls end unseen by the queue (no fallback: retryAllDelay 0), then a report shows two free slots.
    at(20, (now) => {
      runners[0]!.finished(0, now);
      runners[0]!.finished(0, now);
    });
    at(30, (now) => walker.freed(now, runners[0]!.slots - runners[0]!.inFlight));
    await runUntil();
    expect(placed.map((p) => [p.name, p.at])).toEqual([
      ['1', 0],
      ['2', 0],
      ['3', 0],
      ['4', 30],
      ['5', 30],
    ]);
  });

  it('times a waiting call out at its placer deadline, and the next in line takes the freed slot', async () => {
    const { walker, at, runUntil } = oneRunnerWalk(1);
    const { placed, timedOut, end } = ends();
    at(0, (now) => walker.start(runnerCall(1), now, end, 'a'));
    at(1, (now) => walker.start(runnerCall(2, 30), now, end, 'a'));
    at(2, (now) => walker.start(runnerCall(3), now, end, 'a'));
    at(50, (now) => {
      placed[0]!.runner.finished(0, now);
      walker.freed(now);
    });
    await runUntil();
    // The queue ends call 2's wait at its deadline, 30; call 3 is the head when the slot frees.
    expect(timedOut).toEqual([30]);
    expect(placed.map((p) => p.at)).toEqual([0, 50]);
    expect(walker.queue.size).toBe(0);
  });

  it('answers a call that finds the queue at its bound at once, as the gateway answers 503 GW_QUEUE_FULL', async () => {
    const { runners, walker, at, runUntil } = oneRunnerWalk(1, { ...walk, maxQueued: 2, maxQueuedPerFlow: 1 });
    const { placed, full, endOf } = ends();
    at(0, (now) => walker.start(runnerCall(1), now, endOf('1'), 'a'));
    at(1, (now) => walker.start(runnerCall(2), now, endOf('2'), 'a'));
    // Flow a has its one waiting call: a's next is refused; b's first waits, c's finds the total bound.
    at(2, (now) => walker.start(runnerCall(3), now, endOf('3'), 'a'));
    at(3, (now) => walker.start(runnerCall(4), now, endOf('4'), 'b'));
    at(4, (now) => walker.start(runnerCall(5), now, endOf('5'), 'c'));
    await runUntil(10);
    expect(full).toEqual([2, 4]);
    expect(walker.queue.waiting).toBe(2);
    for (const t of [100, 200]) {
      at(t, (now) => {
        runners[0]!.finished(0, now);
        walker.freed(now);
      });
    }
    await runUntil();
    expect(placed.map((p) => [p.name, p.at])).toEqual([
      ['1', 0],
      ['2', 100],
      ['4', 200],
    ]);
  });

  it('places the same calls at the same times through placeCall as through the walk steps', async () => {
    // One trace of arrivals, frees and a deadline, through both walkers: the same queue, the same wakes.
    const run = async (make: (context: WalkerContext) => SimWalker) => {
      const fleet = new FleetSlots();
      const runners = runnersOf(2, 2, fleet);
      const { walker, at, runUntil } = walkerOf(
        runners,
        fleet,
        builtinPlacers['least-loaded']!({ random: seededRandom(4) }),
        walk,
        make,
      );
      const { placed, timedOut, endOf } = ends();
      for (let i = 0; i < 12; i++)
        at(i * 3, (now) => walker.start(runnerCall(i, i === 7 ? 40 : 3_600_000), now, endOf(String(i)), `f${i % 3}`));
      for (let t = 25; t < 200; t += 13) {
        at(t, (now) => {
          const busy = runners.find((r) => r.inFlight > 0);
          busy?.finished(0, now);
          if (t % 2 === 0) walker.freed(now);
        });
      }
      await runUntil();
      return { placed: placed.map((p) => [p.name, p.runner.id, p.at]), timedOut, waited: walker.waited };
    };
    const steps = await run(stepWalker);
    expect(steps.placed.length).toBeGreaterThan(8);
    expect(steps.timedOut).toEqual([40]);
    expect(await run(placeCallWalker)).toEqual(steps);
  });
});

describe('the simulated walk against placeCall', () => {
  // The differential check of the simulator's walk: the same trace through the walk's steps
  // answered synchronously (walk 'steps') and through the gateway's placeCall on the virtual clock
  // (walk 'placeCall'), both waiting in the gateway's queue, must give the same records, call for
  // call, to the bit. 4 runners of 16 slots, 300 calls each.
  const placers = SIM_CONTENDERS.filter((c) => !c.startsWith('nginx') && c !== SIZED_PREFIX_AFFINITY);
  const spec = (contender: string, rate: number): SimRunSpec => ({
    shape: { ...shape, thinkMs: 3_001.3 },
    fleet: { runners: 4, slots: 16, profile: H100_8B_PROFILE },
    contender,
    rate,
    seed: 3,
    firstSession: 1_000_000,
    warmupMs: 0,
    measureMs: 20_000,
    maxCalls: 300,
  });

  it('covers the six built-in placers and the oracle', () => {
    expect(placers).toEqual([
      'round-robin',
      'consistent-hash',
      'least-loaded',
      'load-weighted',
      'prefix-affinity',
      'kv-aware',
      'oracle',
    ]);
  });

  it.each(placers)(
    'places every call where and when placeCall does with %s, below capacity and over it',
    async (contender) => {
      // About 36 calls/s is the capacity of 4 runners: 29 keeps every call placed at once, 54 makes most wait.
      for (const rate of [29, 54]) {
        const steps = await simulateRun(spec(contender, rate));
        const walked = await simulateRun({ ...spec(contender, rate), walk: 'placeCall' });
        expect(steps.records.length).toBe(300);
        expect(walked.records).toEqual(steps.records);
        expect(walked.waited).toBe(steps.waited);
        if (rate > 36) {
          expect(steps.waited).toBeGreaterThan(100);
          // Both wait for the same wakes: the same events, the queue's timers among them.
          expect(walked.events).toBe(steps.events);
          expect(steps.records.filter((r) => r.status !== 200)).toEqual([]);
        } else {
          expect(steps.waited).toBe(0);
        }
      }
    },
  );
});

describe('nginx balancers', () => {
  it('round-robin takes the upstreams in turn', () => {
    const b = nginxRoundRobin(3);
    expect(Array.from({ length: 7 }, () => b.pick())).toEqual([0, 1, 2, 0, 1, 2, 0]);
  });

  it('least_conn picks the fewest active, and rotates among ties', () => {
    const b = nginxLeastConn(3);
    expect([b.pick(), b.pick(), b.pick()]).toEqual([0, 1, 2]);
    b.done(1);
    expect(b.pick()).toBe(1);
    b.done(0);
    b.done(2);
    // 0 and 2 are tied at one active each: the round-robin among them goes on where it left off.
    const next = [b.pick(), b.pick()];
    expect(next.sort()).toEqual([0, 2]);
  });
});

describe('simulateRun', () => {
  const base: SimRunSpec = {
    shape,
    fleet: { runners: 8, slots: 16, profile: H100_8B_PROFILE },
    contender: 'round-robin',
    rate: 40,
    seed: 5,
    firstSession: 7_000_000,
    warmupMs: 9_000,
    measureMs: 4_000,
  };

  it("never queues inside an engine on the sluice path: calls past the fleet's slots wait in the gateway", async () => {
    const result = await simulateRun({ ...base, fleet: { ...base.fleet, runners: 2 }, rate: 60 });
    expect(result.waited).toBeGreaterThan(0);
    expect(result.engineQueuePeak).toBe(0);
    expect(result.figures.errorCount).toBe(0);
  });

  it('queues in the engines and answers 429 through nginx when they are overrun', async () => {
    const result = await simulateRun({
      ...base,
      fleet: { ...base.fleet, runners: 2 },
      rate: 60,
      contender: 'nginx round-robin',
    });
    expect(result.engineQueuePeak).toBe(H100_8B_PROFILE.maxQueue);
    expect(result.figures.errors['status 429']).toBeGreaterThan(0);
  });

  /** `trace` run whole on `runners` runners of one slot each, their engines one sequence at a time, with no hop. */
  const oneSlotRun = (runners: number, trace: TraceCall[]) =>
    simulateRun({
      ...base,
      fleet: { runners, slots: 1, profile: { ...STEADY, maxNumSeqs: 1 } },
      trace,
      warmupMs: 0,
      measureMs: 10,
      hops: { sluiceHopMs: 0 },
    });

  it('places a call that found the only slot taken the moment the slot frees', async () => {
    const result = await oneSlotRun(1, [call(1, 1, 0), call(2, 1, 1)]);
    const [first, second] = [...result.records].sort((a, b) => a.at - b.at);
    // The engine starts with the system prompt cached: each call prefills its own message only.
    const sharedCached = Math.floor(promptTokensOf(shape, 1).shared / 16) * 16;
    const ownPrefill = prefill(promptTokensOf(shape, 1).total - sharedCached);
    const freedAt = ownPrefill + DECODE_MS;
    expect(first!.latency).toBeCloseTo(freedAt, 6);
    // The first call's end wakes the second, the head of the queue, at once: not on a 10 ms beat.
    expect(second!.at + second!.ttft).toBeCloseTo(freedAt + ownPrefill, 6);
    expect(result.waited).toBe(1);
  });

  it('starts calls that wait for a full fleet in arrival order within a session', async () => {
    // Two runners of one slot; six calls at once in two sessions, each call's answer long.
    const trace = [call(1, 1, 0), call(2, 1, 0.5), call(1, 2, 1), call(1, 3, 2), call(2, 2, 3), call(1, 4, 4)];
    const result = await oneSlotRun(2, trace);
    const started = [...result.records].sort((a, b) => a.at + a.ttft - (b.at + b.ttft));
    const sessionOf = (r: { at: number }) => trace.find((c) => c.at === r.at)!.session;
    const turnsOf = (session: number) => started.filter((r) => sessionOf(r) === session).map((r) => r.turn);
    expect(result.records).toHaveLength(6);
    expect(turnsOf(1)).toEqual([1, 2, 3, 4]);
    expect(turnsOf(2)).toEqual([1, 2]);
    expect(result.waited).toBe(4);
  });

  it('starts engines with the system prompts cached unless told not to', async () => {
    const warm = await simulateRun(base);
    const cold = await simulateRun({ ...base, warmSystemPrompts: false });
    // 8 system prompts missed at least once on each of 8 engines: some 63,000 of about 730,000 prompt tokens.
    expect(warm.cacheHitShare - cold.cacheHitShare).toBeGreaterThan(0.03);
  });

  it('gives identical figures for the same seed, and other figures for another', async () => {
    const spec = { ...base, contender: 'least-loaded', rate: 50 };
    const [a, b, c] = await Promise.all([simulateRun(spec), simulateRun(spec), simulateRun({ ...spec, seed: 6 })]);
    expect(a.records.length).toBeGreaterThan(300);
    expect(b.figures).toEqual(a.figures);
    expect(b.cacheHitShare).toBe(a.cacheHitShare);
    expect(c.figures.ttft.p50).not.toBe(a.figures.ttft.p50);
  });

  it("runs with the gateway's own defaults: the walk's, the pool's and the load-aware placers'", () => {
    const gateway = resolveGatewayOptions({ runners: ['http://127.0.0.1:1'] });
    expect(GATEWAY_DEFAULTS).toEqual({
      retryAllDelay: gateway.placerConfig.retryAllDelay,
      placerTimeout: gateway.placerConfig.placerTimeout,
      statusInterval: gateway.statusInterval,
      staleAfterMs: resolveLoadAware({}).staleAfterMs,
      maxQueued: gateway.maxQueued,
      maxQueuedPerFlow: gateway.maxQueuedPerFlow,
      defaultPriority: gateway.defaultPriority,
    });
  });

  it("sizes the sized prefix-affinity contender's index by the rule: calls/s x blocks per prompt x the gap between turns", async () => {
    // The placement workload's prompts are 4,000 to 10,000 characters over its four turns: about
    // 110 blocks of 64 on average; its turns come 3 s apart.
    const blocks = sizedIndexBlocks(shape, 1);
    expect(blocks / 3).toBeGreaterThan(100);
    expect(blocks / 3).toBeLessThan(120);
    const perCall = sizedIndexBlocks(shape, 1_000) / 1_000;
    expect(Math.abs(sizedIndexBlocks(shape, 7_000) - 7_000 * perCall)).toBeLessThanOrEqual(7);
    expect(sizedIndexBlocks(shape, 1_000_000)).toBe(10_000_000);
    // The sized contender is prefix-affinity: sessions come back to the runner that holds them.
    const sized = await simulateRun({ ...base, contender: SIZED_PREFIX_AFFINITY });
    const roundRobin = await simulateRun(base);
    const unsized = await simulateRun({ ...base, contender: 'prefix-affinity' });
    expect(sized.cacheHitShare).toBeGreaterThan(roundRobin.cacheHitShare + 0.05);
    // At 40 calls/s the rule asks for about 13,000 blocks: enough to lose nothing against the default 100,000.
    expect(sized.cacheHitShare).toBe(unsized.cacheHitShare);
  });

  it('throws RangeError for an unknown contender', async () => {
    await expect(simulateRun({ ...base, contender: 'random' })).rejects.toThrow(RangeError);
  });
});
