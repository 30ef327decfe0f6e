/**
 * The contract between `sluice bench` and its scenarios: a scenario gets validated-later raw
 * options and what the entry point owns (environment, logger, output, the interrupt signal),
 * and resolves once it has printed and written its figures.
 */
import type { Logger, StartService } from '../../placer/index.ts';
import type { BenchOptions } from './options.ts';

/** What the entry point hands a scenario. Library code reads no globals it could be given. */
export interface ScenarioContext {
  /** Environment for the child processes, and PATH for finding nginx. */
  env: NodeJS.ProcessEnv;
  logger: Logger;
  /** Starts a `sluice` command as a child process: the CLI hands its own (gateway/cli/entry.ts). */
  startService: StartService;
  /** Aborts the benchmark (Ctrl-C): runs stop, children are stopped, the promise rejects. */
  signal?: AbortSignal;
  /** Where the tables go. @default process.stdout */
  write?: (text: string) => void;
  /** Where progress lines go, so stdout stays the figures alone. @default process.stderr */
  progress?: (text: string) => void;
  /** Folder `out` is resolved against. @default process.cwd() */
  cwd?: string;
}

/** A benchmark scenario. */
export interface Scenario {
  /** One line for the usage text. */
  summary: string;
  /** Runs the scenario; resolves with the paths of the files it wrote. */
  run(options: BenchOptions, ctx: ScenarioContext): Promise<{ files: string[] }>;
}
