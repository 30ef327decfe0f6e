/**
 * Every sluice command, by name, each loaded when it is asked for: `sluice sim-engine` does not
 * pay for loading the gateway, nor any product command for the bench. The product's commands
 * live in this folder (gateway-command.ts, runner-command.ts, sim-command.ts, up.ts, and
 * bench-command.ts, which alone loads the bench in k6/driver/).
 */
import type { Command } from './command.ts';

export type { Command, CommandContext, Stop } from './command.ts';

/** Loads each command's table. */
export const commands: Readonly<Record<string, () => Promise<Command>>> = Object.freeze({
  up: async () => (await import('./up.ts')).up,
  gateway: async () => (await import('./gateway-command.ts')).gateway,
  runner: async () => (await import('./runner-command.ts')).runner,
  'sim-engine': async () => (await import('./sim-command.ts')).simEngine,
  keys: async () => (await import('./keys-command.ts')).keys,
  // The bench sits beside the product: its command loads it, on demand.
  bench: async () => (await import('./bench-command.ts')).bench,
});

/** The command named `name`, or undefined when there is none. */
export function loadCommand(name: string): Promise<Command> | undefined {
  return Object.hasOwn(commands, name) ? commands[name]!() : undefined;
}

/** The bench's scenario names, read from its table, for `sluice --help`. */
export async function benchScenarioNames(): Promise<readonly string[]> {
  return (await import('./bench-command.ts')).benchScenarioNames;
}
