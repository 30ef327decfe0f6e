/**
 * The scale scenario: what one placement decision costs as the pool grows, in process and with
 * no network, so the figure is the placer's own work. For every built-in placer and pools of
 * 10 to 10,000 fake runners it times two things:
 *
 * - `order`: taking the first runner from `placer.order(call, runners)`, which is all the walk
 *   asks of a placer when the first runner offered has a free slot;
 * - `placeCall`: the whole walk around it (the pool asked, the offer awaited, `placed()` told),
 *   with a runner that commits at once.
 *
 * Every call is a fresh object, as in the gateway, so per-call caches (prefix-affinity hashes a
 * prompt once per call) are paid every time. Loads are varied but kept within prefix-affinity's
 * balance guard, so it takes its affinity branch rather than falling back to least-loaded.
 *
 * prefix-affinity's cost grows with the prompt as well as the pool, so it is also timed with
 * prompts of 1, 8 and 32 KB (characters of ASCII text, so bytes too), hashing included. It keeps
 * recently placed prompts' block keys, so a prompt whose system prompt was placed lately compares
 * those blocks rather than hashing them; `order` with the 32 KB prompts is timed once more after
 * other prompts have pushed the system prompts out of what it keeps, so their blocks are hashed.
 */
import { builtinPlacers, placeCall, seededRandom } from '../../../placer/index.ts';
import type { Placer, Runner, RunnerCall, RunnerLoad, RunnerPool, TryExecResult } from '../../../placer/index.ts';
import { costChart } from '../cost-chart.ts';
import { growth, measureCost } from '../micro.ts';
import type { CostBounds, CostSample } from '../micro.ts';
import { formatTable, reportHead, writeResults } from '../report.ts';
import type { Scenario } from '../types.ts';
import { benchScenario } from '../scenario.ts';
import { TRUTH_HOLDERS, TRUTH_PROMPT_BLOCKS, TRUTH_SHAPES, measureTruthDecision } from './scale-truth.ts';
import type { TruthCell } from './scale-truth.ts';

/** Pool sizes measured, smallest first (the growth ratio is last over first). */
const POOL_SIZES: readonly number[] = Object.freeze([10, 100, 1_000, 10_000]);

/** Per cell: a warm-up, then 2,000 calls or 2 s, whichever comes first. */
const SCALE_BOUNDS: Readonly<CostBounds> = Object.freeze({ warmup: 200, maxCalls: 2_000, maxMs: 2_000, batch: 20 });

/** The untimed pass over the small pools before anything is timed. */
const JIT_WARMUP: Readonly<CostBounds> = Object.freeze({ warmup: 0, maxCalls: 5_000, maxMs: 300, batch: 50 });

/** Distinct calls cycled through; each use is copied, so every timed call is a new object. */
const CALL_VARIETY = 256;

/** Prompt lengths, characters, of prefix-affinity's prompt grid. */
export const PROMPT_SIZES: readonly number[] = Object.freeze([1_024, 8_192, 32_768]);

/** Short prompts placed after the system prompts, enough to push them out of what prefix-affinity keeps. */
const FLUSH_CALLS = 256;

/** Share of each prompt-grid prompt that is its shared system prompt; the rest is the user turn. */
const SYSTEM_SHARE = 0.8;

/** One placer at one pool size. */
export interface ScaleCell {
  placer: string;
  runners: number;
  order: CostSample;
  placeCall: CostSample;
  /** Every pass's sample; the two above are the medians. */
  passes: { order: CostSample[]; placeCall: CostSample[] };
}

/** prefix-affinity with one prompt length at one pool size. */
export interface PromptCell {
  /** Prompt length, characters. */
  promptChars: number;
  runners: number;
  order: CostSample;
  placeCall: CostSample;
  passes: { order: CostSample[]; placeCall: CostSample[] };
}

/** Times the whole grid is measured; each cell reports its median pass. */
const SCALE_PASSES = 3;

