/**
 * One simulated run: a trace of the placement workload replayed against a fleet of virtual
 * engines through one contender, on a virtual clock. The result is the live driver's call
 * records (k6/driver/trace-run.ts), so the figures come from the same `placementFigures`.
 *
 * What a call goes through, per contender:
 * - a sluice placer: at its due time the gateway's own walk (placer/walk.ts) offers it to the
 *   runners in the real placer's order, and while every runner is full it waits its turn in the
 *   gateway's own wait queue (see sluice.ts); once one commits, the call reaches that
 *   runner's engine `sluiceHopMs` later (gateway and runner together, both ways: the simulator
 *   puts the whole hop in front of the engine), and holds the runner's slot until its last token.
 *   A runner has as many slots as its engine runs sequences, so the engine never queues it.
 * - nginx: the balancer picks an engine at the due time, and the call reaches it `nginxHopMs`
 *   later, to wait in its queue or be refused with 429.
 * - with `gateways` N, calls reach N such gateways in turn, each with its own placer, counts,
 *   queue and probes, in front of the same runners, whose slots they share.
 * - `kv-aware` and `oracle` read the call's cache truth (`RunnerCall.cache`) from the engines'
 *   caches as the gateway knows them (cache-truth.ts). Their runners have cache feeds, which carry
 *   each runner's load too: a runner's report reaches every gateway `feedDelayMs` after its slots
 *   change (one report per delay, however many changes), besides the status probes.
 *
 * Time to first token is counted from the due time to the engine's first token, and the end of a
 * call at its last token, as the live driver counts them at the client.
 *
 * Approximations beyond the engine's (engine.ts) and the walk's (sluice.ts):
 * - each hop is a constant; on a live machine it grows with the load (see {@link DEFAULT_HOPS});
 * - nothing models the gateway's own CPU or its `maxInFlight` limit: the simulator plans
 *   placement, assuming the gateways keep up (at 1,000 runners that would take several);
 * - all runners' status is taken at the same instants, every `statusInterval` from the start.
 */
import { affinityKey, gatewayDefaults, renderPrompt } from '../../../gateway/index.ts';
import {
  builtinPlacers,
  loadAwareDefaults,
  placerDefaults,
  prefixAffinityDefaults,
  seededRandom,
} from '../../../placer/index.ts';
import type { KvAwareOptions, Placer, PromptCache, RunnerCall } from '../../../placer/index.ts';
import type { SimProfile } from '../../../runner/index.ts';
import { placementFigures } from '../trace-run.ts';
import type { CallRecord, PlacementFigures } from '../trace-run.ts';
import { messagesOf, traceCalls } from '../workload.ts';
import type { TraceCall, WorkloadShape } from '../workload.ts';
import {
  DEFAULT_CACHE_PENDING_MS,
  DEFAULT_FEED_DELAY_MS,
  PendingPlacements,
  liveTruth,
  mirroredTruth,
  promptCacheOf,
} from './cache-truth.ts';
import type { CacheTruth } from './cache-truth.ts';
import { VirtualEngine } from './engine.ts';
import type { EngineRequest } from './engine.ts';
import { EventQueue } from './event-queue.ts';
import { NGINX_BALANCERS } from './nginx.ts';
import type { UpstreamBalancer } from './nginx.ts';
import { FleetSlots, RunnerSlots, SimRunner, placeCallWalker, stepWalker } from './sluice.ts';
import type { SimWalker, WalkSettings } from './sluice.ts';
import { promptBlocksOf, systemBlocksOf } from './trace.ts';
import type { PromptBlocks } from './trace.ts';

/**
 * Time a call spends getting to the engine and its first token getting back, beyond the engine's
 * own, in ms. Measured on the 2-core machine the benchmarks run on: an h100-8b sim engine, a runner
 * with 16 slots and a gateway in front of it, and nginx in front of the engine, turn-1 calls
 * interleaved call by call between the three. One call at a time, sluice's median time to first
 * token was 8 to 11 ms above the engine's own (two runs of 20 and 80 calls per target) and nginx's
 * 0.4 to 0.9 ms; with 8 calls at once 14.5 and 1.7 ms. The hop grows with the machine's load,
 * which a constant cannot follow; `--check` against a live run prints how far it is off.
 */
