/**
 * The `sluice` entry point: parses settings, wires telemetry and logging, starts the piece
 * asked for, and stops it on SIGTERM/SIGINT; SIGHUP reloads what can be reloaded and never
 * stops it. The only module that reads process.env or
 * decides the process's exit code. Everything it prints goes through one redactor that knows
 * the secret settings' values, so no log line or failure message shows them.
 */
import { createLogger, isLogFormat, isLogLevel } from '../../placer/kernel/index.ts';
import type { Logger, LogLevel } from '../../placer/kernel/index.ts';
import { SluiceError } from '../../placer/kernel/index.ts';
import { createRedactor, redactUrl } from '../../placer/kernel/index.ts';
import type { Redact } from '../../placer/kernel/index.ts';
import { VERSION } from '../../runner/protocol/version.ts';
import { benchScenarioNames, loadCommand } from './commands.ts';
import type { Command, CommandContext, Stop } from './commands.ts';
import { SettingsError, formatHelp, resolveSettings, secretValues } from './settings.ts';
import type { Resolved } from './settings.ts';

/** The top-level help; the bench's scenarios are read from its command table. */
const usage = (
  scenarios: readonly string[],
): string => `sluice ${VERSION}: a load-balancing gateway for inference fleets

usage: sluice <command> [flags]

commands:
  up           the embedded default: a gateway with runners in front of simulated engines
  gateway      the gateway alone, in front of --runners and/or registering runners
  runner       a runner in front of one OpenAI-compatible engine
  sim-engine   a simulated OpenAI-compatible inference engine (for machines without a GPU)
  keys new     make a client key: prints it once, and its entry for the keys file (--keys)
  bench        benchmark scenarios: ${scenarios.join(', ')}

sluice <command> --help lists a command's flags.`;

/** Runs the command in `argv`; resolves with the process exit code once it has stopped. */
export async function main(argv: readonly string[], env: NodeJS.ProcessEnv): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
    process.stdout.write(`${usage(await benchScenarioNames())}\n`);
    return name === undefined ? 2 : 0;
  }
  if (name === '--version' || name === 'version') {
    process.stdout.write(`${VERSION}\n`);
    return 0;
  }
  const command: Command | undefined = await loadCommand(name);
  if (!command) {
    process.stderr.write(`sluice: unknown command "${name}"; sluice --help lists the commands\n`);
    return 2;
  }

  let resolved: Resolved;
  try {
    resolved = resolveSettings(command.settings, rest, env, command);
  } catch (error) {
    return fail(name, error);
  }
  if (resolved.help) {
    process.stdout.write(
      `${formatHelp(`sluice ${name}${command.args ?? ''} [flags]`, command.summary, command.settings, command)}\n`,
    );
    return 0;
  }
  // Library messages (ioredis, undici, option checks) may quote what they were given.
  const redact = createRedactor(secretValues(command.settings, resolved.values));
  const level = String(resolved.values.logLevel ?? 'info');
  if (!isLogLevel(level))
    return fail(
      name,
      new SettingsError(`invalid --log-level "${level}": expected debug, info, warn, error or silent`),
      redact,
    );
  // Pretty for a person at a terminal, JSON for whatever collects the lines otherwise.
  const format = String(resolved.values.logFormat ?? (process.stdout.isTTY ? 'pretty' : 'json'));
  if (!isLogFormat(format))
    return fail(name, new SettingsError(`invalid --log-format "${format}": expected pretty or json`), redact);
  const logger = createLogger({ level: level as LogLevel, format, fields: { component: name }, redact });

  // The format settled, so that a command starting others (up) hands them the same.
  const values = { ...resolved.values, logFormat: format };
  const ctx = { values, positionals: resolved.positionals, env, logger, redact };
  if (command.oneShot) return runOnce(name, command, ctx);
  keepOnHangup(logger);
  let stop: Stop;
  try {
    stop = await command.run(ctx);
  } catch (error) {
    return fail(name, error, redact);
  }
  return waitForShutdown(stop, logger);
}

/**
 * Runs a one-shot command to its end: SIGINT/SIGTERM abort its signal so it stops what it
 * started; a second signal exits at once. Exit code 0 when done, 130 when interrupted.
 */
async function runOnce(name: string, command: Command, ctx: CommandContext): Promise<number> {
  const controller = new AbortController();
  const onSignal = (): void => {
    if (controller.signal.aborted) process.exit(130);
    controller.abort(new Error('interrupted'));
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  try {
    const stop = await command.run({ ...ctx, signal: controller.signal });
    await stop();
    return controller.signal.aborted ? 130 : 0;
  } catch (error) {
    if (!controller.signal.aborted) return fail(name, error, ctx.redact);
    process.stderr.write(`sluice ${name}: interrupted\n`);
    return 130;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}

/**
 * Prints one line for a start-up failure; exit code 2 for bad settings, 1 otherwise. Before the
 * settings are read, `redact` can only mask URL passwords; settings errors hide secrets themselves.
 */
function fail(command: string, error: unknown, redact: Redact = redactUrl): number {
  const message = error instanceof Error ? error.message : String(error);
  process.stderr.write(`sluice ${command}: ${redact(message.split('\n')[0]!)}\n`);
  return error instanceof SettingsError || error instanceof SluiceError ? 2 : 1;
}

/**
 * SIGHUP never ends a serving process: a closed terminal sends it, and its default action would
 * kill the process without a drain. The pieces that read files again on SIGHUP (the gateway's
 * runner tokens and keys file) listen for it themselves; this listener, there from the start,
 * keeps the signal from ending the process and says in the log what it did.
 */
function keepOnHangup(logger: Logger): void {
  process.on('SIGHUP', function onHangup() {
    const reloading = process.listeners('SIGHUP').some((listener) => listener !== onHangup);
    logger.info(reloading ? 'sighup: reading files again' : 'sighup ignored: nothing to reload', { signal: 'SIGHUP' });
  });
}

/**
 * Resolves after a graceful stop on SIGTERM, SIGINT or the parent's IPC channel closing.
 * A second signal exits at once.
 */
function waitForShutdown(stop: Stop, logger: Logger): Promise<number> {
  return new Promise<number>((resolve) => {
    let stopping = false;
    // Stopped by itself (not by a signal): exit as after a graceful stop. Settling here also
    // keeps the process from ending with the top-level await still pending (exit code 13).
    stop.done?.then(
      () => {
        if (stopping) return;
        stopping = true;
        logger.info('stopped', { reason: 'finished' });
        resolve(0);
      },
      () => resolve(1),
    );
    const onSignal = (reason: string) => {
      if (stopping) {
        logger.warn('second signal, exiting now', { reason });
        process.exit(130);
      }
      stopping = true;
      logger.info('shutting down', { reason });
      stop().then(
        () => resolve(0),
        (error: unknown) => {
          logger.error('shutdown failed', { error: error as Error });
          resolve(1);
        },
      );
    };
    process.on('SIGTERM', () => onSignal('SIGTERM'));
    process.on('SIGINT', () => onSignal('SIGINT'));
    // Started by `sluice up` or a test: when the parent goes, so do we.
    if (process.send) process.on('disconnect', () => onSignal('parent exited'));
  });
}
