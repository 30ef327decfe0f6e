import { readFileSync } from 'node:fs';

/**
 * A file's text, or '' when it cannot be read: a log its process has not written yet, or a
 * /proc entry of a process that has ended. The specs read such files while the processes run.
 */
export function textOrEmpty(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return '';
  }
}
