/**
 * The data plane's flags, through real processes on 127.0.0.1: a gateway on https
 * (--tls-cert/--tls-key) that calls its runners under mutual TLS (--runner-tls-*), a runner on
 * https that requires a client certificate (--tls-cert/--tls-key/--tls-ca) and registers with
 * the https gateway, checking it against the same CA, and both signing and verifying calls with
 * a call secret read from a file.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Agent, request } from 'undici';
import { startService } from '../../../gateway/cli/entry.ts';
import type { ChildService } from '../../../placer/kernel/processes.ts';
import { runnerArgs, simEngineArgs } from '../../../placer/kernel/service-args.ts';
import { asOperator, chatBody, eventually, operatorEnv } from '../../support/fleet.ts';
import { makeCa } from '../../support/certs.ts';
import type { TestCa } from '../../support/certs.ts';

const RUNNER_TOKEN = `rt-${randomBytes(16).toString('hex')}`;

describe('sluice gateway and runner with TLS and a call secret', () => {
  let ca: TestCa;
  let dir: string;
  const started: ChildService[] = [];
  beforeAll(() => {
    ca = makeCa('sluice-cli-ca');
    dir = mkdtempSync(join(tmpdir(), 'sluice-cli-dp-'));
  });
  afterAll(async () => {
    await Promise.all(
      started
        .splice(0)
        .reverse()
        .map((s) => s.stop('SIGTERM', 5000)),
    );
    ca?.remove();
    rmSync(dir, { recursive: true, force: true });
  });

  it('serves a client over https through a runner under mutual TLS, with signed calls', async () => {
    const front = ca.issue('front');
    const runnerCert = ca.issue('runner');
    const gatewayClient = ca.issue('gateway');
    const secretFile = join(dir, 'call-secret');
    writeFileSync(secretFile, `${randomBytes(32).toString('base64url')}\n`, { mode: 0o600 });
    const env: NodeJS.ProcessEnv = { ...process.env, SLUICE_RUNNER_TOKEN: RUNNER_TOKEN };
    for (const name of Object.keys(env))
      if (name.startsWith('SLUICE_') && name !== 'SLUICE_RUNNER_TOKEN') delete env[name];
    const gatewayEnv = operatorEnv(env);

    const engine = await startService(simEngineArgs({}, ['--ttft-ms', '0', '--itl-ms', '0', '--output-tokens', '2']), {
      env,
    });
    started.push(engine);
    const gateway = await startService(
      [
        'gateway',
        '--port',
        '0',
        '--heartbeat-interval',
        '100ms',
        '--tls-cert',
        front.certFile,
        '--tls-key',
        front.keyFile,
        '--runner-tls-cert',
        gatewayClient.certFile,
        '--runner-tls-key',
        gatewayClient.keyFile,
        '--runner-tls-ca',
        ca.certFile,
        '--call-secret-file',
        secretFile,
        // The runner registers from loopback, which a gateway refuses unless told.
        '--runner-networks',
        '127.0.0.0/8',
      ],
      { env: gatewayEnv },
    );
    started.push(gateway);
    expect(gateway.url).toMatch(/^https:\/\//);
    const runner = await startService(
      runnerArgs({ engine: engine.url, id: 'runner-tls', gateway: gateway.url }, [
        '--heartbeat-interval',
        '100ms',
        '--tls-cert',
        runnerCert.certFile,
        '--tls-key',
        runnerCert.keyFile,
        '--tls-ca',
        ca.certFile,
        '--call-secret-file',
        secretFile,
      ]),
      { env },
    );
    started.push(runner);
    expect(runner.url).toMatch(/^https:\/\//);

    const client = new Agent({ connect: { ca: ca.cert } });
    try {
      // The runner reached the https gateway (its certificate checked against --tls-ca) and registered its https URL.
      await eventually(
        async () => {
          const res = await request(`${gateway.url}/v1/runners`, { dispatcher: client, headers: asOperator });
          const list = (await res.body.json()) as { data?: Array<{ id: string; url: string; placeable: boolean }> };
          return list.data?.some((r) => r.id === 'runner-tls' && r.placeable && r.url.startsWith('https://')) === true;
        },
        15_000,
        'the runner to register over https',
      );
      const res = await request(`${gateway.url}/v1/chat/completions`, {
        dispatcher: client,
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: chatBody({ max_tokens: 2 }),
      });
      expect(res.statusCode).toBe(200);
      expect(res.headers['sluice-runner-id']).toBe('runner-tls');
      expect(((await res.body.json()) as { object: string }).object).toBe('chat.completion');

      // A client with the right certificate but no signature still gets nothing: both credentials are required when both are set.
      const direct = new Agent({ connect: { ca: ca.cert, cert: gatewayClient.cert, key: gatewayClient.key } });
      const unsigned = await request(`${runner.url}/v1/chat/completions`, {
        dispatcher: direct,
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: chatBody(),
      });
      expect(unsigned.statusCode).toBe(401);
      expect(((await unsigned.body.json()) as { error: { code: string } }).error.code).toBe('RUNNER_UNAUTHORIZED');
      const status = (await (await request(`${runner.url}/status`, { dispatcher: direct })).body.json()) as {
        calls: { served: number; unauthorized: number };
      };
      expect(status.calls).toMatchObject({ served: 1, unauthorized: 1 });
      await direct.close();
    } finally {
      await client.close();
    }
  }, 90_000);

  it('refuses to start with only part of the TLS files', async () => {
    const partial = ca.issue('partial');
    await expect(
      startService(['runner', '--port', '0', '--engine', 'http://127.0.0.1:1', '--tls-cert', partial.certFile], {
        timeout: 20_000,
      }),
    ).rejects.toThrow(/--tls-cert needs --tls-key and --tls-ca too/);
    await expect(
      startService(['gateway', '--port', '0', '--runners', 'http://127.0.0.1:1', '--tls-key', partial.keyFile], {
        timeout: 20_000,
      }),
    ).rejects.toThrow(/--tls-key needs --tls-cert too/);
  }, 60_000);
});