/** The sample with the median cost (the lower middle one for an even count). */
export function medianSample(samples: readonly CostSample[]): CostSample {
  if (samples.length === 0) throw new RangeError('medianSample needs at least one sample');
  const sorted = [...samples].sort((a, b) => a.usPerCall - b.usPerCall);
  return sorted[Math.floor((sorted.length - 1) / 2)]!;
}

/** The `scale` scenario. */
export const scale: Scenario = benchScenario(
  'placement decision cost (µs per call) per placer with 10 to 10,000 runners, in process',
  async (options, { progress, write, startedAt, machine }, ctx) => {
    const calls = benchCalls(CALL_VARIETY);
    const cells: ScaleCell[] = [];
    // Without this the first cells timed (the small pools) pay for compiling the placers and the
    // walk, and read slower than the large pools measured later with hot code.
    progress('warming up every placer on small pools...\n');
    for (const size of POOL_SIZES.slice(0, 2)) {
      const runners = fakeFleet(size);
      for (const create of Object.values(builtinPlacers)) {
        await measureCost(orderOnce(prime(create(), calls, runners), calls, runners), JIT_WARMUP);
        await measureCost(placeOnce(prime(create(), calls, runners), calls, { runners: () => runners }), JIT_WARMUP);
      }
    }
    // The whole grid several times over, each cell's median kept: on a shared box a neighbour's
    // burst lands on one pass of a cell, not on all of them.
    const samples = new Map<string, { order: CostSample[]; placeCall: CostSample[] }>();
    for (let pass = 1; pass <= SCALE_PASSES; pass++) {
      for (const size of POOL_SIZES) {
        // One stable array per size, as a pool returns the same array until membership changes.
        const runners = fakeFleet(size);
        const pool: RunnerPool<string> = { runners: () => runners };
        for (const [name, create] of Object.entries(builtinPlacers)) {
          if (ctx.signal?.aborted) throw new Error('benchmark interrupted');
          const order = await measureCost(orderOnce(prime(create(), calls, runners), calls, runners), SCALE_BOUNDS);
          const walked = await measureCost(placeOnce(prime(create(), calls, runners), calls, pool), SCALE_BOUNDS);
          progress(
            `pass ${pass} ${name.padEnd(16)} ${String(size).padStart(6)} runners: order ${formatUs(order.usPerCall)} µs, placeCall ${formatUs(walked.usPerCall)} µs\n`,
          );
          const key = `${name}/${size}`;
          if (!samples.has(key)) samples.set(key, { order: [], placeCall: [] });
          samples.get(key)!.order.push(order);
          samples.get(key)!.placeCall.push(walked);
        }
      }
      for (const chars of PROMPT_SIZES) {
        const long = promptCalls(CALL_VARIETY, chars);
        const systems = systemCalls(long);
        for (const size of POOL_SIZES) {
          if (ctx.signal?.aborted) throw new Error('benchmark interrupted');
          const runners = fakeFleet(size);
          const create = builtinPlacers['prefix-affinity']!;
          // Primed with the system prompts alone, so each lookup walks back over its user turn's
          // blocks to the shared prefix, as a new turn of a chat does.
          const order = await measureCost(orderOnce(prime(create(), systems, runners), long, runners), SCALE_BOUNDS);
          const walked = await measureCost(
            placeOnce(prime(create(), systems, runners), long, { runners: () => runners }),
            SCALE_BOUNDS,
          );
          progress(
            `pass ${pass} prefix-affinity ${String(chars).padStart(6)} chars ${String(size).padStart(6)} runners: order ${formatUs(order.usPerCall)} µs, placeCall ${formatUs(walked.usPerCall)} µs\n`,
          );
          const key = `prompt/${chars}/${size}`;
          if (!samples.has(key)) samples.set(key, { order: [], placeCall: [] });
          samples.get(key)!.order.push(order);
          samples.get(key)!.placeCall.push(walked);
        }
      }
      // Only `order`: placeCall's placed() would keep each prompt again, and the next call with
      // the same system prompt would find it.
      const chars = PROMPT_SIZES.at(-1)!;
      const long = promptCalls(CALL_VARIETY, chars);
      const flush = chatCalls(FLUSH_CALLS, (i) => `flush ${i}: ${benchText(2_000 + i, 200)}`);
      for (const size of POOL_SIZES) {
        if (ctx.signal?.aborted) throw new Error('benchmark interrupted');
        const runners = fakeFleet(size);
        const placer = prime(prime(builtinPlacers['prefix-affinity']!(), systemCalls(long), runners), flush, runners);
        const order = await measureCost(orderOnce(placer, long, runners), SCALE_BOUNDS);
        progress(
          `pass ${pass} prefix-affinity ${String(chars).padStart(6)} chars, start not kept, ${String(size).padStart(6)} runners: order ${formatUs(order.usPerCall)} µs\n`,
        );
        const key = `cold/${chars}/${size}`;
        if (!samples.has(key)) samples.set(key, { order: [], placeCall: [] });
        samples.get(key)!.order.push(order);
        samples.get(key)!.placeCall.push({ calls: 0, elapsedMs: 0, usPerCall: Number.NaN });
      }
      for (const shape of TRUTH_SHAPES) {
        for (const size of POOL_SIZES) {
          if (ctx.signal?.aborted) throw new Error('benchmark interrupted');
          const decision = await measureTruthDecision(shape, fakeFleet(size), calls, SCALE_BOUNDS);
          progress(
            `pass ${pass} kv-aware on cache truth, ${shape}, ${String(size).padStart(6)} runners: ${formatUs(decision.usPerCall)} µs\n`,
          );
          const key = `truth/${shape}/${size}`;
          if (!samples.has(key)) samples.set(key, { order: [], placeCall: [] });
          samples.get(key)!.order.push(decision);
        }
      }
    }
    const promptCells: PromptCell[] = [];
    const coldCells: PromptCell[] = [];
    for (const chars of PROMPT_SIZES) {
      for (const size of POOL_SIZES) {
        const s = samples.get(`prompt/${chars}/${size}`)!;
        promptCells.push({
          promptChars: chars,
          runners: size,
          order: medianSample(s.order),
          placeCall: medianSample(s.placeCall),
          passes: s,
        });
        const c = samples.get(`cold/${chars}/${size}`);
        if (c)
          coldCells.push({
            promptChars: chars,
            runners: size,
            order: medianSample(c.order),
            placeCall: medianSample(c.placeCall),
            passes: c,
          });
      }
    }
    for (const size of POOL_SIZES) {
      for (const name of Object.keys(builtinPlacers)) {
        const s = samples.get(`${name}/${size}`)!;
        cells.push({
          placer: name,
          runners: size,
          order: medianSample(s.order),
          placeCall: medianSample(s.placeCall),
          passes: s,
        });
      }
    }
    const placers = Object.keys(builtinPlacers);
    const costs = (name: string, pick: 'order' | 'placeCall'): number[] =>
      POOL_SIZES.map((n) => cells.find((c) => c.placer === name && c.runners === n)![pick].usPerCall);
    const table = (pick: 'order' | 'placeCall'): string =>
      formatTable(
        ['placer', ...POOL_SIZES.map((n) => `${n} µs`), `growth ${POOL_SIZES.at(-1)}/${POOL_SIZES[0]}`],
        placers.map((name) => [name, ...costs(name, pick).map(formatUs), `${growth(costs(name, pick)).toFixed(1)}x`]),
      );
    write(
      `\nsluice bench scale: ${machine.cpus} cpus, node ${machine.node}, ${startedAt.toISOString()}, median of ${SCALE_PASSES} passes, load average ${machine.loadAverage[0]} at start, prompts of about ${Math.round(mean(calls.map((c) => c.prompt!.length)))} characters\n\n`,
    );
    write(`first runner from placer.order(call, runners), µs per call\n${table('order')}\n\n`);
    write(`placeCall with the first runner committing at once, µs per call\n${table('placeCall')}\n\n`);
    const coldChars = PROMPT_SIZES.at(-1)!;
    const promptTable = (pick: 'order' | 'placeCall'): string =>
      formatTable(
        ['prompt chars', ...POOL_SIZES.map((n) => `${n} µs`)],
        [
          ...PROMPT_SIZES.map((chars) => [
            String(chars),
            ...POOL_SIZES.map((n) =>
              formatUs(promptCells.find((c) => c.promptChars === chars && c.runners === n)![pick].usPerCall),
            ),
          ]),
          [
            `${coldChars}, start not kept`,
            ...POOL_SIZES.map((n) => formatUs(coldCells.find((c) => c.runners === n)![pick].usPerCall)),
          ],
        ],
      );
    write(`prefix-affinity by prompt length (a new user turn after a shared system prompt, hashing included)\n`);
    write(`first runner from placer.order(call, runners), µs per call\n${promptTable('order')}\n\n`);
    write(`placeCall with the first runner committing at once, µs per call\n${promptTable('placeCall')}\n\n`);

    const truthCells: TruthCell[] = TRUTH_SHAPES.flatMap((shape) =>
      POOL_SIZES.map((size) => ({
        shape,
        runners: size,
        decision: medianSample(samples.get(`truth/${shape}/${size}`)!.order),
      })),
    );
    write(
      `kv-aware on cache truth: the index walk for a ${TRUTH_PROMPT_BLOCKS * 16}-token prompt (${TRUTH_PROMPT_BLOCKS} blocks), ${TRUTH_HOLDERS} runners holding its context, and the order's first runner; tokenizing not included (sluice bench tokens), µs per call\n`,
    );
    write(
      `${formatTable(
        ['truth', ...POOL_SIZES.map((n) => `${n} µs`)],
        TRUTH_SHAPES.map((shape) => [
          shape,
          ...POOL_SIZES.map((n) =>
            formatUs(truthCells.find((c) => c.shape === shape && c.runners === n)!.decision.usPerCall),
          ),
        ]),
      )}\n\n`,
    );

    const report = {
      ...reportHead('scale', startedAt, machine),
      bounds: SCALE_BOUNDS,
      passes: SCALE_PASSES,
      poolSizes: POOL_SIZES,
      cells,
      promptSizes: PROMPT_SIZES,
      promptCells,
      coldCells,
      truthCells,
    };
    const subtitle = `${machine.cpus} cpus, node ${machine.node}, ${startedAt.toISOString().slice(0, 16)}Z, log-log`;
    const svg = costChart(
      POOL_SIZES,
      (['order', 'placeCall'] as const).map((pick) => ({
        title: pick === 'order' ? 'placer.order, first runner' : 'placeCall, first runner commits',
        series: placers.map((name) => ({ name, costs: costs(name, pick) })),
      })),
      'sluice bench scale: placement cost by pool size',
      subtitle,
    );
    const files = await writeResults(ctx, options.out, 'scale', startedAt, report, svg, write);
    return { files };
  },
);

