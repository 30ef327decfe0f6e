/**
 * Where a gateway that made its own operator or viewer token puts it: a file only its user can
 * read, named by the port, whose path (never the token) is logged. A token printed to a terminal
 * ends up in scrollback, CI logs and screenshots; a file readable by its owner alone does not.
 * A made token is good for one run, so its file lives as long as the process: it is removed when
 * the process exits (any exit that runs Node's exit hooks), and a later run on the same port
 * writes over one a killed process left.
 */
import { rmSync } from 'node:fs';
import { chmod, mkdir, writeFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { join } from 'node:path';
import type { Logger } from '../../placer/kernel/index.ts';
import type { GatewayConfig } from '../options.ts';

/** The folder the file goes in: $XDG_RUNTIME_DIR/sluice when there is one, else ~/.sluice. */
function operatorTokenDir(env: NodeJS.ProcessEnv): string {
  return env.XDG_RUNTIME_DIR ? join(env.XDG_RUNTIME_DIR, 'sluice') : join(homedir(), '.sluice');
}

/** Writes `token` to `<kind>-token-<port>`, mode 0600 in a 0700 folder, removed at exit, and logs where. */
async function keepToken(
  kind: 'operator' | 'viewer',
  token: string,
  port: number,
  env: NodeJS.ProcessEnv,
  logger: Logger,
): Promise<string> {
  const dir = operatorTokenDir(env);
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const file = join(dir, `${kind}-token-${port}`);
  await writeFile(file, `${token}\n`, { mode: 0o600 });
  // An older file keeps its mode through writeFile: make sure of it.
  await chmod(file, 0o600);
  process.once('exit', () => removeQuietly(file));
  logger.info(`${kind} token made for this run (no --${kind}-token given); it is in a file only you can read`, {
    file,
  });
  return file;
}

/** Removes `file` at exit; one that cannot be removed stays, as after a killed process, and is written over by the next run on its port. */
function removeQuietly(file: string): void {
  try {
    rmSync(file, { force: true });
  } catch {}
}

/**
 * How the token of `kind` that a gateway made is kept: `tokens` and `generated` name the config's
 * fields holding it and saying it was made. The keeper writes it with {@link keepToken} and
 * resolves the path, or undefined when the token was given (then the operator has it already).
 */
function madeTokenKeeper<
  T extends 'operatorTokens' | 'viewerTokens',
  G extends 'operatorTokenGenerated' | 'viewerTokenGenerated',
>(kind: 'operator' | 'viewer', tokens: T, generated: G) {
  return async (
    config: Pick<GatewayConfig, T | G>,
    port: number,
    env: NodeJS.ProcessEnv,
    logger: Logger,
  ): Promise<string | undefined> => {
    if (!config[generated]) return undefined;
    return keepToken(kind, config[tokens][0]!, port, env, logger);
  };
}

/**
 * Writes the operator token the gateway made (none was given) to `operator-token-<port>` in
 * {@link operatorTokenDir}, mode 0600 in a 0700 folder, and logs where. Resolves the path, or
 * undefined when the token was given (then the operator has it already).
 */
export const keepOperatorToken = madeTokenKeeper('operator', 'operatorTokens', 'operatorTokenGenerated');

/**
 * Writes the viewer token the gateway made (none was given) to `viewer-token-<port>` beside the
 * operator's, as {@link keepOperatorToken} does. Resolves the path, or undefined when it was given.
 */
export const keepViewerToken = madeTokenKeeper('viewer', 'viewerTokens', 'viewerTokenGenerated');