export const DEFAULT_HOPS: Readonly<SimHops> = Object.freeze({ sluiceHopMs: 10, nginxHopMs: 1 });

/** The hop overheads of {@link DEFAULT_HOPS}. */
export interface SimHops {
  /** Gateway and runner, request and first token together. */
  readonly sluiceHopMs: number;
  /** nginx, request and first token together. */
  readonly nginxHopMs: number;
}

/** The gateway settings the walk and the pool use; sluice's defaults in {@link GATEWAY_DEFAULTS}. */
export interface GatewaySettings extends WalkSettings {
  /** How often the pool takes each runner's status, ms. */
  readonly statusInterval: number;
  /** Reports older than this are ignored by load-aware placers, ms. */
  readonly staleAfterMs: number;
}

/**
 * The gateway's own defaults, read from the product rather than copied: the walk's pause and sync
 * deadline from `placerDefaults`, the load-aware placers' staleness bound from
 * `loadAwareDefaults`, and the pool's status interval from `gatewayDefaults`.
 */
export const GATEWAY_DEFAULTS: Readonly<Required<GatewaySettings>> = Object.freeze({
  retryAllDelay: placerDefaults.retryAllDelay,
  placerTimeout: placerDefaults.placerTimeout,
  statusInterval: gatewayDefaults.statusInterval,
  staleAfterMs: loadAwareDefaults.staleAfterMs,
  maxQueued: gatewayDefaults.maxQueued,
  maxQueuedPerFlow: gatewayDefaults.maxQueuedPerFlow,
  defaultPriority: gatewayDefaults.defaultPriority,
});

/** The fleet: `runners` runners of `slots` slots, each in front of its own engine. */
export interface SimFleet {
  readonly runners: number;
  readonly slots: number;
  readonly profile: SimProfile;
}

/** One run: the trace, the fleet and the contender. */
export interface SimRunSpec {
  readonly shape: WorkloadShape;
  readonly fleet: SimFleet;
  /** A sluice placer's name or one of `nginx round-robin`, `nginx least_conn`. */
  readonly contender: string;
  readonly rate: number;
  readonly seed: number;
  readonly firstSession: number;
  /** Calls due before this are replayed but not measured. */
  readonly warmupMs: number;
  readonly measureMs: number;
  /** Most calls in the trace, whatever the rate says. @default Infinity */
  readonly maxCalls?: number;
  /**
   * The calls to replay, in due order, instead of the workload's trace for `rate` and `seed`
   * (which then only seed the random sources): for tests that need calls at chosen times.
   */
  readonly trace?: Iterable<TraceCall>;
  /**
   * Engines start with every system prompt cached, as the live scenario's engines are once they
   * have served a run: they serve every contender in turn, and each sees every system prompt
   * within its first seconds. A cold start would miss each system prompt once per engine, inside
   * the warm-up but in the run's cache hit share. `spread`: system prompt s is cached on engine
   * `s mod engines` only, as a fleet that placed them by cache would hold them, for workloads
   * whose system prompts outgrow one engine's cache (the cache-pressure workload). @default true
   */
  readonly warmSystemPrompts?: boolean | 'spread';
  /** @default GATEWAY_DEFAULTS */
  readonly gateway?: Partial<GatewaySettings>;
  /**
   * How the gateway's walk is run: `steps`, its steps answered synchronously (sluice.ts), or
   * `placeCall`, the async walk itself, slower; both wait in the gateway's queue on the virtual
   * clock, and the differential spec runs both and expects the same records. @default 'steps'
   */
  readonly walk?: 'steps' | 'placeCall';
  /** @default DEFAULT_HOPS */
  readonly hops?: Partial<SimHops>;
  /**
   * Gateways in front of the runners, each with its own placer, in-flight counts, wait queue and
   * status probes; calls reach them in turn, as through an L4 balancer. The runners' slots are
   * shared. nginx contenders ignore it. @default 1
   */
  readonly gateways?: number;
  /** How late an engine's cache events reach the gateways, ms (`kv-aware`'s truth). @default DEFAULT_FEED_DELAY_MS */
  readonly feedDelayMs?: number;
  /** How long a gateway counts its own placement as cached, ms (the pending rule). @default DEFAULT_CACHE_PENDING_MS */
  readonly cachePendingMs?: number;
  /** Options passed to `kv-aware` and the oracle, beyond the clock, random source and staleness bound. */
  readonly kvAware?: KvAwareOptions;
}