const PLACED: TryExecResult<string> = Object.freeze({ kind: 'placed', value: 'ok' });

/**
 * `size` runners with ids `runner-00000`…, slots of 8, 16 or 32 and between a quarter and just
 * under half of them in use, spread by a fixed generator so every run times the same fleet. The
 * list is frozen, as the gateway's pool hands out its lists.
 */
export function fakeFleet(size: number): readonly Runner<string>[] {
  // Deterministic spread for the fleet and the prompts; placers keep their own Math.random draws.
  const random = seededRandom(size);
  return Object.freeze(
    Array.from({ length: size }, (_, i) => {
      const slots = [8, 16, 32][i % 3]!;
      const load: RunnerLoad = Object.freeze({ inFlight: Math.round(slots * (0.25 + 0.2 * random())), slots });
      return { id: `runner-${String(i).padStart(5, '0')}`, tryExec: async () => PLACED, load: () => load };
    }),
  );
}

/**
 * Calls as a chat gateway sees them: eight shared system prompts of about 1,600 characters, then a
 * user turn of about 400, so about 2,000 characters (some 500 tokens) to hash; distinct keys.
 */
export function benchCalls(n: number): RunnerCall[] {
  const systems = Array.from({ length: 8 }, (_, s) => `system: you are assistant ${s}. ${benchText(1_000 + s, 1_600)}`);
  return chatCalls(n, (i) => `${systems[i % systems.length]}\nuser: ${benchText(i, 400)}`);
}

