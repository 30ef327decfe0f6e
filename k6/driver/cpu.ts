/**
 * CPU time of the processes under test, read from Linux's /proc, so a report can say which
 * process was the bottleneck: on a 2-core box, a proxy at 100 % of a core is saturated, and a
 * driver at 100 % means the figures are the driver's limit, not the target's.
 * Elsewhere (no /proc) every reading is undefined and the report leaves the column out.
 */
import { readFileSync } from 'node:fs';
import { childPids } from './process-memory.ts';

/** Clock ticks per second of /proc's utime and stime: USER_HZ, 100 on every mainstream Linux ABI. */
const TICKS_PER_SECOND = 100;

/**
 * User + system CPU time of `pid` and its direct children (nginx's worker is a child of the
 * master), in ms; undefined when /proc cannot tell.
 */
function processCpuMs(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined;
  const own = readTicks(pid);
  if (own === undefined) return undefined;
  let ticks = own;
  for (const child of childPids(pid)) ticks += readTicks(child) ?? 0;
  return (ticks * 1000) / TICKS_PER_SECOND;
}

/** Samples the CPU time of named processes; `stop()` gives each one's use as % of one core. */
export function startCpuSample(pids: Readonly<Record<string, number | undefined>>): { stop(): Record<string, number> } {
  const started = performance.now();
  const before = Object.fromEntries(Object.entries(pids).map(([name, pid]) => [name, processCpuMs(pid)]));
  const self = process.cpuUsage();
  return {
    stop() {
      const wall = performance.now() - started;
      const out: Record<string, number> = {};
      // The driver's own share tells whether it, rather than the target, set the pace.
      const used = process.cpuUsage(self);
      out.driver = round(((used.user + used.system) / 1000 / wall) * 100);
      for (const [name, pid] of Object.entries(pids)) {
        const a = before[name];
        const b = processCpuMs(pid);
        if (a !== undefined && b !== undefined && wall > 0) out[name] = round(((b - a) / wall) * 100);
      }
      return out;
    },
  };
}

function readTicks(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) may hold spaces and parentheses; fields after the last ')' are fixed.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // utime and stime are fields 14 and 15 of the line; this slice starts at field 3 (state).
    return Number(fields[11]) + Number(fields[12]);
  } catch {
    return undefined;
  }
}

// One decimal: whole percents would quantise the per-request figures derived from them.
function round(v: number): number {
  return Math.round(v * 10) / 10;
}