/** Predicted against reported cached tokens, summed over calls. */
export interface CacheChecks {
  calls: number;
  predictedTokens: number;
  reportedTokens: number;
  /** Tokens predicted cached that the engine did not find cached. */
  overTokens: number;
  /** Tokens the engine found cached beyond the prediction. */
  underTokens: number;
}

/** What a run produced. */
export interface SimRunResult {
  /** One record per call of the trace, in the order the calls ended. */
  readonly records: CallRecord[];
  readonly figures: PlacementFigures;
  /** Engines' prefix-cache hit tokens over queried tokens, the whole run (warm-up included). */
  readonly cacheHitShare: number;
  /** The same over the calls due in the measured window. */
  readonly measuredHitShare: number;
  /**
   * For the contenders that place on cache truth: the measured calls' cached tokens as placement
   * predicted them on the runner that took each call, against what its engine found at prefill,
   * as the gateway's own check counts them (`sluice_cache_*_tokens`). Undefined for the others.
   */
  readonly cacheChecks?: CacheChecks;
  /** Events handled: the simulator's own unit of work. */
  readonly events: number;
  /** Calls that waited in the gateway's queue: every runner was full, or calls were waiting already. */
  readonly waited: number;
  /** Most requests waiting in any one engine's queue at once: 0 on the sluice path. */
  readonly engineQueuePeak: number;
}

/** How a run may be paced and stopped from outside; the simulation itself never waits. */
export interface RunControl {
  /** Checked between slices; an aborted run rejects. */
  readonly signal?: AbortSignal;
  /** Events per slice, between which the event loop gets a turn (Ctrl-C, progress). @default 200_000 */
  readonly slice?: number;
}

/** prefix-affinity with its index sized for the run's rate by {@link sizedIndexBlocks}, rather than its default. */
export const SIZED_PREFIX_AFFINITY = 'prefix-affinity sized';

/**
 * The `kv-aware` placer reading every engine's cache live, with no feed delay (the pending rule
 * still applies): the best any cache-aware placement can know. `kv-aware` itself reads the caches
 * as its gateway gets them, through the feed (cache-truth.ts).
 */
export const ORACLE = 'oracle';

/** The contenders a run can have: the built-in placers, prefix-affinity with a sized index, the oracle, then nginx's two. */
export const SIM_CONTENDERS: readonly string[] = Object.freeze([
  ...Object.keys(builtinPlacers),
  SIZED_PREFIX_AFFINITY,
  ORACLE,
  ...Object.keys(NGINX_BALANCERS),
]);

/** prefix-affinity's `maxBlocks` refuses more than this. */
const MAX_INDEX_BLOCKS = 10_000_000;

/**
 * prefix-affinity's `maxBlocks` by the rule in docs/placers.md: calls/s x blocks per prompt (the
 * mean over a session's turns, at the placer's default block size) x the gap before a prompt's
 * prefix comes back, so that its blocks are still indexed then: the time between a session's
 * turns, or with single-turn sessions (many tenants' long contexts) the mean time between two
 * calls with the same system prompt, system prompts / calls/s. At most the option's own bound.
 */
