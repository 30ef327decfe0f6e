/**
 * Starting child services (placer/kernel/processes.ts): a child that exits before it listens
 * rejects with its name and last output, never with its arguments, which may hold a secret
 * given by flag.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { startChild } from '../../../placer/kernel/processes.ts';

let dir: string;
let script: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'sluice-processes-'));
  script = join(dir, 'exits.mjs');
  await writeFile(script, "process.stderr.write('cannot start\\n');\nprocess.exit(3);\n");
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('startChild', () => {
  it('rejects a child that exits before listening with its name, its exit code and its output, not its arguments', async () => {
    const secret = 'tok-0123456789abcdef-not-for-logs';
    const failure = await startChild({ script }, ['--runner-token', secret]).then(
      () => undefined,
      (error: Error) => error,
    );
    expect(failure?.message).toContain(`${script} exited (3) before listening`);
    expect(failure?.message).toContain('cannot start');
    expect(failure?.message).not.toContain(secret);
  });

  it('names the child as its caller asks', async () => {
    const failure = await startChild({ script, name: 'the stand-in' }, ['--call-secret', 'x'.repeat(32)]).then(
      () => undefined,
      (error: Error) => error,
    );
    expect(failure?.message).toMatch(/^the stand-in exited \(3\) before listening/);
    expect(failure?.message).not.toContain('x'.repeat(32));
  });
});

describe('reportListening', () => {
  it('leaves a child running whose parent already closed its channel (a stop while it started)', async () => {
    const child = join(dir, 'orphan.mjs');
    const kernel = fileURLToPath(new URL('../../../placer/kernel/processes.ts', import.meta.url));
    await writeFile(
      child,
      `import { reportListening } from ${JSON.stringify(kernel)};\n` +
        "process.disconnect();\nreportListening('http://127.0.0.1:1');\nsetTimeout(() => process.exit(0), 100);\n",
    );
    const code = await new Promise<number | null>((resolve) => {
      const proc = spawn(process.execPath, ['--import', 'tsx', child], { stdio: ['ignore', 'ignore', 'pipe', 'ipc'] });
      proc.on('exit', resolve);
    });
    expect(code).toBe(0);
  });
});
