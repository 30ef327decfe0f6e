import { readdirSync } from 'node:fs';
import { textOrEmpty } from './files.ts';

/**
 * The command lines of process `pid` and of every process below it, read from /proc (Linux).
 * A spec asserts on the processes it started, never on every process of the machine: other
 * specs run beside it in parallel forks with command lines of their own.
 */
export function processTreeCommandLines(pid: number): string[] {
  const lines: string[] = [];
  const pending = [pid];
  while (pending.length > 0) {
    const at = pending.pop()!;
    const cmdline = textOrEmpty(`/proc/${at}/cmdline`);
    if (cmdline === '') continue; // gone, or a zombie: nothing left to read
    lines.push(cmdline.replace(/\0+$/, '').split('\0').join(' '));
    for (const task of listOrEmpty(`/proc/${at}/task`)) {
      for (const child of textOrEmpty(`/proc/${at}/task/${task}/children`).split(' ')) {
        if (child !== '') pending.push(Number(child));
      }
    }
  }
  return lines;
}

function listOrEmpty(path: string): string[] {
  try {
    return readdirSync(path);
  } catch {
    return [];
  }
}