export function sizedIndexBlocks(shape: WorkloadShape, rate: number): number {
  const { blockSize } = prefixAffinityDefaults;
  let blocks = 0;
  for (let turn = 1; turn <= shape.turns; turn++) {
    const prompt = renderPrompt(messagesOf(shape, { at: 0, session: 0, turn, system: 0 }), undefined);
    blocks += Math.floor((prompt?.length ?? 0) / blockSize);
  }
  const gapMs = shape.turns > 1 ? shape.thinkMs : (shape.systemPrompts / rate) * 1000;
  return Math.min(MAX_INDEX_BLOCKS, Math.ceil(rate * (blocks / shape.turns) * (gapMs / 1000)));
}

/**
 * Replays the trace of `spec` and returns every call's record and the run's figures. Pure in its
 * inputs: the same spec gives the same records, whatever the machine.
 * @throws {RangeError} for a contender it does not know.
 */
export async function simulateRun(spec: SimRunSpec, control: RunControl = {}): Promise<SimRunResult> {
  if (!SIM_CONTENDERS.includes(spec.contender))
    throw new RangeError(
      `unknown contender ${JSON.stringify(spec.contender)}; contenders: ${SIM_CONTENDERS.join(', ')}`,
    );
  const queue = new EventQueue<Handler>();
  const schedule = (at: number, handle: Handler): void => queue.push(at, handle);
  const engineRandom = seededRandom(mix(spec.seed, 1));
  const sim: SimContext = {
    spec,
    schedule,
    now: () => queue.now,
    eventsWaiting: () => queue.size,
    engines: Array.from(
      { length: spec.fleet.runners },
      (_, i) => new VirtualEngine(i, spec.fleet.profile, engineRandom, schedule),
    ),
    records: [],
    measured: { queries: 0, hits: 0 },
    checks: { calls: 0, predictedTokens: 0, reportedTokens: 0, overTokens: 0, underTokens: 0 },
  };
  warmEngines(sim.engines, spec.shape, spec.warmSystemPrompts ?? true);
  const balancer = NGINX_BALANCERS[spec.contender];
  const path = balancer ? nginxPath(sim, balancer(sim.engines.length)) : sluicePath(sim);

  const trace = (spec.trace ??
    traceCalls(spec.shape, {
      rate: spec.rate,
      durationMs: spec.warmupMs + spec.measureMs,
      seed: spec.seed,
      firstSession: spec.firstSession,
      ...(spec.maxCalls === undefined ? {} : { maxCalls: spec.maxCalls }),
    }))[Symbol.iterator]();
  // One arrival waits in the queue at a time: a million calls are never all in memory as events.
  const arriveNext = (): void => {
    const next = trace.next();
    if (next.done) return;
    schedule(next.value.at, (at) => {
      path.arrive(next.value, at);
      arriveNext();
    });
  };
  arriveNext();
  path.start?.();

  const events = await drain(queue, control, path.settled);
  let queries = 0;
  let hits = 0;
  let engineQueuePeak = 0;
  for (const engine of sim.engines) {
    const totals = engine.cacheTotals();
    queries += totals.queries;
    hits += totals.hits;
    engineQueuePeak = Math.max(engineQueuePeak, engine.queuePeak);
  }
  return {
    records: sim.records,
    figures: placementFigures(sim.records, spec.warmupMs, spec.measureMs),
    cacheHitShare: queries > 0 ? hits / queries : Number.NaN,
    measuredHitShare: sim.measured.queries > 0 ? sim.measured.hits / sim.measured.queries : Number.NaN,
    ...(spec.contender === ORACLE || spec.contender === 'kv-aware' ? { cacheChecks: { ...sim.checks } } : {}),
    events,
    waited: path.waited(),
    engineQueuePeak,
  };
}

/** Caches the system prompts before the run, as `warm` says (see SimRunSpec.warmSystemPrompts). */
function warmEngines(engines: readonly VirtualEngine[], shape: WorkloadShape, warm: boolean | 'spread'): void {
  if (warm === false) return;
  const systems = Array.from({ length: shape.systemPrompts }, (_, system) => systemBlocksOf(shape, system));
  if (warm === 'spread') {
    for (const [system, blocks] of systems.entries()) engines[system % engines.length]!.warm([blocks]);
    return;
  }
  for (const engine of engines) engine.warm(systems);
}

