/**
 * Start-up cost of a sluice process, built against the sources through tsx: the wall time of
 * `sluice --help`, of `sluice gateway` until its first 200 on /healthz (and the CPU it used by
 * then, steadier than wall time on a shared machine), and the gateway's RSS
 * once idle. tsx runs cold (an empty TMPDIR per run, so its compile cache is empty, as on a fresh
 * install, a new container or a read-only /tmp) and warm (one TMPDIR, primed by a first run).
 * Run after `npm run build`:
 *
 *   node dist/k6/driver/startup.js [--runs 10]
 *
 * A benchmark, not a test: it prints figures and fails only when a process does not start.
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { childPids, readProcessMemory, readProcessTreeMemory } from './process-memory.ts';
import { freePort } from '../../placer/index.ts';

/** The checkout's root, from this file in k6/driver/ or in dist/k6/driver/. */
const root = fileURLToPath(new URL(import.meta.url.endsWith('.ts') ? '../../' : '../../../', import.meta.url));
const BUILT = join(root, 'gateway/cli/sluice.mjs');
const SOURCES = join(root, 'gateway/cli/tsx-sluice.mjs');
/** How long a started gateway sits idle before its RSS is read. */
const IDLE_MS = 2000;
/** Longest wait for a gateway's first 200 on /healthz. */
const START_TIMEOUT_MS = 60_000;

interface Mode {
  readonly name: string;
  readonly bin: string;
  /** The TMPDIR of one run: a fresh one per run for a cold tsx cache, one shared for warm. */
  tmp(): string;
}

interface GatewayStart {
  readonly ms: number;
  /** CPU time (user + system) the gateway and its children had used by the first 200. */
  readonly cpuMs: number;
  readonly rssMiB: number;
  readonly treeRssMiB: number;
}

/** The table's columns of gateway starts: heading, width (the last unpadded), and each start's figure with its unit. */
const START_COLUMNS: readonly { heading: string; width: number; unit: string; of: (s: GatewayStart) => number }[] = [
  { heading: 'gateway to /healthz', width: 21, unit: 'ms', of: (s) => s.ms },
  { heading: 'its CPU to /healthz', width: 21, unit: 'ms', of: (s) => s.cpuMs },
  { heading: 'gateway RSS MiB', width: 17, unit: '', of: (s) => s.rssMiB },
  { heading: 'with children MiB', width: 0, unit: '', of: (s) => s.treeRssMiB },
];

const temporary: string[] = [];
const fresh = (): string => {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-startup-'));
  temporary.push(dir);
  return dir;
};

async function main(argv: readonly string[]): Promise<void> {
  const runsAt = argv.indexOf('--runs');
  const runs = runsAt >= 0 ? Number(argv[runsAt + 1]) : 10;
  if (!Number.isInteger(runs) || runs < 1 || runs > 100)
    throw new Error(`--runs must be an integer from 1 to 100, got ${argv[runsAt + 1]}`);
  if (!existsSync(join(root, 'dist/gateway/cli/main.js'))) throw new Error('no build: run `npm run build` first');

  const warm = fresh();
  const modes: Mode[] = [
    { name: 'tsx, cold cache', bin: SOURCES, tmp: fresh },
    { name: 'tsx, warm cache', bin: SOURCES, tmp: () => warm },
    { name: 'built', bin: BUILT, tmp: () => warm },
  ];
  // Primes the warm cache and the page cache for every mode.
  for (const mode of modes) helpMs(mode);

  console.log(`node ${process.version}, ${runs} runs per mode, medians (min-max)`);
  console.log(
    ['mode'.padEnd(16), 'sluice --help'.padEnd(19), ...START_COLUMNS.map((c) => c.heading.padEnd(c.width))].join('  '),
  );
  // Modes take turns within each run, so a busy spell on a shared machine hits all of them.
  const help = modes.map((): number[] => []);
  const starts = modes.map((): GatewayStart[] => []);
  for (let i = 0; i < runs; i++) {
    for (const [m, mode] of modes.entries()) {
      help[m]!.push(helpMs(mode));
      starts[m]!.push(await gatewayStart(mode));
    }
  }
  for (const [m, mode] of modes.entries()) {
    console.log(
      [
        mode.name.padEnd(16),
        spread(help[m]!, 'ms').padEnd(19),
        ...START_COLUMNS.map((c) => spread(starts[m]!.map(c.of), c.unit).padEnd(c.width)),
      ].join('  '),
    );
  }
}

