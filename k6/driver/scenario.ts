/** The start every scenario on the common bench options shares: options resolved, output and start stamped. */
import { resolveBenchOptions } from './options.ts';
import type { ResolvedBenchOptions } from './options.ts';
import { startScenario } from './report.ts';
import type { ScenarioStart } from './report.ts';
import type { Scenario, ScenarioContext } from './types.ts';

/** What a {@link benchScenario} runs once its options are resolved and its start is stamped. */
export type BenchRun = (
  options: ResolvedBenchOptions,
  start: ScenarioStart,
  ctx: ScenarioContext,
) => Promise<{ files: string[] }>;

/**
 * A scenario that takes the common bench options: it resolves them (a bad one throws before
 * anything starts), stamps its start and hands both to `run`.
 */
export function benchScenario(summary: string, run: BenchRun): Scenario {
  return {
    summary,
    run: async (raw, ctx) => run(resolveBenchOptions(raw), startScenario(ctx), ctx),
  };
}