/** An event: called with the virtual time it was due at. */
type Handler = (now: number) => void;

/** What the call paths share with the run. */
interface SimContext {
  readonly spec: SimRunSpec;
  readonly schedule: (at: number, handle: Handler) => void;
  /** Virtual ms since the trace began: the placers' `now`, the runners' report times. */
  readonly now: () => number;
  /** Events still queued besides the one being handled. */
  readonly eventsWaiting: () => number;
  readonly engines: readonly VirtualEngine[];
  readonly records: CallRecord[];
  /** Prompt and cached tokens of the calls due in the measured window, as the engines found them. */
  readonly measured: { queries: number; hits: number };
  /** The measured calls' predicted against reported cached tokens, for contenders on cache truth. */
  readonly checks: CacheChecks;
}

/**
 * Handles every event in time order, a slice at a time; returns how many there were. With
 * `settled`, each event's walks finish their steps before the next event is taken.
 */
async function drain(
  queue: EventQueue<Handler>,
  control: RunControl,
  settled?: () => Promise<void> | undefined,
): Promise<number> {
  const slice = control.slice ?? 200_000;
  let events = 0;
  for (;;) {
    for (let i = 0; i < slice; i++) {
      const handle = queue.pop();
      if (handle === undefined) {
        settled?.();
        return events;
      }
      handle(queue.now);
      events++;
      if (settled !== undefined) {
        const walking = settled();
        if (walking !== undefined) await walking;
      }
    }
    await new Promise<void>((resolve) => setImmediate(resolve));
    if (control.signal?.aborted) throw new Error('benchmark interrupted');
  }
}

/** How calls of one contender get to the engines. */
interface CallPath {
  /** A call is due at `now`. */
  arrive(call: TraceCall, now: number): void;
  /** Schedules what runs beside the calls (the pool's status probes). */
  start?(): void;
  waited(): number;
  /** See SimWalker.settled: present only when calls' walks run on promises. */
  settled?(): Promise<void> | undefined;
}

/** Records a call that got its answer in full. */
function succeeded(call: TraceCall, firstTokenAt: number, doneAt: number, tokens: number): CallRecord {
  return { at: call.at, turn: call.turn, status: 200, ttft: firstTokenAt - call.at, latency: doneAt - call.at, tokens };
}

/** Records a call refused with `status`, as the live driver records a non-200 answer. */
function refused(call: TraceCall, status: number): CallRecord {
  return {
    at: call.at,
    turn: call.turn,
    status,
    ttft: Number.NaN,
    latency: Number.NaN,
    tokens: 0,
    error: `status ${status}`,
  };
}

/** Told at the virtual time a call's slot or connection is free again. */
type Ended = (now: number) => void;

/** The request an engine gets for `call`; `ended` runs once its record is kept. */
function engineRequest(
  sim: SimContext,
  call: TraceCall,
  prompt: PromptBlocks,
  ended: Ended,
  predicted?: number,
): EngineRequest {
  const { shape, warmupMs, measureMs } = sim.spec;
  let firstTokenAt = Number.NaN;
  return {
    prompt,
    outputTokens: shape.outputTokens,
    onStart(cachedTokens) {
      if (call.at < warmupMs || call.at >= warmupMs + measureMs) return;
      sim.measured.queries += prompt.tokens;
      sim.measured.hits += cachedTokens;
      if (predicted === undefined) return;
      const { checks } = sim;
      checks.calls += 1;
      checks.predictedTokens += predicted;
      checks.reportedTokens += cachedTokens;
      checks.overTokens += Math.max(0, predicted - cachedTokens);
      checks.underTokens += Math.max(0, cachedTokens - predicted);
    },
    onFirstToken(now) {
      firstTokenAt = now;
    },
    onDone(now) {
      sim.records.push(succeeded(call, firstTokenAt, now, shape.outputTokens));
      ended(now);
    },
  };
}

