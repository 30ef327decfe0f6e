/**
 * `sluice gateway --runner-token-file`, as a real process: the file is read again on SIGHUP, so a
 * runner token is rotated without a restart, and a file that cannot be used then leaves the
 * tokens as they were, logged without its content.
 */
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { startService } from '../../../gateway/cli/entry.ts';
import type { ChildService } from '../../../placer/kernel/processes.ts';
import { REGISTER_PATH } from '../../../runner/protocol/index.ts';
import { eventually, postJson } from '../../support/fleet.ts';

const dir = mkdtempSync(join(tmpdir(), 'sluice-token-reload-'));
const started: ChildService[] = [];
afterAll(async () => {
  await Promise.all(started.map((s) => s.stop('SIGTERM', 5000)));
  rmSync(dir, { recursive: true, force: true });
});

const OLD = 'reload-spec-old-token-0123';
const NEW = 'reload-spec-new-token-4567';
const file = join(dir, 'runner-tokens');
function writeTokens(tokens: readonly string[], mode = 0o600): void {
  writeFileSync(file, `${tokens.join('\n')}\n`);
  chmodSync(file, mode);
}

const load = { slotsInUse: 0, slots: 4, queue: 0, models: {} };
const register = (gw: string, id: string, token: string) =>
  postJson(
    `${gw}${REGISTER_PATH}`,
    JSON.stringify({
      id,
      url: 'http://127.0.0.1:9',
      version: 'test',
      engines: [],
      models: ['m'],
      slots: 4,
      gpus: null,
      ready: true,
      load,
    }),
    { authorization: `Bearer ${token}` },
  );

describe('sluice gateway --runner-token-file', () => {
  it('reads the file again on SIGHUP; a file it cannot use then keeps the tokens it had', async () => {
    writeTokens([OLD]);
    const gateway = await startService([
      'gateway',
      '--port',
      '0',
      '--runner-token-file',
      file,
      '--runner-networks',
      '127.0.0.0/8',
      '--log-level',
      'info',
    ]);
    started.push(gateway);
    const gw = gateway.url;
    expect((await register(gw, 'r1', OLD)).status).toBe(200);
    expect((await register(gw, 'r2', NEW)).status).toBe(401);

    writeTokens([NEW, OLD]);
    gateway.child.kill('SIGHUP');
    await eventually(async () => (await register(gw, 'r2', NEW)).status === 200, 5000, 'the new token to be accepted');
    expect((await register(gw, 'r3', OLD)).status).toBe(200);

    writeTokens([NEW]);
    gateway.child.kill('SIGHUP');
    await eventually(async () => (await register(gw, 'r4', OLD)).status === 401, 5000, 'the old token to be refused');

    // A world-readable file is not taken: the tokens stay, and the error names the file only.
    writeTokens([OLD], 0o644);
    gateway.child.kill('SIGHUP');
    await eventually(() => gateway.output().includes('runner tokens not reloaded'), 5000, 'the refusal to be logged');
    expect((await register(gw, 'r5', NEW)).status).toBe(200);
    expect((await register(gw, 'r6', OLD)).status).toBe(401);
    expect(gateway.output()).toMatch(/may be read by any user of this machine/);
    expect(gateway.output()).not.toContain(OLD);
    expect(gateway.output()).not.toContain(NEW);
    expect(gateway.child.exitCode).toBeNull();
  }, 60_000);
});
