/**
 * Secrets in one place: reading them from files, and comparing what a caller presents against
 * them. A secret on the command line is visible to every user of the machine (ps, /proc), so each
 * one can also come from a file that only the service's user may read.
 *
 * A secret file is read at start-up (a gateway reads its runner tokens again on SIGHUP). Its
 * lines are trimmed; blank lines and lines starting with `#` are skipped, so a file can carry a
 * comment about where its secrets come from (and a secret in a file cannot start with `#`;
 * generated tokens and `whsec_` secrets never do). A file that anyone on the machine may read, or
 * that holds no secret, is refused with a message naming the file, never its content.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { closeSync, fstatSync, openSync, readFileSync } from 'node:fs';
import { SecretFileError } from '../errors.ts';

/** Windows has no mode bits to check: there, access is the file's ACL's business. */
const CHECK_MODE = process.platform !== 'win32';

/**
 * Reads a file of secrets, one per line, in order.
 * @param option the setting that named the file, for messages (`runnerTokenFile`).
 * @throws {@link SecretFileError} when the file cannot be read, may be read by anyone, or holds none.
 */
export function readSecretLines(option: string, path: string): string[] {
  const fail = (why: string, cause?: unknown): SecretFileError =>
    new SecretFileError(`${option} ${JSON.stringify(path)} ${why}`, cause === undefined ? undefined : { cause });
  if (typeof path !== 'string' || path === '') throw new SecretFileError(`${option} must name a file`);
  let mode: number;
  let text: string;
  try {
    // One open file for both questions: the mode read is the mode of the file read.
    const fd = openSync(path, 'r');
    try {
      mode = fstatSync(fd).mode;
      text = readFileSync(fd, 'utf8');
    } finally {
      closeSync(fd);
    }
  } catch (cause) {
    // The code only: a message from the file system could quote more than the path.
    throw fail(`cannot be read (${(cause as NodeJS.ErrnoException).code ?? 'error'})`, cause);
  }
  if (CHECK_MODE && (mode & 0o004) !== 0) {
    throw fail(
      `may be read by any user of this machine (mode ${(mode & 0o777).toString(8).padStart(3, '0')}); chmod o-r it (640 or 600)`,
    );
  }
  const lines = text
    .split(/\r?\n/)
    .map((line) => line.trim())
    .filter((line) => line !== '' && !line.startsWith('#'));
  if (lines.length === 0) throw fail('holds no secret: every line is blank or a # comment');
  return lines;
}

/**
 * Secrets that are all valid at once (a list, so one can be rotated without downtime: the new one
 * added, callers moved over, the old one removed). What a caller presents is hashed and compared
 * with every entry in constant time, so neither the answer's timing nor an early exit tells how
 * much of a guess was right, or which entry it came close to.
 */
export class SecretList {
  readonly #digests: readonly Buffer[];

  /** @param secrets in order; {@link match} answers with a position in this list. */
  constructor(secrets: readonly string[]) {
    this.#digests = Object.freeze(secrets.map(secretDigest));
  }

  /** How many secrets the list holds. */
  get size(): number {
    return this.#digests.length;
  }

  /** The position of `presented` in the list, or undefined when it is none of them. */
  match(presented: string): number | undefined {
    return this.matchDigest(secretDigest(presented));
  }

  /**
   * {@link match} for a presented secret already hashed with {@link secretDigest}: a caller
   * checking one token against several lists hashes it once.
   */
  matchDigest(candidate: Buffer): number | undefined {
    let found: number | undefined;
    // Every entry is compared, a match or not, so the time taken says nothing about the list.
    this.#digests.forEach((d, i) => {
      if (timingSafeEqual(candidate, d) && found === undefined) found = i;
    });
    return found;
  }
}

/** The SHA-256 a {@link SecretList} compares secrets by. */
export function secretDigest(secret: string): Buffer {
  return createHash('sha256').update(secret).digest();
}