/**
 * Sends `call` to `engine`, arriving at `at`; a refusal (queue full) becomes the call's 429 record
 * and runs `ended` too.
 */
function deliver(
  sim: SimContext,
  engine: VirtualEngine,
  call: TraceCall,
  at: number,
  ended: Ended,
  prompt: PromptBlocks = promptBlocksOf(sim.spec.shape, call),
  predicted?: number,
): void {
  const request = engineRequest(sim, call, prompt, ended, predicted);
  sim.schedule(at, (arrival) => {
    if (engine.submit(request, arrival)) return;
    sim.records.push(refused(call, 429));
    ended(arrival);
  });
}

/**
 * Through `spec.gateways` sluice gateways with the contender's placer, in front of a runner per
 * engine. Calls reach the gateways in turn; every gateway probes its runners at the same instants.
 */
function sluicePath(sim: SimContext): CallPath {
  const { spec } = sim;
  const settings = { ...GATEWAY_DEFAULTS, ...spec.gateway };
  const fleet = new FleetSlots();
  const slots = sim.engines.map(() => new RunnerSlots(spec.fleet.slots, fleet));
  const truth = truthOf(sim);
  const gateways = Array.from({ length: spec.gateways ?? 1 }, (_, index) =>
    simGateway(sim, { settings, fleet, slots, truth, index }),
  );
  if (truth) feedLoads(slots, gateways, { delayMs: spec.feedDelayMs ?? DEFAULT_FEED_DELAY_MS, ...sim });
  let next = 0;
  const probeAll = (at: number): void => {
    for (const gateway of gateways) gateway.probe(at);
    // Probing only while something else is queued: alone, it would keep the clock running forever.
    if (sim.eventsWaiting() > 0) sim.schedule(at + settings.statusInterval, probeAll);
  };
  return {
    arrive(call, at) {
      const gateway = gateways[next]!;
      next = (next + 1) % gateways.length;
      gateway.arrive(call, at);
    },
    start() {
      sim.schedule(0, probeAll);
    },
    waited: () => gateways.reduce((sum, gateway) => sum + gateway.walker.waited, 0),
    settled: () => settledAll(gateways.map((gateway) => gateway.walker)),
  };
}

/** How runners' feeds reach the gateways: `delayMs` late, on the simulation's clock. */
export interface FeedTiming {
  readonly delayMs: number;
  readonly schedule: (at: number, handle: (at: number) => void) => void;
  readonly now: () => number;
}

/**
 * Each runner's load on its cache feed: once its slots change, the runner's report reaches every
 * gateway `feedDelayMs` later, as the runner sends its load with the next update (at most every
 * feed interval) and the update travels; changes within that time ride the same report.
 */
export function feedLoads(
  slots: readonly RunnerSlots[],
  gateways: readonly Pick<SimGatewayPath, 'reported'>[],
  feed: FeedTiming,
): void {
  const { delayMs, schedule, now } = feed;
  slots.forEach((runnerSlots, i) => {
    let due = false;
    const arrive = (at: number): void => {
      due = false;
      for (const gateway of gateways) gateway.reported(i, at);
    };
    runnerSlots.onChange = () => {
      if (due) return;
      due = true;
      schedule(now() + delayMs, arrive);
    };
  });
}

/** What the gateways of a run share, and which one this is. */
interface GatewayPlace {
  readonly settings: Required<GatewaySettings>;
  readonly fleet: FleetSlots;
  /** Each runner's slots, taken by any gateway's calls. */
  readonly slots: readonly RunnerSlots[];
  /** The engines' caches as the gateways learn them; only for the cache-aware contenders. */
  readonly truth: CacheTruth | undefined;
  /** 0 for the first gateway, whose random source is the one a single gateway has. */
  readonly index: number;
}

/** One simulated gateway: its runners' views, placer, walker and queue, and its pending placements. */
export interface SimGatewayPath {
  readonly walker: SimWalker;
  arrive(call: TraceCall, at: number): void;
  /** Takes its runners' status, and wakes waiters for the free slots they show. */
  probe(at: number): void;
  /** Takes the status of its runner at `index` (from that runner's feed), and wakes waiters likewise. */
  reported(index: number, at: number): void;
}

