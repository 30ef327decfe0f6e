/**
 * The tokens scenario: what mapping a call's prompt to an engine's blocks costs the gateway
 * (render the chat template, tokenize, hash the blocks), in process, per tokenizer and prompt
 * length, three ways:
 *
 * - `off`: the token cache turned off, every prompt tokenized and hashed whole;
 * - `cold`: the cache on, every prompt new to it (its cost plus remembering the prompt's states);
 * - `warm`: the cache on, each prompt a conversation's next turn whose earlier turns were mapped
 *   before, so only the last answer and the new user message (about 100 words) are tokenized and
 *   hashed.
 *
 * Tokenizers: the simulated engine's, and the fixture Hugging Face tokenizer of the specs (a small
 * byte-level BPE with ChatML tokens). A real model's tokenizer is added with
 * `SLUICE_TOKENIZERS=<dir> SLUICE_TOKENIZER=<name>` (its folder `<dir>/<name>/`).
 */
import { fileURLToPath } from 'node:url';
import { PromptMapper } from '../../../gateway/index.ts';
import type { PromptSource } from '../../../gateway/index.ts';
import { seededRandom } from '../../../placer/index.ts';
import { barChart } from '../bar-chart.ts';
import { measureCost } from '../micro.ts';
import type { CostBounds } from '../micro.ts';
import { formatTable, reportHead, writeResults } from '../report.ts';
import type { Scenario } from '../types.ts';
import { benchScenario } from '../scenario.ts';

type Announcement = Parameters<PromptMapper['blocksOf']>[1];

/** Prompt lengths measured, in each tokenizer's own tokens (within a few percent). */
const PROMPT_TOKENS: readonly number[] = Object.freeze([1_024, 8_192]);

/** Distinct prompts per cell: each timed call a prompt the cold cache has not seen. */
const VARIETY = 120;

/** Per pass of a cell: a short warm-up, then the other prompts once each, or 2 s. */
const BOUNDS: Readonly<CostBounds> = Object.freeze({ warmup: 10, maxCalls: VARIETY - 10, maxMs: 2_000, batch: 5 });

/** The last answer and the new user message of a warm call, in words each. */
const TURN_WORDS = 48;

const FIXTURES = fileURLToPath(new URL('../../../spec/fixtures/tokenizers/', import.meta.url));

const WORDS = (
  'the gateway places each call on a runner whose engine holds the longest prefix of its prompt; ' +
  'blocks of sixteen tokens are hashed in a chain, and a runner tells every gateway which blocks ' +
  'its engine stored or removed. données 数据 2026, p90 TTFT: 0.54 s! (why?) fleet engine cache'
).split(' ');

/** One tokenizer at one prompt length. */
export interface TokensCell {
  tokenizer: string;
  promptTokens: number;
  /** µs per call. */
  off: number;
  cold: number;
  warm: number;
}

/** The `tokens` scenario. */
export const tokens: Scenario = benchScenario(
  'prompt mapping cost (tokenize and hash, µs per call) per tokenizer for 1k and 8k-token prompts',
  async (options, { progress, write, startedAt, machine }, ctx) => {
    const cells: TokensCell[] = [];
    for (const { dir, announcement } of tokenizersOf(ctx.env)) {
      if (!(await new PromptMapper({ tokenizerDir: dir }).prepare(announcement))) {
        progress(`tokenizer ${announcement.tokenizer} not found in ${dir}, skipped\n`);
        continue;
      }
      for (const target of PROMPT_TOKENS) {
        if (ctx.signal?.aborted) throw new Error('benchmark interrupted');
        const cell = await measureCell(dir, announcement, target);
        progress(
          `${cell.tokenizer} ${cell.promptTokens} tokens: off ${cell.off.toFixed(0)} µs, cold ${cell.cold.toFixed(0)} µs, warm ${cell.warm.toFixed(0)} µs\n`,
        );
        cells.push(cell);
      }
    }
    const header = ['tokenizer', 'prompt tokens', 'off µs', 'cold µs', 'warm µs'];
    const rows = cells.map((c) => [c.tokenizer, String(c.promptTokens), ...[c.off, c.cold, c.warm].map(fixed)]);
    write(`\nPrompt mapping cost per call (render, tokenize, hash blocks of 16)\n${formatTable(header, rows)}\n`);
    const svg = barChart(
      [...new Set(cells.map((c) => c.tokenizer))].map((name) => ({
        title: name,
        groups: cells
          .filter((c) => c.tokenizer === name)
          .map((c) => ({ label: `${c.promptTokens} tokens`, values: [c.off, c.cold, c.warm] })),
      })),
      [
        { name: 'cache off', color: '#9d755d' },
        { name: 'cold', color: '#f58518' },
        { name: 'warm', color: '#4c78a8' },
      ],
      {
        title: 'Prompt mapping cost per call',
        subtitle: `${machine.cpuModel}, ${startedAt.toISOString()}`,
        axis: 'µs per call',
        format: (v) => v.toFixed(0),
      },
    );
    const report = { ...reportHead('tokens', startedAt, machine), bounds: BOUNDS, cells };
    return { files: await writeResults(ctx, options.out, 'tokens', startedAt, report, svg, write) };
  },
);