/**
 * Calls whose prompts are exactly `chars` characters: one of eight shared system prompts making up
 * 80 % of it, then a distinct user turn. Each call keeps its system prompt in `system`.
 */
export function promptCalls(n: number, chars: number): (RunnerCall & { system: string })[] {
  const head = (s: number): string => `system: you are assistant ${s}. `;
  const systemChars = Math.round(chars * SYSTEM_SHARE);
  const systems = Array.from({ length: 8 }, (_, s) => head(s) + benchText(1_000 + s, systemChars - head(s).length));
  return chatCalls(n, (i) => {
    const system = systems[i % systems.length]!;
    return `${system}\nuser: ${benchText(i, chars - system.length - 7)}`;
  }).map((call, i) => ({ ...call, system: systems[i % systems.length]! }));
}

/** The same calls with only their system prompt, to prime an index with the shared prefixes. */
function systemCalls(calls: readonly (RunnerCall & { system: string })[]): RunnerCall[] {
  return calls.map(({ system, ...call }) => ({ ...call, prompt: system }));
}

const WORDS = 'the of fleet runner token cache prompt model batch engine slot queue gateway answer request'.split(' ');

/** `chars` characters of seeded word salad. */
function benchText(seed: number, chars: number): string {
  const random = seededRandom(seed);
  let out = '';
  while (out.length < chars) out += `${WORDS[Math.floor(random() * WORDS.length)]} `;
  return out.slice(0, chars);
}