function simGateway(sim: SimContext, { settings, fleet, slots, truth, index }: GatewayPlace): SimGatewayPath {
  const { spec } = sim;
  const hopMs = spec.hops?.sluiceHopMs ?? DEFAULT_HOPS.sluiceHopMs;
  const width = String(sim.engines.length).length;
  // Frozen, as the gateway's pool hands out its lists, so placers find the pool's view in O(1).
  const runners: readonly SimRunner[] = Object.freeze(
    sim.engines.map(
      (engine, i) =>
        new SimRunner(`runner-${String(i + 1).padStart(width, '0')}`, spec.fleet.slots, engine, fleet, slots[i]),
    ),
  );
  const ids = runners.map((runner) => runner.id);
  const random = seededRandom(mix(spec.seed, 2 + index * 1_000));
  const walker = (spec.walk === 'placeCall' ? placeCallWalker : stepWalker)({
    runners,
    fleet,
    placer: placerOf(spec, random, sim.now, settings),
    settings,
    schedule: sim.schedule,
    now: sim.now,
  });
  const pending = new PendingPlacements(spec.cachePendingMs ?? DEFAULT_CACHE_PENDING_MS);
  truth?.onStored((prompt) => pending.stored(prompt));
  const reportOf = (runner: SimRunner, at: number): void => {
    runner.probe(at);
    // A report with free slots may be room for a waiting call, as the pool tells the queue.
    walker.freed(at, runner.free, runner.id);
  };

  return {
    walker,
    probe(at) {
      for (const runner of runners) reportOf(runner, at);
    },
    reported(i, at) {
      reportOf(runners[i]!, at);
    },
    arrive(call, at) {
      const prompt = promptBlocksOf(spec.shape, call);
      const cache = truth && memoByTime(sim.now, () => promptCacheOf(prompt, truth, pending, ids, sim.now()));
      const runnerCall = runnerCallOf(spec.shape, call, at + settings.placerTimeout, NEVER_ABORTED, cache);
      walker.start(
        runnerCall,
        at,
        {
          placed(runner, placedAt) {
            // What placement predicted cached there, read before this placement counts as pending.
            const predicted = cache === undefined ? undefined : predictedOn(cache(), runner.id);
            if (truth) pending.add(runner.engine.id, prompt, placedAt);
            // A runner has no more slots than its engine runs sequences, so the engine never refuses it.
            deliver(
              sim,
              runner.engine,
              call,
              placedAt + hopMs,
              (now) => {
                runner.finished(placedAt, now);
                walker.freed(now, 1, runner.id);
              },
              prompt,
              predicted,
            );
          },
          timedOut() {
            sim.records.push(refused(call, 503));
          },
          queueFull() {
            sim.records.push(refused(call, 503));
          },
        },
        `session-${call.session}`,
      );
    },
  };
}

/** The cached tokens `cache` says `runnerId` holds, as the gateway's check reads them. */
function predictedOn(cache: PromptCache, runnerId: string): number {
  return cache.holders.get(runnerId) ?? (cache.known(runnerId) ? (cache.floor ?? 0) : 0);
}

/** The engines' caches as the contender's gateways learn them: the feed for kv-aware, live for the oracle. */
function truthOf(sim: SimContext): CacheTruth | undefined {
  const { spec } = sim;
  if (spec.contender === ORACLE) return liveTruth(sim.engines);
  if (spec.contender === 'kv-aware')
    return mirroredTruth(sim.engines, spec.feedDelayMs ?? DEFAULT_FEED_DELAY_MS, sim.schedule);
  return undefined;
}

/** Waits for every gateway's walks; one gateway's own answer as it is. */
function settledAll(walkers: readonly SimWalker[]): Promise<void> | undefined {
  if (walkers.length === 1) return walkers[0]!.settled();
  const walking = walkers.map((walker) => walker.settled()).filter((w) => w !== undefined);
  return walking.length === 0 ? undefined : Promise.all(walking).then(() => undefined);
}

