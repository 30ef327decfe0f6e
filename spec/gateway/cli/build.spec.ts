/**
 * The production build: tsconfig.build.json compiled into a temporary checkout that holds only
 * the bin and the build (no TypeScript sources, no tsx entry), so every process that answers
 * there ran compiled JavaScript. It checks that the bin runs the build, that a built process
 * starts its children from the build, and that the specs themselves start the sources.
 */
import { execFile, execFileSync, spawn, spawnSync } from 'node:child_process';
import {
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  realpathSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SLUICE_BIN } from '../../../gateway/cli/entry.ts';
import { childPids } from '../../../k6/driver/process-memory.ts';
import { alive } from '../../support/faults.ts';
import { chatBody, postJson } from '../../support/fleet.ts';

const run = promisify(execFile);
const root = fileURLToPath(new URL('../../../', import.meta.url));
const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');

describe('the production build', () => {
  let dir = '';
  let bin = '';

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'sluice-build-'));
    mkdirSync(join(dir, 'gateway/cli'), { recursive: true });
    bin = join(dir, 'gateway/cli/sluice.mjs');
    copyFileSync(join(root, 'gateway/cli/sluice.mjs'), bin);
    symlinkSync(realpathSync(join(root, 'node_modules')), join(dir, 'node_modules'));
    await run(process.execPath, [tsc, '-p', join(root, 'tsconfig.build.json'), '--outDir', join(dir, 'dist')], {
      cwd: root,
    });
  }, 240_000);

  afterAll(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('prints the same help from the build as from the sources', () => {
    const built = execFileSync(process.execPath, [bin, '--help'], { encoding: 'utf8' });
    const sources = execFileSync(process.execPath, [SLUICE_BIN, '--help'], { encoding: 'utf8' });
    expect(built).toContain('benchmark scenarios: ');
    expect(built).toBe(sources);
  });

  it('reads the version from the package.json copied beside the build', () => {
    const script = `const { VERSION } = await import(${JSON.stringify(join(dir, 'dist/runner/protocol/version.js'))}); console.log(VERSION);`;
    const version = execFileSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' }).trim();
    expect(version).toBe((JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version: string }).version);
  });

  it('starts children with the bin when built, and with tsx-sluice.mjs on the sources', () => {
    const script = `const { SLUICE_BIN } = await import(${JSON.stringify(join(dir, 'dist/gateway/cli/entry.js'))}); console.log(SLUICE_BIN);`;
    expect(execFileSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' }).trim()).toBe(
      bin,
    );
    expect(SLUICE_BIN).toBe(join(root, 'gateway/cli/tsx-sluice.mjs'));
  });

  it("starts the bench's bare proxy from the build, as the overhead scenario does when the bin runs the build", async () => {
    // It answers a request to an upstream nobody listens on with its own 502: it started and serves.
    const script =
      `const { startBareProxy } = await import(${JSON.stringify(join(dir, 'dist/k6/driver/bare-proxy.js'))});` +
      `const proxy = await startBareProxy('http://127.0.0.1:9', process.env);` +
      `const answer = await fetch(proxy.url + '/x'); console.log(answer.status); await proxy.stop();`;
    const { stdout } = await run(process.execPath, ['--input-type=module', '-e', script], {
      encoding: 'utf8',
      timeout: 30_000,
    });
    expect(stdout.trim()).toBe('502');
  });

  it('never runs a build older than a source: it says so and turns to the sources', () => {
    const source = join(dir, 'placer/edited.ts');
    mkdirSync(join(dir, 'placer'), { recursive: true });
    // A source written after the build; the temporary checkout has no tsx entry to turn to, so the
    // bin's fallback fails, which shows it did not run the stale build.
    writeFileSync(source, 'export {};\n');
    try {
      const ran = spawnSync(process.execPath, [bin, '--help'], { encoding: 'utf8' });
      expect(ran.stderr).toContain('dist/ is older than the sources; running the sources through tsx');
      expect(ran.stdout).not.toContain('benchmark scenarios: ');
    } finally {
      rmSync(join(dir, 'placer'), { recursive: true, force: true });
    }
    expect(execFileSync(process.execPath, [bin, '--help'], { encoding: 'utf8' })).toContain('benchmark scenarios: ');
  });

  it('serves a call through `sluice up` run from the build, its children built too', async () => {
    const up = spawn(process.execPath, [bin, 'up', '--port', '0', '--log-level', 'warn'], {
      stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
    });
    let stderr = '';
    up.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
    const exited = new Promise<number | null>((resolve) => up.once('exit', (code) => resolve(code)));
    try {
      const url = await new Promise<string>((resolve, reject) => {
        up.on(
          'message',
          (m: { type?: string; url?: string }) =>
            m?.type === 'listening' && typeof m.url === 'string' && resolve(m.url),
        );
        up.once('exit', (code) => reject(new Error(`sluice up exited (${code}) before listening\n${stderr}`)));
      });
      const res = await postJson(`${url}/v1/chat/completions`, chatBody());
      expect(res.status).toBe(200);
      expect(res.json.object).toBe('chat.completion');
      // Two runners and two engines, each started from the temporary checkout's bin.
      const children = childPids(up.pid!)
        .map(commandLine)
        .filter((line) => line.includes('sluice'));
      expect(children).toHaveLength(4);
      for (const line of children) expect(line).toContain(`${bin} `);
      const pids = childPids(up.pid!);
      up.kill('SIGINT');
      expect(await exited).toBe(0);
      for (const pid of pids) expect(alive(pid)).toBe(false);
    } finally {
      if (up.exitCode === null && up.signalCode === null) up.kill('SIGKILL');
    }
  }, 60_000);
});

/** A process's command line, or '' once it has ended. */
function commandLine(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ');
  } catch {
    return '';
  }
}