const fixed = (us: number) => (Number.isFinite(us) ? us.toFixed(1) : '-');

/** The tokenizers measured: the simulated engine's, the fixture, and one named in the environment. */
function tokenizersOf(env: NodeJS.ProcessEnv): { dir: string; announcement: Announcement }[] {
  const announce = (tokenizer: string): Announcement => ({
    tokenizer,
    scheme: { algorithm: 'sha256_cbor', seed: '0', blockSize: 16 },
    events: true,
  });
  const list = [
    { dir: FIXTURES, announcement: announce('sluice-sim') },
    { dir: FIXTURES, announcement: announce('sluice/chatml-bpe') },
  ];
  if (env.SLUICE_TOKENIZERS && env.SLUICE_TOKENIZER)
    list.push({ dir: env.SLUICE_TOKENIZERS, announcement: announce(env.SLUICE_TOKENIZER) });
  return list;
}

/** Times each cell is measured; it reports the median, as a neighbour's burst lands on one pass. */
const PASSES = 3;

/** Times the three ways for one tokenizer and one prompt length, each the median of {@link PASSES}. */
async function measureCell(dir: string, announcement: Announcement, target: number): Promise<TokensCell> {
  const off = new PromptMapper({ tokenizerDir: dir, prefixCacheEntries: 0 });
  await off.prepare(announcement);
  const words = contextWords(off, announcement, target);
  const samples = { off: [] as number[], cold: [] as number[], warm: [] as number[] };
  for (let pass = 0; pass < PASSES; pass += 1) {
    const fresh = Array.from({ length: VARIETY }, (_, i) => chat(10_000 * (pass + 1) + i, words, i));
    samples.off.push(await timeCalls(off, fresh, announcement));
    samples.cold.push(await timeCalls(await mapperFor(dir, announcement), fresh, announcement));
    const warm = await mapperFor(dir, announcement);
    const turns = Array.from({ length: VARIETY }, (_, i) => chat(10_000 * (pass + 1) + 5_000 + i, words, i));
    // Each call's conversation so far, mapped before timing starts: the previous turn's call.
    for (const call of turns)
      warm.blocksOf({ ...call, messages: (call.messages as unknown[]).slice(0, -2) }, announcement);
    samples.warm.push(await timeCalls(warm, turns, announcement));
  }
  return {
    tokenizer: announcement.tokenizer,
    promptTokens: off.blocksOf(chat(1, words, 0), announcement)?.promptTokens ?? 0,
    off: median(samples.off),
    cold: median(samples.cold),
    warm: median(samples.warm),
  };
}

async function mapperFor(dir: string, announcement: Announcement): Promise<PromptMapper> {
  const mapper = new PromptMapper({ tokenizerDir: dir });
  await mapper.prepare(announcement);
  return mapper;
}

/** µs per call of mapping each of `calls` once. */
async function timeCalls(mapper: PromptMapper, calls: readonly PromptSource[], announcement: Announcement) {
  return (await measureCost((i) => mapper.blocksOf(calls[i % calls.length]!, announcement), BOUNDS)).usPerCall;
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor((sorted.length - 1) / 2)] ?? Number.NaN;
}

/** How many words of context make a chat of about `target` tokens on this tokenizer. */
function contextWords(mapper: PromptMapper, announcement: Announcement, target: number): number {
  let words = target;
  for (let round = 0; round < 3; round += 1) {
    const got = mapper.blocksOf(chat(1, words, 0), announcement)?.promptTokens ?? target;
    words = Math.max(TURN_WORDS * 4, Math.round((words * target) / got));
  }
  return words;
}

/**
 * A conversation of about `words` words: a system prompt (most of it), earlier turns, and the
 * last answer and new user message of {@link TURN_WORDS} each. `seed` makes it unlike any other.
 */
function chat(seed: number, words: number, variant: number): PromptSource {
  const random = seededRandom(seed);
  const text = (n: number) => Array.from({ length: n }, () => WORDS[Math.floor(random() * WORDS.length)]).join(' ');
  const turn = Math.floor(words / 8);
  return {
    route: 'chat',
    messages: [
      { role: 'system', content: `You are assistant ${variant}. ${text(words - 3 * turn - TURN_WORDS)}` },
      { role: 'user', content: text(turn) },
      { role: 'assistant', content: text(turn) },
      { role: 'user', content: text(turn) },
      { role: 'assistant', content: text(TURN_WORDS) },
      { role: 'user', content: text(TURN_WORDS) },
    ],
  };
}
