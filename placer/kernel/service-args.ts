/**
 * The argument lists that start a simulated engine and a runner as services on port 0, for
 * {@link startService}. `sluice up`, the bench and the specs all build fleets of them, so the
 * flags that make an engine and a runner in front of it are written here once, and each caller
 * adds only what is its own (timings, slots, a log level).
 */

/** What names a simulated engine started by {@link simEngineArgs}. */
export interface SimEngineArgs {
  /** Its engine id (`--engine-id`); without one the engine makes its own. */
  readonly id?: string;
}

/** Where a runner started by {@link runnerArgs} gets its calls and its engine. */
export interface RunnerArgs {
  /** Its id (`--id`); without one the runner makes its own. */
  readonly id?: string;
  /** The URL of the engine it stands in front of (`--engine`); without one it waits for a gateway's orders. */
  readonly engine?: string;
  /** The engine's kind (`--engine-kind`), with an engine. @default 'sim' */
  readonly kind?: string;
  /** A gateway it registers with (`--gateway`). */
  readonly gateway?: string;
}

/** `sim-engine --port 0`, its id when given, then `extra`. */
export function simEngineArgs(engine: SimEngineArgs, extra: readonly string[] = []): string[] {
  return ['sim-engine', '--port', '0', ...flag('--engine-id', engine.id), ...extra];
}

/** `runner --port 0` in front of its engine (of kind sim unless told), its id and gateway when given, then `extra`. */
export function runnerArgs(runner: RunnerArgs, extra: readonly string[] = []): string[] {
  const engine = runner.engine === undefined ? [] : ['--engine', runner.engine, '--engine-kind', runner.kind ?? 'sim'];
  return [
    'runner',
    '--port',
    '0',
    ...engine,
    ...flag('--id', runner.id),
    ...flag('--gateway', runner.gateway),
    ...extra,
  ];
}

function flag(name: string, value: string | undefined): string[] {
  return value === undefined ? [] : [name, value];
}
