/**
 * A fleet of runners that register themselves with two gateways, as real processes: both
 * gateways learn the fleet, a restarted gateway gets it back without touching any runner, a
 * killed runner goes unreachable then lost while calls keep succeeding, a wrong token is
 * refused, and a drain under traffic finishes with zero errors.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { request } from 'undici';
import { spawn } from 'node:child_process';
import { SLUICE_BIN, startService } from '../../../gateway/cli/entry.ts';
import type { ChildService } from '../../../placer/kernel/processes.ts';
import { asOperator, chatBody, operatorEnv, postJson } from '../../support/fleet.ts';
import { freePort } from '../../support/redis.ts';

const TOKEN = 'fleet-test-token-0123456789';
const env = operatorEnv({ ...process.env, SLUICE_RUNNER_TOKEN: TOKEN });
const started: ChildService[] = [];
async function service(args: string[]): Promise<ChildService> {
  const s = await startService([...args, '--log-level', 'error'], { env });
  started.push(s);
  return s;
}
afterAll(() => Promise.all(started.map((s) => s.stop('SIGTERM', 5000))));

const gatewayArgs = (port: number) => [
  'gateway',
  '--port',
  String(port),
  '--heartbeat-interval',
  '200ms',
  '--unreachable-after-missed',
  '3',
  '--lost-after',
  '2s',
  '--placer-timeout',
  '5s',
  '--runner-networks',
  '127.0.0.0/8',
];
const list = async (gw: { url: string }) =>
  ((await (await request(`${gw.url}/v1/runners`, { headers: asOperator })).body.json()) as { data: any[] }).data;
const states = async (gw: { url: string }) => Object.fromEntries((await list(gw)).map((r) => [r.id, r.state]));

describe('a fleet of registering runners', () => {
  let gw1: ChildService;
  let gw2: ChildService;
  let port1: number;
  const runners: ChildService[] = [];

  beforeAll(async () => {
    port1 = await freePort();
    [gw1, gw2] = await Promise.all([service(gatewayArgs(port1)), service(gatewayArgs(0))]);
    const engines = await Promise.all(
      [1, 2].map((i) =>
        service([
          'sim-engine',
          '--port',
          '0',
          '--engine-id',
          `sim-${i}`,
          '--ttft-ms',
          '0',
          '--itl-ms',
          '20',
          '--output-tokens',
          '100',
        ]),
      ),
    );
    runners.push(
      ...(await Promise.all(
        engines.map((e, i) =>
          service([
            'runner',
            '--port',
            '0',
            '--id',
            `r${i + 1}`,
            '--engine',
            e.url,
            '--engine-kind',
            'sim',
            '--gateway',
            `${gw1.url},${gw2.url}`,
            '--heartbeat-interval',
            '200ms',
          ]),
        ),
      )),
    );
  }, 90_000);

  it('registers every runner with both gateways, and both place calls on them', async () => {
    for (const gw of [gw1, gw2]) {
      await expect.poll(() => states(gw), { timeout: 10_000, interval: 100 }).toEqual({ r1: 'live', r2: 'live' });
      const seen = new Set<unknown>();
      for (let i = 0; i < 6; i++) {
        const res = await postJson(`${gw.url}/v1/chat/completions`, chatBody({ max_tokens: 2 }));
        expect(res.status).toBe(200);
        seen.add(res.headers['sluice-runner-id']);
      }
      expect([...seen].sort()).toEqual(['r1', 'r2']);
    }
  });

  it('gets its fleet back after a restart, without touching any runner', async () => {
    expect(await gw1.stop('SIGTERM', 10_000)).toBe(0);
    gw1 = await service(gatewayArgs(port1));
    await expect.poll(() => states(gw1), { timeout: 10_000, interval: 100 }).toEqual({ r1: 'live', r2: 'live' });
    expect((await postJson(`${gw1.url}/v1/chat/completions`, chatBody({ max_tokens: 2 }))).status).toBe(200);
  });

  it('refuses a runner with a wrong token', async () => {
    const engine = await service(['sim-engine', '--port', '0']);
    const intruder = await startService(
      [
        'runner',
        '--port',
        '0',
        '--id',
        'intruder',
        '--engine',
        engine.url,
        '--gateway',
        gw2.url,
        '--log-level',
        'error',
      ],
      {
        env: { ...process.env, SLUICE_RUNNER_TOKEN: 'not-the-fleet-token-at-all' },
      },
    );
    started.push(intruder);
    const res = await postJson(`${gw2.url}/v1/runners/register`, '{}', {
      authorization: 'Bearer not-the-fleet-token-at-all',
    });
    expect(res.status).toBe(401);
    expect((await list(gw2)).map((r) => r.id).sort()).toEqual(['r1', 'r2']);
    expect(intruder.output()).not.toContain('not-the-fleet-token-at-all');
  });

  it('drains a runner under traffic with zero errors; the runner exits', async () => {
    const statuses: number[] = [];
    let stop = false;
    const traffic = (async () => {
      for (let i = 0; i < 400 && !stop; i++)
        statuses.push((await postJson(`${gw2.url}/v1/chat/completions`, chatBody({ max_tokens: 10 }))).status);
    })();
    const drain = await postJson(`${gw2.url}/v1/runners/r1/drain`, '', asOperator);
    expect(drain.status).toBe(202);
    // The runner drains itself for every gateway, deregisters, and exits.
    const exit = await new Promise<number | null>((resolve) => runners[0]!.child.once('exit', (code) => resolve(code)));
    expect(exit).toBe(0);
    await expect.poll(async () => (await list(gw1)).map((r) => r.id), { timeout: 5000, interval: 100 }).toEqual(['r2']);
    stop = true;
    await traffic;
    expect(statuses.length).toBeGreaterThan(0);
    expect(statuses.filter((s) => s !== 200)).toEqual([]);
  });

  it('exits 0 after a gateway-requested drain when run by hand, without a parent to tell it', async () => {
    const engine = await service(['sim-engine', '--port', '0', '--ttft-ms', '0', '--itl-ms', '0']);
    // Spawned plainly, as an operator would run it: no IPC channel to a parent.
    const child = spawn(
      process.execPath,
      [
        SLUICE_BIN,
        'runner',
        '--port',
        '0',
        '--id',
        'by-hand',
        '--engine',
        engine.url,
        '--engine-kind',
        'sim',
        '--gateway',
        gw2.url,
        '--heartbeat-interval',
        '200ms',
        '--log-level',
        'error',
      ],
      { env, stdio: 'ignore' },
    );
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    await expect.poll(async () => (await states(gw2))['by-hand'], { timeout: 10_000, interval: 100 }).toBe('live');
    expect((await postJson(`${gw2.url}/v1/runners/by-hand/drain`, '', asOperator)).status).toBe(202);
    expect(await exited).toBe(0);
  });

  it('marks a killed runner unreachable, then lost, while calls keep succeeding', async () => {
    // Restart a second runner so one stays after the kill.
    const engine = await service(['sim-engine', '--port', '0', '--ttft-ms', '0', '--itl-ms', '0']);
    const r3 = await service([
      'runner',
      '--port',
      '0',
      '--id',
      'r3',
      '--engine',
      engine.url,
      '--engine-kind',
      'sim',
      '--gateway',
      gw1.url,
      '--heartbeat-interval',
      '200ms',
    ]);
    await expect.poll(() => states(gw1), { timeout: 10_000, interval: 100 }).toEqual({ r2: 'live', r3: 'live' });
    runners[1]!.child.kill('SIGKILL');
    await expect.poll(async () => (await states(gw1)).r2, { timeout: 5000, interval: 50 }).toBe('unreachable');
    for (let i = 0; i < 5; i++) {
      const res = await postJson(`${gw1.url}/v1/chat/completions`, chatBody({ max_tokens: 2 }));
      expect(res.status).toBe(200);
      expect(res.headers['sluice-runner-id']).toBe('r3');
    }
    await expect.poll(async () => Object.keys(await states(gw1)), { timeout: 10_000, interval: 100 }).toEqual(['r3']);
    expect(r3.child.exitCode).toBeNull();
  });
});
