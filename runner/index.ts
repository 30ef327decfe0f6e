/**
 * The runner's public face for code outside runner/: what a package user (and the bench in k6/)
 * may import. It builds a runner, and lends the simulated engine with the model it runs on (its
 * profiles, its prefix-cache block size, its timing under load, its call log), so a simulation
 * of a fleet prices calls the way the simulated engine does.
 */
export { createRunner } from './server.ts';
export type { RunnerEnvironment, RunnerServer } from './server.ts';
export type { RunnerOptions } from './options.ts';
export { BLOCK_SIZE, H100_8B_PROFILE, SIM_PROFILES, countCallRuns, createSimEngine, isSimProfileName, jitter, loadScale } from './engines/sim/index.ts';
export type { PrefixCacheTotals, SimEngine, SimProfile } from './engines/sim/index.ts';
