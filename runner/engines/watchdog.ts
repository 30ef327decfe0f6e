/**
 * A launched engine dies with its runner, however the runner dies. A runner that exits runs its
 * 'exit' hook and kills the engine's process group; one killed by SIGKILL (or the OOM killer)
 * runs nothing, and Linux gives Node no parent-death signal. So every engine is launched through
 * the same small POSIX shell step, whatever its binary:
 *
 * - the runner spawns `/bin/sh` in a new process group with one extra pipe, fd {@link WATCH_FD},
 *   whose other end only the runner holds;
 * - the shell starts a watcher in the background, which reads that pipe until it closes and then
 *   SIGKILLs the whole process group (the engine and every worker it forked);
 * - the shell then closes its own copy of the pipe and `exec`s the engine, so the engine keeps
 *   the shell's pid (the group's id, the pid the supervisor reports), its exit code and signal
 *   reach the runner unchanged, and its output goes to the runner's pipes as before.
 *
 * The pipe closes when the runner's process ends, by any means, so the engine goes within the
 * time the kernel takes to deliver the EOF. The watcher ignores SIGTERM, SIGINT and SIGHUP: a
 * graceful stop signals the group, and an engine that ignores SIGTERM must still die if its
 * runner is then killed before the grace runs out. The supervisor SIGKILLs the group once the
 * engine has exited, which ends the watcher too.
 */
import { accessSync, constants } from 'node:fs';
import { delimiter, isAbsolute, join, resolve } from 'node:path';

/** The child's file descriptor of the pipe whose closing tells the watcher the runner is gone. */
export const WATCH_FD = 3;

/** What to spawn for an engine: the shell, its script, and the engine's command line after it. */
export interface WatchedSpawn {
  readonly file: string;
  readonly args: readonly string[];
}

/**
 * The shell step. The watcher is started while the shell ignores the stop signals, so it inherits
 * that (a signal between its start and its own trap cannot end it); the shell then restores them
 * before `exec`, so the engine starts with the default handling the runner would have given it.
 */
const SCRIPT = [
  "trap '' TERM INT HUP",
  `(while read -r _; do :; done <&${WATCH_FD}; kill -s KILL 0) >/dev/null 2>&1 </dev/null &`,
  'trap - TERM INT HUP',
  `exec ${WATCH_FD}<&-`,
  'exec "$@"',
].join('\n');

/** The name the shell reports itself by in `ps`, before it becomes the engine. */
const ARGV0 = 'sluice-engine-watch';

/**
 * The spawn of `command` with `args` under the watchdog; `path` is the engine's PATH. On a
 * platform without POSIX process groups the engine is spawned as it is.
 * @throws {Error} with code ENOENT, as spawn() would, when `command` is not an executable file
 */
export function watchedSpawn(command: string, args: readonly string[], path: string | undefined): WatchedSpawn {
  if (process.platform === 'win32') return { file: command, args };
  return { file: '/bin/sh', args: ['-c', SCRIPT, ARGV0, executable(command, path), ...args] };
}

/** `command` as an absolute path: itself when it names a file, else its first match on `path`. */
function executable(command: string, path: string | undefined): string {
  const candidates = command.includes('/')
    ? [resolve(command)]
    : (path ?? '')
        .split(delimiter)
        .filter((dir) => isAbsolute(dir))
        .map((dir) => join(dir, command));
  for (const candidate of candidates) {
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // Not here, or not executable: the next directory may have it.
    }
  }
  throw Object.assign(new Error(`spawn ${command} ENOENT`), { code: 'ENOENT', path: command });
}
