/**
 * `--deployments` on `sluice gateway`: a bad file stops the gateway (exit 2) with one line per
 * problem, never quoting an engine's args or env values; a good one is served on
 * /v1/deployments as the file's, read-only.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { SLUICE_BIN, startService } from '../../../gateway/cli/entry.ts';
import { asOperator, getJson, operatorEnv } from '../../support/fleet.ts';

function cleanEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env))
    if (!name.startsWith('SLUICE_') && !name.startsWith('OTEL_')) env[name] = value;
  return env;
}

describe('sluice gateway --deployments', () => {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-deployments-cli-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('refuses to start on a bad file, with each problem on its own line', () => {
    const file = join(dir, 'bad.json');
    writeFileSync(
      file,
      JSON.stringify([
        {
          model: 'org/m',
          profile: { kind: 'vllm', args: ['--api-key', 'sk-very-secret'], env: { HF_TOKEN: 42 } },
          minReplicas: 3,
          maxReplicas: 2,
        },
        { model: 'm2', profile: { kind: 'nope' }, targetConcurrency: 0 },
      ]),
    );
    const run = spawnSync(
      process.execPath,
      [SLUICE_BIN, 'gateway', '--port', '0', '--runners', 'http://127.0.0.1:1', '--deployments', file],
      { env: cleanEnv(), encoding: 'utf8', timeout: 30_000 },
    );
    expect(run.status, `${run.stdout}${run.stderr}`).toBe(2);
    const lines = run.stderr.trim().split('\n');
    expect(lines).toEqual([
      `deployments file ${file}: entry 0 ("org/m"): minReplicas 3 must be at most maxReplicas 2`,
      `deployments file ${file}: entry 0 ("org/m"): profile.env.HF_TOKEN must be a string without NUL bytes, got a number`,
      `deployments file ${file}: entry 1 ("m2"): targetConcurrency must be a whole number from 1 to 1024, got 0`,
      `deployments file ${file}: entry 1 ("m2"): profile.kind must be one of vllm, sglang, llamacpp, tgi, ollama, sim, got "nope"`,
      `sluice gateway: deployments file ${file}: 4 problems, each on its own line above; the gateway does not start`,
    ]);
    expect(run.stdout + run.stderr).not.toContain('sk-very-secret');
    expect(run.stdout).not.toContain('listening');
  });

  it('refuses to start on a file it cannot read', () => {
    const file = join(dir, 'missing.json');
    const run = spawnSync(
      process.execPath,
      [SLUICE_BIN, 'gateway', '--port', '0', '--runners', 'http://127.0.0.1:1', '--deployments', file],
      { env: cleanEnv(), encoding: 'utf8', timeout: 30_000 },
    );
    expect(run.status).toBe(2);
    expect(run.stderr).toContain(`deployments file ${file}: cannot be read: ENOENT`);
  });

  it("serves a good file on /v1/deployments as the file's", async () => {
    const file = join(dir, 'good.json');
    writeFileSync(
      file,
      JSON.stringify([{ model: 'org/m', profile: { kind: 'sim' }, maxReplicas: 2, runnerLabels: { zone: 'a' } }]),
    );
    const gateway = await startService(
      ['gateway', '--port', '0', '--runners', 'http://127.0.0.1:1', '--deployments', file, '--log-level', 'error'],
      { env: operatorEnv(cleanEnv()) },
    );
    try {
      const list = await getJson(`${gateway.url}/v1/deployments`, asOperator);
      expect(list.status).toBe(200);
      expect(list.json.data).toMatchObject([
        {
          model: 'org/m',
          source: 'file',
          maxReplicas: 2,
          runnerLabels: { zone: 'a' },
          status: { reconciler: 'leading', wanted: 0, ready: 0 },
        },
      ]);
    } finally {
      await gateway.stop('SIGTERM');
    }
  });
});
