/**
 * A deployment that cannot start: its waiting calls are answered at once, not at the placer
 * deadline. Before, with an engine binary that exits at once, a call still waited after five
 * failed starts and its final 503 said a replica "is starting"; a flood of such calls filled the
 * wait queue for every model.
 *
 * - The reconciler (fake fleet, fake clock) says why a model cannot get a replica once a start
 *   failed and nothing else starts, with the time to the next attempt, and the reason never
 *   holds the profile's args or env values.
 * - Real processes: a gateway with a deployment whose engine binary exits at once, and a runner
 *   with no engine. Waiting calls get `503 GW_DEPLOYMENT_FAILED` with Retry-After after the
 *   first failed start, well before the placer deadline; a later call gets it too; and so does
 *   a call on a second gateway (one redis-server) that does not lead the reconciler.
 * - The wait queue bounds one model's calls (`maxQueuedPerModel`) while another model's still
 *   queue; the gateway's default is half of `maxQueued`.
 */
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startService } from '../../gateway/cli/entry.ts';
import type { ChildService } from '../../placer/kernel/processes.ts';
import { Reconciler } from '../../gateway/control/reconciler.ts';
import { MemoryDeploymentStore } from '../../gateway/control/store.ts';
import { resolveGatewayOptions } from '../../gateway/options.ts';
import { WaitQueue } from '../../gateway/calls/wait-queue.ts';
import type { WaitEnd } from '../../gateway/calls/wait-queue.ts';
import { seededRandom, silentLogger } from '../../placer/kernel/index.ts';
import { FakeClock, T0 } from '../placer/fake.ts';
import { FakeFleet, FakeLease, ManualTimers, deployment, host, runner } from '../gateway/control/fake-fleet.ts';
import { asOperator, eventually, getJson, metricValue, metrics, operatorEnv } from '../support/fleet.ts';
import { startRedis } from '../support/redis.ts';
import type { RedisServer } from '../support/redis.ts';

const ARG_SECRET = 'arg-secret-5b7e1d';
const ENV_SECRET = 'env-secret-9c2f4a';

