/**
 * `sluice gateway` as a process: its log lines are pretty with --log-format pretty and JSON when
 * its output is not a terminal and no format is given; and a stop by SIGINT (Ctrl-C) logs no
 * warning, the reconciler's lease given up at close included.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { startService } from '../../../gateway/cli/entry.ts';
import type { ChildService } from '../../../placer/kernel/processes.ts';
import { commandLine } from '../../support/command-line.ts';
import { eventually, getJson, operatorEnv } from '../../support/fleet.ts';

const RUNNER_TOKEN = 'spec-runner-token-log-format-0123';
/** What each test started and wrote, undone after it, last first. */
const undo: Array<() => unknown> = [];
afterEach(async () => {
  while (undo.length > 0) await undo.pop()!();
});

/**
 * A gateway with a deployment at zero (so its reconciler leads), `extra` flags, and all it
 * writes kept; resolves once it is ready, which it is once a reconciler pass read the deployment.
 */
async function gateway(extra: readonly string[]): Promise<{ gw: ChildService; text: () => string }> {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-log-format-spec-'));
  undo.push(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'deployments.yaml');
  writeFileSync(file, '- model: sim-log\n  profile: { kind: sim }\n');
  let text = '';
  const gw = await startService(
    commandLine('gateway', { deployments: file, 'runner-networks': '127.0.0.0/8' }, [...extra]),
    {
      stdio: 'capture',
      env: { ...operatorEnv(), SLUICE_RUNNER_TOKEN: RUNNER_TOKEN },
      onOutput: (chunk) => {
        text += chunk;
      },
    },
  );
  undo.push(() => gw.stop('SIGKILL').catch(() => undefined));
  await eventually(async () => (await getJson(`${gw.url}/readyz`)).status === 200, 15_000, 'ready');
  return { gw, text: () => text };
}

const lines = (text: string): string[] => text.split('\n').filter((line) => line.trim() !== '');

describe('sluice gateway logs', () => {
  it('writes one readable line a record with --log-format pretty, and stops on SIGINT with no warning', async () => {
    const { gw, text } = await gateway(['--log-format', 'pretty']);
    expect(await gw.stop('SIGINT', 15_000)).toBe(0);
    const all = lines(text());
    expect(all.filter((line) => line.startsWith('{'))).toEqual([]);
    const records = all.filter((line) => /^\d{2}:\d{2}:\d{2}\.\d{3} (DEBUG|INFO |WARN |ERROR) /.test(line));
    expect(records.some((line) => / INFO {2}gateway listening .*component=gateway/.test(line))).toBe(true);
    const stop = all.findIndex((line) => line.includes('shutting down'));
    expect(stop).toBeGreaterThan(-1);
    const afterStop = all.slice(stop);
    expect(afterStop.some((line) => line.includes('INFO  reconciler lease released'))).toBe(true);
    expect(afterStop.filter((line) => / (WARN |ERROR) /.test(line))).toEqual([]);
  });

  it('writes JSON lines when its output is no terminal and no format is given', async () => {
    const { gw, text } = await gateway([]);
    expect(await gw.stop('SIGINT', 15_000)).toBe(0);
    const records = lines(text()).filter((line) => line.startsWith('{'));
    const parsed = records.map((line) => JSON.parse(line) as { level: string; msg: string });
    expect(parsed.some((r) => r.msg === 'gateway listening')).toBe(true);
    const stop = parsed.findIndex((r) => r.msg === 'shutting down');
    expect(parsed.slice(stop).filter((r) => r.level === 'warn' || r.level === 'error')).toEqual([]);
  });

  it('refuses a format it does not know, naming the flag', async () => {
    await expect(
      startService(commandLine('gateway', {}, ['--log-format', 'text']), { stdio: 'capture', timeout: 10_000 }),
    ).rejects.toThrow(/invalid --log-format "text": expected pretty or json/);
  });
});