function helpMs(mode: Mode): number {
  const started = performance.now();
  const run = spawnSync(process.execPath, [mode.bin, '--help'], {
    env: { ...process.env, TMPDIR: mode.tmp() },
    stdio: 'ignore',
    timeout: START_TIMEOUT_MS,
  });
  if (run.status !== 0) throw new Error(`sluice --help (${mode.name}) exited ${run.status ?? run.signal}`);
  return performance.now() - started;
}

async function gatewayStart(mode: Mode): Promise<GatewayStart> {
  const port = await freePort();
  const started = performance.now();
  // No runners: registering ones are allowed (a runner token), none comes, so the gateway idles.
  const child = spawn(process.execPath, [mode.bin, 'gateway', '--port', String(port), '--log-level', 'error'], {
    env: {
      ...process.env,
      TMPDIR: mode.tmp(),
      SLUICE_RUNNER_TOKEN: 'startup-bench-token-0123456789abcdef',
      SLUICE_OPERATOR_TOKEN: 'startup-bench-operator-0123456789',
    },
    stdio: 'ignore',
  });
  try {
    while (!(await healthy(port))) {
      if (child.exitCode !== null) throw new Error(`sluice gateway (${mode.name}) exited ${child.exitCode}`);
      if (performance.now() - started > START_TIMEOUT_MS)
        throw new Error(`sluice gateway (${mode.name}) gave no 200 on /healthz within ${START_TIMEOUT_MS} ms`);
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    const ms = performance.now() - started;
    const cpuMs = treeCpuMs(child.pid!);
    await new Promise((resolve) => setTimeout(resolve, IDLE_MS));
    const own = readProcessMemory(child.pid);
    const tree = readProcessTreeMemory(child.pid);
    return { ms, cpuMs, rssMiB: (own?.rssKiB ?? NaN) / 1024, treeRssMiB: (tree?.rssKiB ?? NaN) / 1024 };
  } finally {
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      await exited;
    }
  }
}

/** User + system CPU of `pid` and its children (tsx's esbuild service), in ms, from /proc. */
function treeCpuMs(pid: number): number {
  const ticks = (p: number): number => {
    try {
      // Fields after the command name (which may hold spaces): utime and stime are the 12th and 13th.
      const fields = readFileSync(`/proc/${p}/stat`, 'utf8').split(') ')[1]!.split(' ');
      return Number(fields[11]) + Number(fields[12]);
    } catch {
      return 0;
    }
  };
  // USER_HZ is 100 on every mainstream Linux ABI.
  return [pid, ...childPids(pid)].reduce((sum, p) => sum + ticks(p), 0) * 10;
}

async function healthy(port: number): Promise<boolean> {
  try {
    return (await fetch(`http://127.0.0.1:${port}/healthz`)).status === 200;
  } catch {
    return false;
  }
}

function spread(values: readonly number[], unit: string): string {
  const sorted = [...values].sort((a, b) => a - b);
  const median = sorted[Math.floor(sorted.length / 2)]!;
  const fmt = (v: number): string => String(Math.round(v));
  return `${fmt(median)}${unit} (${fmt(sorted[0]!)}-${fmt(sorted.at(-1)!)})`;
}

try {
  await main(process.argv.slice(2));
} finally {
  for (const dir of temporary) rmSync(dir, { recursive: true, force: true });
}
