import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { NvidiaSmiFailedError, NvidiaSmiParseError } from '../../runner/errors.ts';
import {
  NO_NVIDIA_SMI,
  NVIDIA_SMI_ARGS,
  parseNvidiaSmi,
  readGpuInventory,
  runCommand,
} from '../../runner/inventory.ts';
import type { RunCommand } from '../../runner/inventory.ts';

// Hand-written in nvidia-smi's output format (no GPU here to record one); CSV has no comment syntax.
const fixture = (name: string): string =>
  readFileSync(new URL(`../fixtures/nvidia-smi/${name}`, import.meta.url), 'utf8');

/** A failure shaped like execFile's. */
const execError = (fields: Record<string, unknown>): Error =>
  Object.assign(new Error('Command failed: nvidia-smi'), fields);

describe('parseNvidiaSmi', () => {
  it('returns all eight GPUs of an H100 node in index order', () => {
    const gpus = parseNvidiaSmi(fixture('h100x8.csv'));
    expect(gpus.map((g) => g.index)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    expect(gpus[0]).toEqual({
      index: 0,
      uuid: 'GPU-3f8a1c52-9d4e-7b21-c6a0-5e17d2b8f940',
      name: 'NVIDIA H100 80GB HBM3',
      memoryTotalMiB: 81559,
      memoryUsedMiB: 74367,
    });
    expect(gpus[7]).toEqual({
      index: 7,
      uuid: 'GPU-69c0b8a3-5e4f-d17a-2b86-0c9f4e7d3b15',
      name: 'NVIDIA H100 80GB HBM3',
      memoryTotalMiB: 81559,
      memoryUsedMiB: 74291,
    });
    expect(new Set(gpus.map((g) => g.uuid)).size).toBe(8);
  });

  it('returns the one GPU of a single-GPU node', () => {
    expect(parseNvidiaSmi(fixture('l4x1.csv'))).toEqual([
      {
        index: 0,
        uuid: 'GPU-7d2e9f41-b6c3-58a0-e1f4-93c8a0b5d62e',
        name: 'NVIDIA L4',
        memoryTotalMiB: 23034,
        memoryUsedMiB: 0,
      },
    ]);
  });

  it('returns the same GPUs with or without spaces after commas, with CRLF, and with blank lines', () => {
    const plain = '0,GPU-a,NVIDIA A100-SXM4-40GB,40960,3\n1,GPU-b,NVIDIA A100-SXM4-40GB,40960,5';
    const spaced =
      '\n0,   GPU-a , NVIDIA A100-SXM4-40GB, 40960, 3\r\n\r\n1, GPU-b, NVIDIA A100-SXM4-40GB, 40960, 5\r\n\n';
    expect(parseNvidiaSmi(spaced)).toEqual(parseNvidiaSmi(plain));
    expect(parseNvidiaSmi(plain).map((g) => [g.uuid, g.memoryUsedMiB])).toEqual([
      ['GPU-a', 3],
      ['GPU-b', 5],
    ]);
  });

  it('returns null memory where nvidia-smi prints [N/A]', () => {
    expect(parseNvidiaSmi('0, GPU-x, NVIDIA GH200 480GB, [N/A], [N/A]\n')).toEqual([
      { index: 0, uuid: 'GPU-x', name: 'NVIDIA GH200 480GB', memoryTotalMiB: null, memoryUsedMiB: null },
    ]);
  });

  it('returns no GPUs for empty output', () => {
    expect(parseNvidiaSmi('')).toEqual([]);
    expect(parseNvidiaSmi('\n')).toEqual([]);
  });

  const malformed: Array<[string, RegExp]> = [
    ['0, GPU-a, NVIDIA L4, 23034', /expected 5 fields .* got 4/],
    ['0, GPU-a, NVIDIA L4, 23034, 0, 1', /got 6/],
    ['index, uuid, name, memory.total [MiB], memory.used [MiB]', /index must be a non-negative integer, got "index"/],
    ['-1, GPU-a, NVIDIA L4, 23034, 0', /index must be a non-negative integer, got "-1"/],
    ['0, , NVIDIA L4, 23034, 0', /uuid must be an id/],
    ['0, [N/A], NVIDIA L4, 23034, 0', /uuid must be an id/],
    ['0, GPU-a, , 23034, 0', /name is empty/],
    ['0, GPU-a, NVIDIA L4, 23034 MiB, 0', /memory.total must be a whole number of MiB or \[N\/A\], got "23034 MiB"/],
    ['0, GPU-a, NVIDIA L4, 23034, 1.5', /memory.used must be a whole number/],
    ['No devices were found', /expected 5 fields/],
  ];

  it.each(malformed)('throws RUNNER_NVIDIA_SMI_PARSE naming line 2 for %j', (line, why) => {
    let error: unknown;
    try {
      parseNvidiaSmi(`0, GPU-ok, NVIDIA L4, 23034, 0\n${line}\n`);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(NvidiaSmiParseError);
    expect([(error as NvidiaSmiParseError).code, (error as NvidiaSmiParseError).line]).toEqual([
      'RUNNER_NVIDIA_SMI_PARSE',
      2,
    ]);
    expect((error as Error).message).toMatch(/^nvidia-smi output line 2: /);
    expect((error as Error).message).toMatch(why);
  });
});

describe('readGpuInventory', () => {
  it('returns the parsed GPUs from nvidia-smi run with the query arguments', async () => {
    const calls: Array<[string, readonly string[]]> = [];
    const run: RunCommand = async (cmd, args) => {
      calls.push([cmd, args]);
      return { stdout: fixture('h100x8.csv') };
    };
    const inventory = await readGpuInventory(run);
    expect(calls).toEqual([
      ['nvidia-smi', ['--query-gpu=index,uuid,name,memory.total,memory.used', '--format=csv,noheader,nounits']],
    ]);
    expect(inventory.source).toBe('nvidia-smi');
    expect(inventory.gpus).toHaveLength(8);
    expect(NVIDIA_SMI_ARGS).toEqual(calls[0]![1]);
  });

  it('returns no GPUs and says why when nvidia-smi is not installed', async () => {
    const run: RunCommand = () => Promise.reject(execError({ code: 'ENOENT', errno: -2, syscall: 'spawn nvidia-smi' }));
    expect(await readGpuInventory(run)).toStrictEqual({ source: 'none', gpus: [], reason: NO_NVIDIA_SMI });
    expect(NO_NVIDIA_SMI).toBe('nvidia-smi not found: no NVIDIA GPU on this node');
  });

  it("throws RUNNER_NVIDIA_SMI_FAILED with nvidia-smi's own words when it exits non-zero", async () => {
    const cause = execError({
      code: 9,
      stdout: '',
      stderr:
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\nMake sure that the latest NVIDIA driver is installed and running.\n",
    });
    const error = await readGpuInventory(() => Promise.reject(cause)).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(NvidiaSmiFailedError);
    expect((error as NvidiaSmiFailedError).code).toBe('RUNNER_NVIDIA_SMI_FAILED');
    expect((error as Error).message).toBe(
      "nvidia-smi exited with code 9: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
    );
    expect((error as Error).cause).toBe(cause);
  });

  it('throws with the stdout message when nvidia-smi prints its failure there', async () => {
    const error = await readGpuInventory(() =>
      Promise.reject(execError({ code: 6, stdout: 'No devices were found\n', stderr: '' })),
    ).catch((e: unknown) => e);
    expect((error as Error).message).toBe('nvidia-smi exited with code 6: No devices were found');
  });

  it('throws saying it timed out when nvidia-smi is killed for hanging', async () => {
    const error = await readGpuInventory(() =>
      Promise.reject(execError({ killed: true, signal: 'SIGTERM', code: null })),
    ).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(NvidiaSmiFailedError);
    expect((error as Error).message).toBe('nvidia-smi did not answer within 5000 ms (killed by SIGTERM)');
  });

  it('throws RUNNER_NVIDIA_SMI_PARSE when nvidia-smi succeeds with output it was not asked for', async () => {
    const error = await readGpuInventory(async () => ({ stdout: 'Mon Jan  6 10:00:00 2025\n+------+\n' })).catch(
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(NvidiaSmiParseError);
  });
});

describe('runCommand', () => {
  it('returns stdout of a real command', async () => {
    expect(await runCommand(process.execPath, ['-e', 'process.stdout.write("0, GPU-a, X, 1, 0")'])).toEqual({
      stdout: '0, GPU-a, X, 1, 0',
    });
  });

  it('rejects with ENOENT for a missing binary, which readGpuInventory reads as no GPU', async () => {
    const missing: RunCommand = (_cmd, args) => runCommand('/nonexistent/nvidia-smi', args);
    await expect(runCommand('/nonexistent/nvidia-smi', [])).rejects.toMatchObject({ code: 'ENOENT' });
    expect((await readGpuInventory(missing)).source).toBe('none');
  });

  it('rejects with the exit code and stderr of a failing command', async () => {
    await expect(
      runCommand(process.execPath, ['-e', 'process.stderr.write("driver gone"); process.exit(9)']),
    ).rejects.toMatchObject({ code: 9, stderr: 'driver gone' });
  });
});
