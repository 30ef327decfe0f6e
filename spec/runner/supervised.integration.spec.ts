/**
 * Runners that launch and supervise their engine from a profile, as real processes: the
 * simulated engine runs as a supervised `sim` engine, so readiness, crashes, restarts and
 * clean exits are exercised for real.
 */
import { createServer } from 'node:net';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { freePort } from '../../placer/kernel/processes.ts';
import { SLUICE_BIN, startService } from '../../gateway/cli/entry.ts';
import { BUSY_HEADER } from '../../runner/protocol/index.ts';
import { alive } from '../support/faults.ts';
import { chatBody, postJson, runnerStatus, servicesForSuite } from '../support/fleet.ts';
import { commandLine } from '../support/command-line.ts';

const service = servicesForSuite();

const simProfile = async (args: string[] = []) =>
  JSON.stringify({
    kind: 'sim',
    model: 'sim-small',
    port: await freePort(),
    args: ['--ttft-ms', '0', '--itl-ms', '0', ...args],
  });

describe('a runner with a sim profile', () => {
  it('answers busy while the engine starts, serves once it is ready, and reports it in /status', async () => {
    const runner = await service(
      commandLine('runner', { 'log-level': 'warn', profile: await simProfile(['--startup-delay-ms', '1500']) }),
    );
    const early = await postJson(`${runner.url}/v1/chat/completions`, chatBody());
    expect(early.status).toBe(503);
    expect(early.headers[BUSY_HEADER]).toBe('starting');
    expect((await runnerStatus(runner)).engines[0].supervised.state).toBe('starting');

    await expect.poll(async () => (await runnerStatus(runner)).ready, { timeout: 20_000, interval: 100 }).toBe(true);
    const ok = await postJson(`${runner.url}/v1/chat/completions`, chatBody());
    expect(ok.status).toBe(200);
    const s = await runnerStatus(runner);
    expect(s.engines[0]).toMatchObject({
      kind: 'sim',
      state: 'ready',
      models: ['sim-small'],
      supervised: { state: 'ready', model: 'sim-small', restarts: 0 },
    });
    expect(alive(s.engines[0].supervised.pid)).toBe(true);
    expect(s.gpus).toMatchObject({ source: expect.any(String), gpus: expect.any(Array) });
    await expect
      .poll(async () => (await runnerStatus(runner)).engines[0].load?.running, { timeout: 5000, interval: 100 })
      .toBe(0);
  });

  it('restarts a crashed engine: the call it crashed on fails with a clear code, later calls succeed', async () => {
    const runner = await service(
      commandLine('runner', {
        'log-level': 'error',
        'engine-restart-backoff': '50ms',
        profile: await simProfile(['--crash-on-call', '2']),
      }),
    );
    const gateway = await service(
      commandLine('gateway', { 'log-level': 'error', runners: runner.url, 'status-interval': '100ms' }),
    );
    await expect.poll(async () => (await runnerStatus(runner)).ready, { timeout: 20_000, interval: 100 }).toBe(true);
    const firstPid = (await runnerStatus(runner)).engines[0].supervised.pid;

    expect((await postJson(`${gateway.url}/v1/chat/completions`, chatBody())).status).toBe(200);
    const crashed = await postJson(`${gateway.url}/v1/chat/completions`, chatBody());
    expect(crashed.status).toBe(502);
    expect(crashed.json.error.code).toBe('GW_RUNNER_FAILED_AFTER_COMMIT');

    // The gateway waits for the relaunched engine rather than failing the next call.
    const after = await postJson(`${gateway.url}/v1/chat/completions`, chatBody());
    expect(after.status).toBe(200);
    const s = await runnerStatus(runner);
    expect(s.engines[0].supervised.restarts).toBe(1);
    expect(s.engines[0].supervised.pid).not.toBe(firstPid);
    expect(s.engines[0].supervised.lastExit).toMatchObject({ code: 70 });
    expect(alive(firstPid)).toBe(false);
  });

  it('leaves no engine process behind when it stops', async () => {
    const runner = await startService(commandLine('runner', { 'log-level': 'warn', profile: await simProfile() }));
    await expect.poll(async () => (await runnerStatus(runner)).ready, { timeout: 20_000, interval: 100 }).toBe(true);
    const pid = (await runnerStatus(runner)).engines[0].supervised.pid as number;
    expect(await runner.stop('SIGTERM', 15_000)).toBe(0);
    await expect.poll(() => alive(pid), { timeout: 5000, interval: 50 }).toBe(false);
  });
});

describe('a bad profile', () => {
  const run = promisify(execFile);
  async function refused(profile: object): Promise<string> {
    try {
      await run(process.execPath, [SLUICE_BIN, 'runner', '--port', '0', '--profile', JSON.stringify(profile)], {
        timeout: 20_000,
      });
    } catch (error) {
      const e = error as { code: number; stderr: string };
      expect(e.code).toBe(2);
      expect(e.stderr.trim().split('\n')).toHaveLength(1);
      return e.stderr;
    }
    throw new Error('the runner started with a bad profile');
  }

  it.each([
    [{ kind: 'vllm', model: 'meta-llama/Llama-3.1-8B-Instruct', port: 18_000 }, /vllm/],
    [{ kind: 'vllm', model: 'm', port: 18_000, gpus: [0] }, /gpus/],
    [{ kind: 'sim', model: 'sim-small', port: 18_000, args: ['--port', '9'] }, /--port/],
    [{ kind: 'tpu', model: 'm', port: 18_000 }, /kind/],
  ])('is refused before launch with one line: %j', async (profile, pattern) => {
    expect(await refused(profile)).toMatch(pattern);
  });

  it('is refused when its port is taken', async () => {
    const taken = createServer();
    await new Promise<void>((r) => taken.listen(0, '127.0.0.1', r));
    try {
      const { port } = taken.address() as { port: number };
      expect(await refused({ kind: 'sim', model: 'sim-small', port })).toMatch(new RegExp(String(port)));
    } finally {
      taken.close();
    }
  });
});