describe('Reconciler.startFailure', () => {
  function setup(startAttempts = 10) {
    const clock = new FakeClock();
    const fleet = new FakeFleet([runner('r1')]);
    const store = new MemoryDeploymentStore({ now: () => clock.now() });
    const reconciler = new Reconciler({
      store,
      fleet,
      lease: new FakeLease(),
      clock,
      logger: silentLogger,
      random: seededRandom(3),
      timers: new ManualTimers(),
      startAttempts,
    });
    return { clock, fleet, store, reconciler };
  }
  // SIM_TOKEN is the variable the specs' launch policy allows for kind sim (fake-fleet.ts).
  const profile = { kind: 'sim', args: ['--api-key', ARG_SECRET], env: { SIM_TOKEN: ENV_SECRET } };
  /** A reason that quotes the profile, as a runner or an engine might. */
  const quoting = `the engine exited with code 1 (ran with --api-key ${ARG_SECRET}, SIM_TOKEN=${ENV_SECRET})`;

  it('says nothing while a start is on its way, then the failure and the time to the next attempt, without args or env values', async () => {
    const { clock, fleet, store, reconciler } = setup();
    await store.put(deployment('m', { profile }));
    fleet.waitingBy.set('m', 1);
    await reconciler.pass();
    const order = reconciler.orderFor('r1')!;
    expect(order).toMatchObject({ model: 'm' });
    expect(reconciler.startFailure('m')).toBeUndefined();

    host(fleet.get('r1'), 'm', order.replica, 'failed', clock.now(), {
      reason: quoting,
      output: ['CUDA error: out of memory'],
    });
    clock.advance(1_000);
    await reconciler.pass();
    const failure = reconciler.startFailure('m');
    expect(failure).toEqual({
      reason: 'the engine exited with code 1 (ran with *** ***, SIM_TOKEN=***)',
      retryInMs: 30_000,
    });
    clock.advance(10_000);
    expect(reconciler.startFailure('m')?.retryInMs).toBe(20_000);

    // The retry is ordered: something starts again, and the calls may wait for it.
    clock.advance(20_000);
    await reconciler.pass();
    expect(reconciler.orderFor('r1')).toMatchObject({ model: 'm' });
    expect(reconciler.startFailure('m')).toBeUndefined();
    // Undeployed and unknown models have no failure to tell.
    expect(reconciler.startFailure('other')).toBeUndefined();
  });

  it('keeps the backoff when the answered calls stop waiting and new ones come: the engine is not restarted at once', async () => {
    const { clock, fleet, store, reconciler } = setup();
    await store.put(deployment('m', { profile }));
    fleet.waitingBy.set('m', 1);
    await reconciler.pass();
    host(fleet.get('r1'), 'm', reconciler.orderFor('r1')!.replica, 'failed', clock.now(), {
      reason: 'the engine exited with code 1',
    });
    clock.advance(1_000);
    await reconciler.pass();
    // The waiting calls were answered: none waits, and the start is dropped as unwanted.
    fleet.waitingBy.set('m', 0);
    clock.advance(1_000);
    await reconciler.pass();
    expect(reconciler.status('m')).toMatchObject({ wanted: 0, pending: [] });
    // A new call: the start comes back with its attempt and its backoff, and no order before it ends.
    fleet.waitingBy.set('m', 1);
    await reconciler.pass();
    expect(reconciler.orderFor('r1')).toBeNull();
    expect(reconciler.status('m').pending).toMatchObject([{ attempts: [{ reason: 'the engine exited with code 1' }] }]);
    expect(reconciler.startFailure('m')).toEqual({ reason: 'the engine exited with code 1', retryInMs: 29_000 });
    clock.advance(29_000);
    await reconciler.pass();
    expect(reconciler.orderFor('r1')).toMatchObject({ model: 'm' });
    // A changed deployment starts afresh.
    host(fleet.get('r1'), 'm', reconciler.orderFor('r1')!.replica, 'failed', clock.now(), {
      reason: 'the engine exited with code 2',
    });
    await reconciler.pass();
    fleet.waitingBy.set('m', 0);
    clock.advance(1_000);
    await reconciler.pass();
    await store.put(deployment('m', { profile: { ...profile, args: ['--fixed'] } }));
    fleet.waitingBy.set('m', 1);
    await reconciler.pass();
    expect(reconciler.orderFor('r1')).toMatchObject({ model: 'm', profile: { args: ['--fixed'] } });
  });

  it("gives a dead-lettered deployment's last reason with no next attempt", async () => {
    const { clock, fleet, store, reconciler } = setup(1);
    await store.put(deployment('m', { profile }));
    fleet.waitingBy.set('m', 1);
    await reconciler.pass();
    host(fleet.get('r1'), 'm', reconciler.orderFor('r1')!.replica, 'failed', clock.now(), { reason: quoting });
    await reconciler.pass();
    expect(reconciler.status('m').blocked).toBeDefined();
    const failure = reconciler.startFailure('m');
    expect(failure).toEqual({ reason: 'the engine exited with code 1 (ran with *** ***, SIM_TOKEN=***)' });
  });

  it('says nothing while a replica of the model is ready', async () => {
    const { clock, fleet, store, reconciler } = setup();
    fleet.list.push(runner('r2'));
    await store.put(deployment('m', { profile, minReplicas: 2, maxReplicas: 2 }));
    await reconciler.pass();
    host(fleet.get('r1'), 'm', reconciler.orderFor('r1')!.replica, 'ready', clock.now());
    host(fleet.get('r2'), 'm', reconciler.orderFor('r2')!.replica, 'failed', clock.now(), { reason: quoting });
    await reconciler.pass();
    expect(reconciler.status('m')).toMatchObject({ ready: 1, pending: [{ attempts: [{ runner: 'r2' }] }] });
    expect(reconciler.startFailure('m')).toBeUndefined();
  });
});

