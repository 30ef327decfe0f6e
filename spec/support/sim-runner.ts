/**
 * An in-process simulated engine, and a runner in front of one, on 127.0.0.1 and a free port,
 * each closed by the spec's cleanups (see serversForEach).
 */
import { createSimEngine } from '../../runner/engines/sim/server.ts';
import type { SimEngineOptions } from '../../runner/engines/sim/index.ts';
import type { RunnerOptions } from '../../runner/options.ts';
import { createRunner } from '../../runner/server.ts';
import type { RunnerServer } from '../../runner/server.ts';

/** What undoes a start; run last first after the test or suite. */
export type Cleanups = Array<() => Promise<unknown>>;

/** Where a start leaves what undoes it: a spec's cleanups, whatever else that list also takes. */
export interface UndoList {
  push(undo: () => Promise<unknown>): unknown;
}

/** An engine that answers at once, the sim engine's default of output tokens. */
const INSTANT: SimEngineOptions = { ttftMs: 0, itlMs: 0 };

/** Starts a sim engine with `options`, closed by `cleanups`; resolves with its URL. */
export async function startSimEngine(cleanups: UndoList, options: SimEngineOptions = INSTANT): Promise<string> {
  const engine = createSimEngine(options);
  const { url } = await engine.listen();
  cleanups.push(() => engine.close());
  return url;
}

/** What {@link startSimRunner} started. */
export interface SimRunner {
  readonly engineUrl: string;
  readonly runnerUrl: string;
  readonly runner: RunnerServer;
}

/**
 * Starts a sim engine with `engine` and a runner of kind sim over it with `runner`, both closed by
 * `cleanups` (the runner first, without a drain).
 */
export async function startSimRunner(
  cleanups: UndoList,
  runner: Partial<RunnerOptions> = {},
  engine: SimEngineOptions = INSTANT,
): Promise<SimRunner> {
  const engineUrl = await startSimEngine(cleanups, engine);
  const started = createRunner({ engine: engineUrl, engineKind: 'sim', ...runner });
  const { url: runnerUrl } = await started.listen();
  cleanups.push(() => started.close({ drainTimeout: 0 }));
  return { engineUrl, runnerUrl, runner: started };
}
