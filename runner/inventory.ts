/**
 * The node's GPU inventory, read from nvidia-smi, for the runner's status and for checking that
 * a profile's GPU ids exist before an engine spends minutes loading onto them.
 */
import { execFile } from 'node:child_process';
import { NvidiaSmiFailedError, NvidiaSmiParseError } from './errors.ts';
import type { Gpu, GpuInventory } from './protocol/index.ts';

/** Why a node reports no GPUs when nvidia-smi is not installed. */
export const NO_NVIDIA_SMI = 'nvidia-smi not found: no NVIDIA GPU on this node';

/** Runs a command and resolves with its standard output; rejects as `execFile` does. */
export type RunCommand = (cmd: string, args: readonly string[]) => Promise<{ stdout: string }>;

/** The arguments {@link readGpuInventory} passes to nvidia-smi; {@link parseNvidiaSmi} reads their output. */
export const NVIDIA_SMI_ARGS: readonly string[] = Object.freeze([
  '--query-gpu=index,uuid,name,memory.total,memory.used',
  '--format=csv,noheader,nounits',
]);

/** How long the default runner lets nvidia-smi take: it hangs when the driver is wedged. */
const NVIDIA_SMI_TIMEOUT_MS = 5_000;

const MIB = /^\d+$/;

function mib(field: string, what: string, line: number, text: string): number | null {
  if (field === '[N/A]') return null;
  if (!MIB.test(field))
    throw new NvidiaSmiParseError(
      line,
      `${what} must be a whole number of MiB or [N/A], got ${JSON.stringify(field)}`,
      text,
    );
  return Number(field);
}

/**
 * Parses `nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.used
 * --format=csv,noheader,nounits`. Blank lines and CRLF are tolerated.
 * @throws {NvidiaSmiParseError} on a line that is not five such fields, naming the line.
 */
export function parseNvidiaSmi(csv: string): Gpu[] {
  const gpus: Gpu[] = [];
  const lines = csv.split('\n');
  for (let n = 0; n < lines.length; n++) {
    const text = lines[n]!.replace(/\r$/, '');
    if (text.trim() === '') continue;
    // GPU names have no commas (nvidia-smi does not quote fields), so a plain split is the CSV.
    const fields = text.split(',').map((f) => f.trim());
    if (fields.length !== 5)
      throw new NvidiaSmiParseError(
        n + 1,
        `expected 5 fields (index, uuid, name, memory.total, memory.used), got ${fields.length}`,
        text,
      );
    const [index, uuid, name, total, used] = fields as [string, string, string, string, string];
    if (!MIB.test(index))
      throw new NvidiaSmiParseError(n + 1, `index must be a non-negative integer, got ${JSON.stringify(index)}`, text);
    if (uuid === '' || uuid === '[N/A]' || /\s/.test(uuid))
      throw new NvidiaSmiParseError(n + 1, `uuid must be an id like GPU-..., got ${JSON.stringify(uuid)}`, text);
    if (name === '') throw new NvidiaSmiParseError(n + 1, 'name is empty', text);
    gpus.push({
      index: Number(index),
      uuid,
      name,
      memoryTotalMiB: mib(total, 'memory.total', n + 1, text),
      memoryUsedMiB: mib(used, 'memory.used', n + 1, text),
    });
  }
  return gpus;
}

/** Runs a command with {@link NVIDIA_SMI_TIMEOUT_MS}; the error keeps execFile's code, signal and stderr. */
export const runCommand: RunCommand = (cmd, args) =>
  new Promise((resolve, reject) => {
    execFile(
      cmd,
      [...args],
      { timeout: NVIDIA_SMI_TIMEOUT_MS, encoding: 'utf8', windowsHide: true },
      (error, stdout, stderr) => {
        if (error) reject(Object.assign(error, { stdout, stderr }));
        else resolve({ stdout });
      },
    );
  });

/**
 * Lists this node's GPUs. A node without nvidia-smi has none, said plainly; one where nvidia-smi
 * fails or hangs is a broken GPU node, and that is an error rather than a silent empty list.
 * @param run how to run nvidia-smi; injectable so tests need no GPU. @default {@link runCommand}
 * @throws {NvidiaSmiFailedError} when nvidia-smi exits non-zero, is killed, or cannot start.
 * @throws {NvidiaSmiParseError} when its output is not the CSV asked for.
 */
export async function readGpuInventory(run: RunCommand = runCommand): Promise<GpuInventory> {
  let stdout: string;
  try {
    ({ stdout } = await run('nvidia-smi', NVIDIA_SMI_ARGS));
  } catch (error) {
    const e = error as { code?: unknown; killed?: boolean; signal?: unknown; stderr?: unknown; stdout?: unknown };
    if (e.code === 'ENOENT') return { source: 'none', gpus: [], reason: NO_NVIDIA_SMI };
    if (e.killed)
      throw new NvidiaSmiFailedError(
        `nvidia-smi did not answer within ${NVIDIA_SMI_TIMEOUT_MS} ms (killed by ${String(e.signal)})`,
        { cause: error },
      );
    // nvidia-smi prints "No devices were found" and driver failures on stdout as often as stderr.
    const said = [e.stderr, e.stdout].map((s) => (typeof s === 'string' ? s.trim() : '')).find((s) => s !== '');
    const how =
      typeof e.code === 'number'
        ? `exited with code ${e.code}`
        : `could not run (${String(e.code ?? (error as Error).message)})`;
    throw new NvidiaSmiFailedError(`nvidia-smi ${how}${said ? `: ${said.split('\n')[0]}` : ''}`, { cause: error });
  }
  return { source: 'nvidia-smi', gpus: parseNvidiaSmi(stdout) };
}