describe('a deployment whose engine binary exits at once, on real processes', () => {
  const MODEL = 'sim-never-starts';
  const RUNNER_TOKEN = 'spec-runner-token-start-failed-0123';
  const quiet = ['--log-level', 'warn'];
  let dir: string;
  let file: string;
  /** The launch policy both gateway and runner take: this engine binary, and HF_TOKEN in its environment. */
  let allow: string[];
  let redis: RedisServer | undefined;
  const started: ChildService[] = [];

  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'sluice-start-failed-'));
    const script = join(dir, 'engine-exits');
    // Its last words quote its args and environment: none of them may reach a client.
    writeFileSync(
      script,
      '#!/bin/sh\necho "loading with $* and $HF_TOKEN"\necho "CUDA error: out of memory (spec)"\nexit 1\n',
    );
    chmodSync(script, 0o755);
    allow = ['--engine-binary', `sim=${script}`, '--engine-env-allow', 'sim=HF_TOKEN'];
    file = join(dir, 'deployments.json');
    writeFileSync(
      file,
      JSON.stringify([
        {
          model: MODEL,
          maxReplicas: 1,
          profile: { kind: 'sim', binary: script, args: ['--api-key', ARG_SECRET], env: { HF_TOKEN: ENV_SECRET } },
        },
      ]),
    );
  });

  afterEach(async () => {
    await Promise.all(started.splice(0).map((s) => s.stop('SIGTERM', 10_000).catch(() => undefined)));
  });

  afterAll(async () => {
    await redis?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  /**
   * A gateway over the deployments file; its placer deadline 45 s, so a call that waits it out
   * fails the spec fast. A short panic window makes its samples (and so its lease renewals, demand
   * notes and status publishing) ten a second: a start that fails never reaches a scaling rule.
   */
  async function gateway(extra: readonly string[] = []): Promise<ChildService> {
    const flags = [
      '--deployments',
      file,
      '--reconcile-period',
      '300ms',
      '--scale-panic-window',
      '600ms',
      '--heartbeat-interval',
      '200ms',
      '--runner-networks',
      '127.0.0.0/8',
      '--placer-timeout',
      '45s',
    ];
    const gw = await startService(['gateway', '--port', '0', ...flags, ...allow, ...quiet, ...extra], {
      env: { ...operatorEnv(), SLUICE_RUNNER_TOKEN: RUNNER_TOKEN },
    });
    started.push(gw);
    return gw;
  }

  /** A runner with no engine, registered with `gateways`. */
  async function runnerOf(gateways: readonly ChildService[]): Promise<void> {
    started.push(
      await startService(
        [
          'runner',
          '--port',
          '0',
          '--id',
          'never-a',
          '--slots',
          '4',
          '--gateway',
          gateways.map((g) => g.url).join(','),
          ...allow,
          ...quiet,
        ],
        { env: { ...process.env, SLUICE_RUNNER_TOKEN: RUNNER_TOKEN } },
      ),
    );
    for (const gw of gateways)
      await eventually(
        async () => (await getJson(`${gw.url}/v1/runners`, asOperator)).json.data.length === 1,
        30_000,
        'the runner registered',
      );
  }

  const call = async (gw: ChildService, flow: string) => {
    const res = await request(`${gw.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'sluice-flow': flow },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hello' }] }),
    });
    const text = await res.body.text();
    return { status: res.statusCode, headers: res.headers, text, json: JSON.parse(text) };
  };

  /** The answer a call for the deployment that cannot start must get. */
  function expectFailedStart(res: Awaited<ReturnType<typeof call>>): void {
    expect(res.status).toBe(503);
    expect(res.json.error.code).toBe('GW_DEPLOYMENT_FAILED');
    expect(res.json.error.message).toContain(
      `model "${MODEL}" has no replica: its last start failed (the engine exited with code 1) and none is starting`,
    );
    // The next attempt is about 30 s away: the default backoff after an operation's first
    // failure (60 s after its second): the calls were answered after the first failed start.
    expect(Number(res.headers['retry-after'])).toBeGreaterThanOrEqual(20);
    expect(Number(res.headers['retry-after'])).toBeLessThanOrEqual(30);
    for (const secret of [ARG_SECRET, ENV_SECRET, 'CUDA']) expect(res.text).not.toContain(secret);
  }

  it('answers the waiting calls 503 GW_DEPLOYMENT_FAILED after the first failed start, then a new call too', async () => {
    const gw = await gateway();
    await runnerOf([gw]);
    const began = Date.now();
    const answers = await Promise.all(['a', 'b', 'c'].map((flow) => call(gw, flow)));
    // Well within the placer deadline (45 s here, 360 s by default): the calls did not wait it out.
    expect(Date.now() - began).toBeLessThan(40_000);
    for (const res of answers) {
      expectFailedStart(res);
      expect(res.headers['sluice-cold-start']).toMatch(/^\d+$/);
    }
    expect(
      metricValue(await metrics(gw), 'sluice_replica_start_failures_total', { model: MODEL }),
    ).toBeGreaterThanOrEqual(1);

    // A call that comes now is answered the same way, without waiting out the deadline.
    const again = Date.now();
    expectFailedStart(await call(gw, 'd'));
    expect(Date.now() - again).toBeLessThan(30_000);
    expect((await getJson(`${gw.url}/v1/queue`, asOperator)).json.waiting).toBe(0);
  }, 120_000);

  it('answers a call on the gateway that does not lead the reconciler the same way, from the status the leader published', async () => {
    redis = await startRedis();
    const shared = ['--store', redis.url, '--lease-ttl', '1s'];
    const a = await gateway([...shared, '--gateway-id', 'gw-a']);
    const b = await gateway([...shared, '--gateway-id', 'gw-b']);
    await runnerOf([a, b]);
    const leading = async (gw: ChildService): Promise<boolean> =>
      (await getJson(`${gw.url}/v1/deployments/${MODEL}`, asOperator)).json.status.reconciler === 'leading';
    let follower: ChildService | undefined;
    await eventually(
      async () => {
        if (await leading(a)) follower = b;
        else if (await leading(b)) follower = a;
        return follower !== undefined;
      },
      15_000,
      'a leader',
    );
    const began = Date.now();
    expectFailedStart(await call(follower!, 'f'));
    expect(Date.now() - began).toBeLessThan(40_000);
  }, 120_000);
});

describe("the wait queue: one model's calls are bounded", () => {
  it("refuses a model past maxQueuedPerModel while another model's calls still queue, and admits again once one leaves", async () => {
    const clock = new FakeClock();
    const queue = new WaitQueue({ maxQueued: 6, maxQueuedPerFlow: 6, maxQueuedPerModel: 3, retryAllDelay: 0, clock });
    const ends = new Map<string, WaitEnd>();
    const join = (name: string, model: string) => {
      const waiter = queue.waiter(
        { model, priority: 'interactive', flow: name },
        new AbortController().signal,
        T0 + 60_000,
      );
      void waiter.wait().then((end) => ends.set(name, end));
      return waiter;
    };
    const stuck = ['s1', 's2', 's3', 's4', 's5'].map((name) => join(name, 'never-starts'));
    const others = ['o1', 'o2', 'o3'].map((name) => join(name, 'healthy'));
    await new Promise<void>((resolve) => setImmediate(resolve));
    expect(ends.get('s4')).toEqual({ kind: 'full', scope: 'model', limit: 3 });
    expect(ends.get('s5')).toEqual({ kind: 'full', scope: 'model', limit: 3 });
    for (const name of ['s1', 's2', 's3', 'o1', 'o2', 'o3']) expect(ends.has(name), name).toBe(false);
    expect(queue.waitingFor('never-starts')).toBe(3);
    expect(queue.waitingFor('healthy')).toBe(3);
    stuck[0]!.leave();
    join('s6', 'never-starts');
    await new Promise<void>((resolve) => setImmediate(resolve));
    expect(ends.has('s6')).toBe(false);
    expect(queue.waitingFor('never-starts')).toBe(3);
    for (const w of [...stuck, ...others]) w.leave();
  });

  it('bounds a model to half of maxQueued by default in the gateway, and takes maxQueuedPerModel as given', () => {
    expect(resolveGatewayOptions({ runners: ['http://127.0.0.1:9'], maxQueued: 9 }).maxQueuedPerModel).toBe(5);
    expect(resolveGatewayOptions({ runners: ['http://127.0.0.1:9'] }).maxQueuedPerModel).toBe(5000);
    expect(resolveGatewayOptions({ runners: ['http://127.0.0.1:9'], maxQueuedPerModel: 7 }).maxQueuedPerModel).toBe(7);
    expect(() => resolveGatewayOptions({ runners: ['http://127.0.0.1:9'], maxQueuedPerModel: 0 })).toThrow(
      /maxQueuedPerModel/,
    );
  });
});
