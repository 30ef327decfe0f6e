/**
 * The Node bench driver's public face: the scenarios `sluice bench` can run, the entry the
 * CLI calls, and the defaults its settings show. k6 scripts, where k6 is installed, run the same scenarios; this driver is what
 * runs them on machines without it (k6 is neither on npm nor in Debian).
 */
import { UnknownScenarioError } from './errors.ts';
import type { BenchOptions } from './options.ts';
import { batch } from './scenarios/batch.ts';
import { feed } from './scenarios/feed.ts';
import { memory } from './scenarios/memory.ts';
import { overhead } from './scenarios/overhead.ts';
import { placement } from './scenarios/placement-workloads.ts';
import { scale } from './scenarios/scale.ts';
import { serverless } from './scenarios/serverless.ts';
import { simulate } from './scenarios/simulate.ts';
import { soak } from './scenarios/soak.ts';
import { streaming } from './scenarios/streaming.ts';
import { tokens } from './scenarios/tokens.ts';
import type { Scenario, ScenarioContext } from './types.ts';

export { BenchError, BenchOptionError, BenchTargetError, UnknownScenarioError } from './errors.ts';
export { LoadClient, assertLocalTarget, runClosedLoop, runOpenLoop } from './load.ts';
export type { LoadClientOptions, LoadTarget, OpenLoopOptions, RunBounds } from './load.ts';
export { LIMITS, benchDefaults, resolveBenchOptions } from './options.ts';
export type { BenchOptions, ResolvedBenchOptions } from './options.ts';
export { Recorder, combine, summarize } from './record.ts';
export type { LoadMode, LoadResult, RunSummary } from './record.ts';
export { distribution, percentile, perSecond, ratio } from './stats.ts';
export type { Distribution } from './stats.ts';
export type { Scenario, ScenarioContext } from './types.ts';
export { SIMULATE_DEFAULTS } from './scenarios/simulate.ts';
export { BATCH_BENCH } from './scenarios/batch.ts';
export { SOAK_DEFAULTS } from './soak/options.ts';
export { FAULT_KINDS } from './soak/schedule.ts';
export { DEFAULT_HOPS } from './vsim/simulation.ts';

/** Every scenario, by the name `sluice bench <name>` takes. */
export const scenarios: Readonly<Record<string, Scenario>> = Object.freeze({
  overhead,
  streaming,
  placement,
  scale,
  memory,
  simulate,
  soak,
  serverless,
  tokens,
  feed,
  batch,
});

/**
 * Runs the scenario named by the single positional argument.
 * @throws {UnknownScenarioError} naming the known scenarios when there is none, several, or an unknown one.
 * @throws {BenchOptionError} for an option out of bounds, before anything starts.
 */
export async function runBench(
  positionals: readonly string[],
  options: BenchOptions,
  ctx: ScenarioContext,
): Promise<{ files: string[] }> {
  const known = Object.keys(scenarios).join(', ');
  const [name, ...extra] = positionals;
  if (name === undefined) throw new UnknownScenarioError(`no scenario given; scenarios: ${known}`);
  if (extra.length > 0)
    throw new UnknownScenarioError(`one scenario at a time, got ${positionals.join(' ')}; scenarios: ${known}`);
  const scenario = Object.hasOwn(scenarios, name) ? scenarios[name] : undefined;
  if (!scenario) throw new UnknownScenarioError(`unknown scenario "${name}"; scenarios: ${known}`);
  try {
    return await scenario.run(options, ctx);
  } catch (error) {
    // The CLI prints an error's first line; what a scenario adds after it (the children's last
    // output, say) is the why, so it goes to the progress channel first.
    const message = (error as Error)?.message ?? '';
    if (message.includes('\n')) (ctx.progress ?? ((t: string) => void process.stderr.write(t)))(`${message}\n`);
    throw error;
  }
}
