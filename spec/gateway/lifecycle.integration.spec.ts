/**
 * Start-up and shutdown: settings refused with one line, graceful drain on SIGTERM, the
 * front gate during a drain, and `sluice up` leaving no process behind.
 */
import { execFile } from 'node:child_process';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { getRequestListener } from '@hono/node-server';
import { request } from 'undici';
import { afterAll, describe, expect, it } from 'vitest';
import { SLUICE_BIN, startService } from '../../gateway/cli/entry.ts';
import { createGateway } from '../../gateway/server.ts';
import { createRunner } from '../../runner/server.ts';
import { createSimEngine } from '../../runner/engines/sim/server.ts';
import { childPids } from '../../k6/driver/process-memory.ts';
import { alive } from '../support/faults.ts';
import { chatBody, postJson, startFleet } from '../support/fleet.ts';
import type { Fleet } from '../support/fleet.ts';

const run = promisify(execFile);

/** Runs `sluice <args>` to completion and returns its exit code and output. */
async function sluice(
  args: string[],
  env: NodeJS.ProcessEnv = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(process.execPath, [SLUICE_BIN, ...args], {
      env: { ...process.env, ...env },
      timeout: 20_000,
    });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const e = error as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

/** Reads the whole SSE stream of a chat call. */
async function streamText(url: string): Promise<string> {
  const res = await request(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: chatBody({ stream: true }),
  });
  return res.body.text();
}

