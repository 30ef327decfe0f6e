/**
 * `sluice bench placement`, by workload: the chat sessions (placement.ts, the default) or the
 * cache-pressure tenants on cache truth (placement-pressure.ts).
 */
import { BenchOptionError } from '../errors.ts';
import type { BenchOptions } from '../options.ts';
import type { Scenario, ScenarioContext } from '../types.ts';
import { placement as sessions } from './placement.ts';
import { runLivePressure } from './placement-pressure.ts';
import type { LivePressureOptions } from './placement-pressure.ts';

/** The workloads `bench placement --workload` takes. */
export const PLACEMENT_WORKLOADS: readonly string[] = Object.freeze(['placement', 'cache-pressure']);

/** The options the placement scenario reads beside the base ones. */
export interface PlacementOptions extends LivePressureOptions {
  /** `placement` (chat sessions) or `cache-pressure` (many tenants' long contexts). @default 'placement' */
  workload?: string;
}

/** The `placement` scenario. */
export const placement: Scenario = {
  summary: `${sessions.summary}; --workload cache-pressure: round-robin, prefix-affinity, kv-aware on 1 and --gateways gateways and nginx on tenants' long contexts, placed on the engines' cache events`,
  async run(raw: BenchOptions, ctx: ScenarioContext) {
    const workload = (raw as PlacementOptions).workload ?? 'placement';
    if (workload === 'cache-pressure') return runLivePressure(raw, ctx);
    if (workload !== 'placement')
      throw new BenchOptionError(
        'workload',
        `invalid workload ${JSON.stringify(workload)}: placement takes ${PLACEMENT_WORKLOADS.join(' or ')}`,
      );
    return sessions.run(raw, ctx);
  },
};
