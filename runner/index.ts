/**
 * The runner's public face for code outside runner/: what a package user (and the bench in k6/)
 * may import, the composition root (createRunner in server.ts) first. It lends the model the
 * simulated engine runs on (its profiles, its prefix-cache block size, its timing under load,
 * its call log), so a simulation of a fleet prices calls the way the simulated engine does.
 */
export { createRunner } from './server.ts';
export type { RunnerEnvironment, RunnerServer } from './server.ts';
export { runnerDefaults } from './options.ts';
export type { RunnerOptions } from './options.ts';
export { BLOCK_SIZE } from './engines/sim/prefix-cache.ts';
export type { PrefixCacheTotals } from './engines/sim/prefix-cache.ts';
export { H100_8B_PROFILE, SIM_PROFILES, isSimProfileName } from './engines/sim/profiles.ts';
export type { SimProfile } from './engines/sim/profiles.ts';
export { jitter, loadScale } from './engines/sim/timing.ts';
export { countCallRuns, countRequestRuns } from './engines/sim/call-log.ts';