describe('start-up settings', () => {
  it.each([
    [['gateway', '--runners', 'http://127.0.0.1:1', '--placer-timeout', 'abc'], {}, /--placer-timeout "abc"/],
    [['gateway'], {}, /runners must list at least one runner URL, or set runnerToken/],
    [['gateway', '--runners', 'ftp://x'], {}, /runners entries must be http\(s\):\/\/host:port URLs, got "ftp:\/\/x"/],
    [['gateway', '--runners', 'http://127.0.0.1:1', '--placer', 'fastest'], {}, /placer "fastest" is none of/],
    [
      [
        'gateway',
        '--runners',
        'http://127.0.0.1:1',
        '--placer',
        'consistent-hash',
        '--placer-options',
        '{"loadFactor":0.5}',
      ],
      {},
      /loadFactor must be at least 1, got 0.5/,
    ],
    [['runner', '--engine', 'http://127.0.0.1:1'], { SLUICE_SLOTS: '0' }, /slots must be a positive integer, got 0/],
    [['runner', '--engine', 'http://127.0.0.1:1', '--bogus', '1'], {}, /unknown flag --bogus/],
    [
      ['runner', '--engine', 'http://127.0.0.1:1', '--label', 'zone=a,tier=a b'],
      {},
      /labels: label tier value "a b" must be/,
    ],
    [['sim-engine', '--max-num-seqs', '0'], {}, /maxNumSeqs must be a positive integer, got 0/],
  ])('refuses %j with one line naming the setting', async (args, env, pattern) => {
    const { code, stderr } = await sluice(args, env);
    expect(code).toBe(2);
    expect(stderr.trim().split('\n')).toHaveLength(1);
    expect(stderr).toMatch(pattern);
  });

  it('reads settings from a --config JSON file, below flags and environment', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-config-'));
    try {
      const file = join(dir, 'runner.json');
      writeFileSync(file, JSON.stringify({ engine: 'http://127.0.0.1:1', slots: -3 }));
      const fromFile = await sluice(['runner', '--config', file]);
      expect(fromFile.code).toBe(2);
      expect(fromFile.stderr).toMatch(/slots must be a positive integer, got -3/);
      // Environment beats the file, and a flag beats both: the error names the winning value.
      expect((await sluice(['runner', '--config', file], { SLUICE_SLOTS: '-1' })).stderr).toMatch(/got -1$/m);
      expect((await sluice(['runner', '--config', file, '--slots', '-5'], { SLUICE_SLOTS: '-1' })).stderr).toMatch(
        /got -5$/m,
      );
      writeFileSync(file, JSON.stringify({ engine: 'http://127.0.0.1:1', slotz: 3 }));
      expect((await sluice(['runner', '--config', file])).stderr).toMatch(/unknown setting "slotz"/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('lists every flag with its default in --help', async () => {
    const { code, stdout } = await sluice(['gateway', '--help']);
    expect(code).toBe(0);
    for (const flag of [
      '--port',
      '--runners',
      '--placer',
      '--placer-timeout',
      '--retry-all-delay',
      '--max-body-bytes',
      '--body-read-timeout',
      '--drain-timeout',
    ]) {
      expect(stdout).toContain(flag);
    }
    expect(stdout).toMatch(/--placer-timeout\s+<duration>.*default 360s; env SLUICE_PLACER_TIMEOUT/);
  });
});

describe('graceful shutdown', () => {
  const fleets: Fleet[] = [];
  afterAll(() => Promise.all(fleets.map((f) => f.stop())));

  it('lets an in-flight stream finish on SIGTERM, then exits 0 and refuses new connections', async () => {
    const fleet = await startFleet({
      nodes: 1,
      engineArgs: ['--ttft-ms', '0', '--itl-ms', '40', '--output-tokens', '25'],
    });
    fleets.push(fleet);
    const inFlight = streamText(fleet.gateway.url);
    // Wait until the runner holds the call, so the signal lands mid-stream.
    await expect
      .poll(
        async () => ((await (await request(`${fleet.nodes[0]!.runner.url}/status`)).body.json()) as any).slots.inUse,
        { timeout: 5000, interval: 20 },
      )
      .toBe(1);
    const exit = fleet.gateway.stop('SIGTERM', 15_000);
    expect(await inFlight).toContain('data: [DONE]');
    expect(await exit).toBe(0);
    await expect(request(`${fleet.gateway.url}/healthz`)).rejects.toMatchObject({ code: 'ECONNREFUSED' });
  });

  it('answers 503 at the front gate once draining, while the in-flight call completes', async () => {
    const engine = createSimEngine({ ttftMs: 0, itlMs: 30, outputTokens: 20 });
    const runner = createRunner({ engine: (await engine.listen()).url });
    const gateway = createGateway({ runners: [(await runner.listen()).url], drainTimeout: 10_000 });
    const gw = await gateway.listen();
    // A second listener serving the same app, as an embedder would run it.
    const embedded = createServer(getRequestListener(gateway.app.fetch));
    await new Promise<void>((r) => embedded.listen(0, '127.0.0.1', r));
    const embeddedUrl = `http://127.0.0.1:${(embedded.address() as AddressInfo).port}`;
    try {
      const inFlight = streamText(gw.url);
      await expect.poll(() => runner.status().slots.inUse, { timeout: 5000, interval: 10 }).toBe(1);
      const closed = gateway.close();
      const refused = await postJson(`${embeddedUrl}/v1/chat/completions`, chatBody());
      expect(refused.status).toBe(503);
      expect(refused.json.error.code).toBe('GW_SHUTTING_DOWN');
      expect(await inFlight).toContain('data: [DONE]');
      await closed;
    } finally {
      embedded.close();
      await gateway.close();
      await runner.close({ drainTimeout: 0 });
      await engine.close();
    }
  });
});

describe('sluice up', () => {
  it('serves a chat call and leaves no process behind after SIGINT', async () => {
    const up = await startService(['up', '--port', '0', '--log-level', 'warn']);
    try {
      const res = await postJson(`${up.url}/v1/chat/completions`, chatBody());
      expect(res.status).toBe(200);
      expect(res.json.object).toBe('chat.completion');
      // Its sluice children only: with a cold cache, tsx's loader runs an esbuild service
      // process of its own, which is not up's to count (it ends with its parent).
      const children = childPids(up.child.pid!).filter((pid) => commandLine(pid).includes('sluice.mjs'));
      expect(children).toHaveLength(4);
      expect(await up.stop('SIGINT', 15_000)).toBe(0);
      for (const pid of children) expect(alive(pid)).toBe(false);
    } finally {
      await up.stop('SIGKILL');
    }
  });
});

/** A process's command line, or '' once it has ended. */
function commandLine(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ');
  } catch {
    return '';
  }
}
