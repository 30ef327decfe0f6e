/**
 * Resident memory and open files of the processes under test, read from Linux's /proc, so the
 * memory scenario can say what a held stream costs a proxy. RSS is what the kernel has given
 * the process and not taken back: V8's heap, buffers outside it, and every socket's user-space
 * state. The kernel's own socket buffers are not in it; they do not belong to the process.
 *
 * The open-file limit matters as much as the memory: every stream a proxy relays holds two
 * sockets in it (the client's and the upstream's), so the limit caps the streams it can hold.
 * Elsewhere (no /proc) every reading is undefined and the scenario refuses to run.
 */
import { readFileSync, readdirSync } from 'node:fs';

/** One reading of a process's memory, KiB as /proc prints it. */
export interface ProcessMemory {
  /** Resident set size now (`VmRSS`). */
  rssKiB: number;
  /** The highest resident set size since the process started (`VmHWM`). */
  hwmKiB: number;
}

/** Fds a proxy process holds whatever its load: stdio, IPC, the listening socket, epoll, the loader's pipes. */
export const FD_RESERVE = 100;

/** Sockets one relayed stream holds in a proxy: the client's and the upstream's. */
export const SOCKETS_PER_STREAM = 2;

/**
 * Reads `VmRSS` and `VmHWM` from the text of /proc/<pid>/status.
 * @returns undefined when either line is missing (a kernel thread, a zombie) or not a kB figure.
 */
export function parseStatusMemory(status: string): ProcessMemory | undefined {
  const rssKiB = statusKiB(status, 'VmRSS');
  const hwmKiB = statusKiB(status, 'VmHWM');
  return rssKiB === undefined || hwmKiB === undefined ? undefined : { rssKiB, hwmKiB };
}

/**
 * Reads the soft "Max open files" limit from the text of /proc/<pid>/limits: the one the
 * process hits. `unlimited` reads as Infinity.
 * @returns undefined when the line is missing or unreadable.
 */
export function parseOpenFileLimit(limits: string): number | undefined {
  const match = /^Max open files\s+(\d+|unlimited)\s/m.exec(limits);
  if (!match) return undefined;
  return match[1] === 'unlimited' ? Number.POSITIVE_INFINITY : Number(match[1]);
}

/**
 * The most streams a proxy with `fdLimit` open files can relay at once: the limit less
 * `reserve`, shared out `socketsPerStream` to a stream. At least 0.
 */
export function streamCeiling(fdLimit: number, reserve = FD_RESERVE, socketsPerStream = SOCKETS_PER_STREAM): number {
  if (fdLimit === Number.POSITIVE_INFINITY) return Number.POSITIVE_INFINITY;
  return Math.max(0, Math.floor((fdLimit - reserve) / socketsPerStream));
}

/** The memory of `pid` now; undefined when /proc cannot tell (the process is gone, or this is not Linux). */
export function readProcessMemory(pid: number | undefined): ProcessMemory | undefined {
  if (pid === undefined) return undefined;
  return parseStatusMemory(readOrEmpty(`/proc/${pid}/status`));
}

/**
 * The memory of `pid` and its direct children summed (nginx's master and its worker). The
 * summed high-water mark is an upper bound: the two peaks need not have been at one moment.
 */
export function readProcessTreeMemory(pid: number | undefined): ProcessMemory | undefined {
  const own = readProcessMemory(pid);
  if (pid === undefined || own === undefined) return own;
  const total = { ...own };
  for (const child of childPids(pid)) {
    const memory = readProcessMemory(child);
    if (!memory) continue;
    total.rssKiB += memory.rssKiB;
    total.hwmKiB += memory.hwmKiB;
  }
  return total;
}

/** The soft open-file limit of `pid` (or of this process); undefined when /proc cannot tell. */
export function readOpenFileLimit(pid: number | 'self' = 'self'): number | undefined {
  return parseOpenFileLimit(readOrEmpty(`/proc/${pid}/limits`));
}

/** Fds `pid` has open now; undefined when /proc cannot tell. Lists the folder, so keep it off hot paths. */
export function countOpenFiles(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined;
  try {
    return readdirSync(`/proc/${pid}/fd`).length;
  } catch {
    return undefined;
  }
}

/** The direct children of `pid`, by the kernel's own list. */
export function childPids(pid: number): number[] {
  return readOrEmpty(`/proc/${pid}/task/${pid}/children`).trim().split(/\s+/).filter(Boolean).map(Number);
}

function statusKiB(status: string, field: string): number | undefined {
  const match = new RegExp(`^${field}:\\s+(\\d+) kB$`, 'm').exec(status);
  return match ? Number(match[1]) : undefined;
}

function readOrEmpty(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return '';
  }
}