function chatCalls(n: number, promptOf: (i: number) => string): RunnerCall[] {
  const signal = new AbortController().signal;
  // Far beyond any bounded run: the deadline must never be what ends a timed placement.
  const placerDeadline = Date.now() + 24 * 3_600_000;
  return Array.from({ length: n }, (_, i) => ({
    id: `call-${i}`,
    fn: 'sim-small',
    key: `session-${i}`,
    type: 'sync' as const,
    placerDeadline,
    signal,
    prompt: promptOf(i),
  }));
}

/** Teaches a learning placer where the calls went (prefix-affinity's index), so its branch is the affinity one. */
function prime(placer: Placer, calls: readonly RunnerCall[], runners: readonly Runner<string>[]): Placer {
  for (const call of calls) {
    const first = firstOf(placer.order({ ...call }, runners));
    if (first) placer.placed?.(call, first);
  }
  return placer;
}

function orderOnce(
  placer: Placer,
  calls: readonly RunnerCall[],
  runners: readonly Runner<string>[],
): (i: number) => unknown {
  return (i) => firstOf(placer.order({ ...calls[i % calls.length]! }, runners));
}

function placeOnce(
  placer: Placer,
  calls: readonly RunnerCall[],
  pool: RunnerPool<string>,
): (i: number) => Promise<unknown> {
  return (i) => placeCall({ ...calls[i % calls.length]! }, pool, placer, { retryAllDelay: 10 });
}

function firstOf<R>(order: Iterable<R>): R | undefined {
  return order[Symbol.iterator]().next().value as R | undefined;
}

/** µs with the precision meaningful at its size. */
export function formatUs(us: number): string {
  if (!Number.isFinite(us)) return '-';
  return us < 10 ? us.toFixed(2) : us < 100 ? us.toFixed(1) : us.toFixed(0);
}

function mean(values: readonly number[]): number {
  return values.reduce((a, b) => a + b, 0) / Math.max(values.length, 1);
}