/** `compute`'s answer, computed again only once the virtual time has moved. */
function memoByTime<T>(now: () => number, compute: () => T): () => T {
  let at = Number.NaN;
  let value: T | undefined;
  return () => {
    if (now() !== at) {
      value = compute();
      at = now();
    }
    return value as T;
  };
}

/** Through nginx in front of the engines themselves. */
function nginxPath(sim: SimContext, balancer: UpstreamBalancer): CallPath {
  const hopMs = sim.spec.hops?.nginxHopMs ?? DEFAULT_HOPS.nginxHopMs;
  return {
    arrive(call, at) {
      const upstream = balancer.pick();
      deliver(sim, sim.engines[upstream]!, call, at + hopMs, () => balancer.done(upstream));
    },
    waited: () => 0,
  };
}

/**
 * The signal of every simulated call: a replayed client never hangs up. A plain object rather than
 * one shared AbortSignal, which would collect a listener from every waiting call (the queue listens
 * for hang-ups) and pay for it on every removal.
 */
const NEVER_ABORTED: AbortSignal = Object.freeze({
  aborted: false,
  reason: undefined,
  onabort: null,
  throwIfAborted(): void {},
  addEventListener(): void {},
  removeEventListener(): void {},
  dispatchEvent: () => false,
}) as unknown as AbortSignal;

/**
 * The call as the gateway would hand it to the placer: the body's `user` (`session-<n>`) as the
 * key, the model as the function, and the prompt rendered from the messages exactly as the gateway
 * renders them. The prompt is rendered on first read: only prefix-affinity reads it, and building
 * it is most of a call's cost. `cache`, when given, answers the call's cache truth as it is when read.
 */
function runnerCallOf(
  shape: WorkloadShape,
  call: TraceCall,
  placerDeadline: number,
  signal: AbortSignal,
  cache?: () => PromptCache,
): RunnerCall {
  let prompt: string | undefined;
  const runnerCall: RunnerCall = {
    id: `call-${call.session}-${call.turn}`,
    fn: shape.model,
    key: affinityKey(undefined, `session-${call.session}`, shape.model),
    type: 'sync',
    placerDeadline,
    signal,
    get prompt(): string | undefined {
      return (prompt ??= renderPrompt(messagesOf(shape, call), undefined));
    },
  };
  return cache === undefined
    ? runnerCall
    : Object.defineProperty(runnerCall, 'cache', { get: cache, enumerable: true });
}

/** The contender's placer for one gateway, on the virtual clock. */
function placerOf(spec: SimRunSpec, random: () => number, now: () => number, settings: GatewaySettings): Placer {
  const { staleAfterMs } = settings;
  if (spec.contender === SIZED_PREFIX_AFFINITY)
    return builtinPlacers['prefix-affinity']!({
      random,
      now,
      staleAfterMs,
      maxBlocks: sizedIndexBlocks(spec.shape, spec.rate),
    });
  if (spec.contender === ORACLE || spec.contender === 'kv-aware')
    return builtinPlacers['kv-aware']!({ random, now, staleAfterMs, ...spec.kvAware });
  return createPlacer(spec.contender, random, now, staleAfterMs);
}

/**
 * A fresh built-in placer on the virtual clock. consistent-hash reads no clock and draws nothing;
 * round-robin takes only its random start; the load-aware ones take both, and the gateway's
 * staleness bound.
 */
function createPlacer(name: string, random: () => number, now: () => number, staleAfterMs: number): Placer {
  const create = builtinPlacers[name]!;
  if (name === 'consistent-hash') return create();
  if (name === 'round-robin') return create({ random });
  return create({ random, now, staleAfterMs });
}

/** A seed for one of a run's random sources, so the engines' jitter and the placer's draws are independent. */
function mix(seed: number, stream: number): number {
  return (Math.imul(seed ^ 0x5bd1e995, 0x27d4eb2d) + Math.imul(stream, 0x9e3779b1)) >>> 0;
}
