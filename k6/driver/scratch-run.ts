/**
 * The frame of a scenario that starts a fleet of its own: its start (output channels, time,
 * machine), a signal tied to the caller's, and a scratch folder for the fleet's files, undone
 * however the run ends.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runSignal } from './load.ts';
import { startScenario } from './report.ts';
import type { ScenarioStart } from './report.ts';
import type { ScenarioContext } from './types.ts';

/** What {@link inScratchRun} hands a scenario's run. */
export interface ScratchRun extends ScenarioStart {
  /** Aborts with the caller's signal; undefined when the caller gave none. */
  readonly signal: AbortSignal | undefined;
  /** A fresh folder of the run's own. */
  readonly dir: string;
}

/**
 * Runs `body` with the scenario's start, a signal linked to `ctx`'s and a fresh folder named from
 * `prefix` in the system's temporary folder; after it, however it ends, unlinks the signal and
 * removes the folder. What `body` starts, it stops itself.
 */
export async function inScratchRun<T>(
  ctx: ScenarioContext,
  prefix: string,
  body: (run: ScratchRun) => Promise<T>,
): Promise<T> {
  const start = startScenario(ctx);
  const { signal, release } = runSignal(ctx.signal);
  const dir = await mkdtemp(join(tmpdir(), prefix));
  try {
    return await body({ ...start, signal, dir });
  } finally {
    release();
    await rm(dir, { recursive: true, force: true }).catch(() => undefined);
  }
}
