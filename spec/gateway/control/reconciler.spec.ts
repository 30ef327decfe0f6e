/**
 * The reconciler (gateway/control/reconciler.ts) over a fake fleet, a memory store, a lease the
 * test flips and a clock it moves: scaling up and down, failed starts, and leadership.
 */
import { describe, expect, it } from 'vitest';
import { GatewayConfigError } from '../../../gateway/errors.ts';
import type { ReconcilerEvent, ReconcilerOptions } from '../../../gateway/control/reconciler-options.ts';
import { reconcilerDefaults } from '../../../gateway/control/reconciler-options.ts';
import { Reconciler, replicaId } from '../../../gateway/control/reconciler.ts';
import { MemoryDeploymentStore } from '../../../gateway/control/store.ts';
import { WIRE_ID_PATTERN } from '../../../runner/protocol/index.ts';
import { seededRandom, silentLogger } from '../../../placer/kernel/index.ts';
import { FakeClock, T0 } from '../../placer/fake.ts';
import { warningRecorder } from '../../support/logger.ts';
import type { LogFields } from '../../../placer/kernel/index.ts';
import { FakeFleet, FakeLease, ManualTimers, deployment, host, obey, runner } from './fake-fleet.ts';
import type { MutableRunner } from './fake-fleet.ts';

function setup(runners: MutableRunner[], options: ReconcilerOptions = {}) {
  const clock = new FakeClock();
  const fleet = new FakeFleet(runners);
  const store = new MemoryDeploymentStore({ now: () => clock.now() });
  const lease = new FakeLease();
  const timers = new ManualTimers();
  const events: ReconcilerEvent[] = [];
  const warnings: LogFields[] = [];
  const reconciler = new Reconciler({
    store,
    fleet,
    lease,
    clock,
    logger: warningRecorder(warnings),
    events: (e) => events.push(e),
    random: seededRandom(7),
    timers,
    ...options,
  });
  const scales = () =>
    events.filter((e) => e.kind === 'scale').map((e) => e.kind === 'scale' && `${e.from}->${e.to} ${e.reason}`);
  /** Samples the concurrency `times` times, one second apart. */
  const sampleFor = (times: number) => {
    for (let i = 0; i < times; i++) {
      clock.advance(1_000);
      reconciler.sample();
    }
  };
  return { clock, fleet, store, lease, timers, events, warnings, reconciler, scales, sampleFor };
}

describe('Reconciler: scaling', () => {
  it('scales 0 -> 1 at once for a waiting call, and reports the replica ready with its start time', async () => {
    const { clock, fleet, store, reconciler, events, scales } = setup([runner('r1'), runner('r2')]);
    await store.put(deployment('m', { maxReplicas: 3, targetConcurrency: 1 }));
    await reconciler.pass();
    expect(reconciler.orderFor('r1')).toBeNull();
    expect(reconciler.status('m')).toMatchObject({ reconciler: 'leading', wanted: 0, ready: 0, starting: 0 });

    fleet.waitingBy.set('m', 1);
    await reconciler.pass();
    const order = reconciler.orderFor('r1');
    expect(order).toMatchObject({ model: 'm', profile: { kind: 'sim', model: 'm' } });
    expect(order!.replica).toMatch(WIRE_ID_PATTERN);
    expect(reconciler.orderFor('r2')).toBeNull();
    expect(scales()).toEqual(['0->1 a call is waiting with no replica']);
    expect(reconciler.status('m')).toMatchObject({
      wanted: 1,
      starting: 1,
      ready: 0,
      replicas: [{ replica: order!.replica, runner: 'r1', state: 'starting' }],
    });

    clock.advance(2_500);
    obey(fleet, reconciler, clock.now());
    await reconciler.pass();
    expect(events.filter((e) => e.kind === 'ready')).toEqual([
      { kind: 'ready', model: 'm', replica: order!.replica, runner: 'r1', startMs: 2_500 },
    ]);
    expect(reconciler.status('m')).toMatchObject({ wanted: 1, starting: 0, ready: 1, pending: [] });
    expect(reconciler.isDeployed('m')).toBe(true);
    expect(reconciler.isDeployed('other')).toBe(false);
  });

  it('keeps minReplicas with no load, saying so', async () => {
    const { store, reconciler, scales } = setup([runner('r1'), runner('r2')]);
    await store.put(deployment('m', { minReplicas: 2, maxReplicas: 3 }));
    await reconciler.pass();
    expect([reconciler.orderFor('r1')?.model, reconciler.orderFor('r2')?.model]).toEqual(['m', 'm']);
    expect(scales()).toEqual(['0->2 minReplicas 2']);
  });

  it('goes to max on a burst through the panic window, then stops none while panicking or for the stable window after', async () => {
    const { clock, fleet, store, reconciler, scales, sampleFor } = setup([runner('r1'), runner('r2'), runner('r3')]);
    await store.put(deployment('m', { minReplicas: 1, maxReplicas: 3, targetConcurrency: 1, scaleDownDelay: 0 }));
    await reconciler.pass();
    obey(fleet, reconciler, clock.now());
    await reconciler.pass();
    sampleFor(54);
    fleet.get('r1').slotsInUse = 9;
    sampleFor(6);
    await reconciler.pass();
    // Stable: 54 s at 0 and 6 s at 9 is 0.9, one replica; the panic window's 9 is past 2 x 1.
    expect(scales()).toEqual(['0->1 minReplicas 1', '1->3 panic: 9 calls over 6 s']);
    expect(reconciler.status('m')).toMatchObject({ wanted: 3, starting: 2, ready: 1 });
    obey(fleet, reconciler, clock.now());
    await reconciler.pass();

    fleet.get('r1').slotsInUse = 0;
    sampleFor(30);
    await reconciler.pass();
    // The stable average (0.9) wants 1, but the last panic was 30 s ago.
    expect(reconciler.status('m')).toMatchObject({ wanted: 3, ready: 3 });
    sampleFor(29);
    await reconciler.pass();
    expect(reconciler.status('m').wanted).toBe(3);
    sampleFor(1);
    await reconciler.pass();
    expect(reconciler.status('m')).toMatchObject({ wanted: 1, ready: 2, draining: 1 });
    // The burst has left the stable window too: the scale-down delay (0 here) counts from now.
    expect(scales().at(-1)).toBe('3->2 idle for 0 s');
  });

  it('scales down one replica per pass once below for the whole scaleDownDelay, the least loaded ready one first', async () => {
    const { clock, fleet, store, reconciler, scales, sampleFor } = setup([runner('r1'), runner('r2'), runner('r3')]);
    await store.put(deployment('m', { minReplicas: 3, maxReplicas: 3, targetConcurrency: 10 }));
    await reconciler.pass();
    obey(fleet, reconciler, clock.now());
    await reconciler.pass();
    await store.put(
      deployment('m', { minReplicas: 1, maxReplicas: 3, targetConcurrency: 10, scaleDownDelay: 300_000 }),
    );
    fleet.get('r1').slotsInUse = 1;
    fleet.get('r3').slotsInUse = 1;
    sampleFor(60);
    await reconciler.pass();
    expect(reconciler.status('m')).toMatchObject({ wanted: 1, ready: 3 });
    sampleFor(299);
    clock.advance(999);
    await reconciler.pass();
    expect(reconciler.status('m').ready).toBe(3);
    clock.advance(1);
    reconciler.sample();
    await reconciler.pass();
    expect(reconciler.orderFor('r2')).toBeNull();
    expect(reconciler.orderFor('r1')).not.toBeNull();
    expect(reconciler.status('m')).toMatchObject({ ready: 2, draining: 1 });
    await reconciler.pass();
    expect(reconciler.orderFor('r1')).toBeNull();
    expect(reconciler.orderFor('r3')).not.toBeNull();
    await reconciler.pass();
    expect(reconciler.orderFor('r3')).not.toBeNull();
    expect(scales().slice(1)).toEqual([
      '3->2 2 calls over 60 s at target 10 for 300 s',
      '2->1 2 calls over 60 s at target 10 for 300 s',
    ]);
  });

  it('stops a starting replica before a ready one', async () => {
    const { clock, fleet, store, reconciler, scales } = setup([runner('r1'), runner('r2')]);
    await store.put(deployment('m', { minReplicas: 2, maxReplicas: 2 }));
    await reconciler.pass();
    obey(fleet, reconciler, clock.now());
    const starting = reconciler.orderFor('r1')!.replica;
    host(fleet.get('r1'), 'm', starting, 'starting', clock.now());
    await reconciler.pass();
    expect(reconciler.status('m')).toMatchObject({ ready: 1, starting: 1 });
    await store.put(deployment('m', { minReplicas: 1, maxReplicas: 2, scaleDownDelay: 0 }));
    await reconciler.pass();
    expect(reconciler.orderFor('r1')).toBeNull();
    expect(reconciler.orderFor('r2')).not.toBeNull();
    expect(scales().at(-1)).toBe('2->1 idle for 0 s');
    // The starting one had an operation in flight: it is gone with it, not failed.
    expect(reconciler.status('m')).toMatchObject({ pending: [], ready: 1, draining: 1 });
  });

  it('scales to zero after the idle delay, and the runner stops hosting', async () => {
    const { clock, fleet, store, reconciler, scales } = setup([runner('r1')]);
    await store.put(deployment('m', { scaleDownDelay: 300_000 }));
    fleet.waitingBy.set('m', 1);
    await reconciler.pass();
    obey(fleet, reconciler, clock.now());
    fleet.waitingBy.set('m', 0);
    await reconciler.pass();
    expect(reconciler.status('m').ready).toBe(1);
    clock.advance(300_000);
    await reconciler.pass();
    expect(reconciler.orderFor('r1')).toBeNull();
    expect(scales()).toEqual(['0->1 a call is waiting with no replica', '1->0 idle for 300 s']);
    obey(fleet, reconciler, clock.now());
    await reconciler.pass();
    expect(fleet.get('r1').hosted).toBeUndefined();
    expect(reconciler.status('m')).toMatchObject({ wanted: 0, ready: 0, starting: 0, draining: 0, replicas: [] });
  });

  it('gives null to the replica of a deleted deployment', async () => {
    const { clock, fleet, store, reconciler, scales } = setup([runner('r1')]);
    await store.put(deployment('m', { minReplicas: 1 }));
    await reconciler.pass();
    obey(fleet, reconciler, clock.now());
    await reconciler.pass();
    await store.delete('m');
    await reconciler.pass();
    expect(reconciler.orderFor('r1')).toBeNull();
    expect(reconciler.isDeployed('m')).toBe(false);
    expect(scales().at(-1)).toBe('1->0 deployment deleted');
  });
});

describe('Reconciler: failed starts', () => {
  it('retries a failed start on the other runner after 30 s, 60 s, ... capped at 15 min, then dead-letters all ten attempts and blocks until a PUT', async () => {
    const { clock, fleet, store, reconciler, events, warnings } = setup([runner('r1'), runner('r2')]);
    const d = deployment('m', {
      minReplicas: 1,
      profile: { kind: 'sim', env: { SIM_TOKEN: 'secret-value' }, args: ['--api-key=hush'] },
    });
    await store.put(d);
    await reconciler.pass();
    const waits: number[] = [];
    const runnersTried: string[] = [];
    for (let attempt = 1; attempt <= 10; attempt++) {
      const on = ['r1', 'r2'].find((id) => reconciler.orderFor(id))!;
      runnersTried.push(on);
      const order = reconciler.orderFor(on)!;
      host(fleet.get(on), 'm', order.replica, 'failed', clock.now(), {
        reason: `exit code ${attempt}`,
        output: [`line of ${attempt}`],
      });
      clock.advance(1_000);
      await reconciler.pass();
      expect(reconciler.orderFor(on)).toBeNull();
      obey(fleet, reconciler, clock.now());
      const status = reconciler.status('m');
      if (attempt === 10) {
        expect(status.pending).toEqual([]);
        break;
      }
      expect(status.pending).toHaveLength(1);
      expect(status.pending[0]!.attempts).toHaveLength(attempt);
      expect(status.pending[0]!.lastReason).toBe(`exit code ${attempt}`);
      const wait = status.pending[0]!.nextAttemptAt - clock.now();
      waits.push(wait);
      clock.advance(wait - 1);
      await reconciler.pass();
      expect([reconciler.orderFor('r1'), reconciler.orderFor('r2')]).toEqual([null, null]);
      clock.advance(1);
      await reconciler.pass();
    }
    expect(waits).toEqual([30, 60, 120, 240, 480, 900, 900, 900, 900].map((s) => s * 1000));
    // Another runner where one fits: the two alternate.
    expect(runnersTried).toEqual(['r1', 'r2', 'r1', 'r2', 'r1', 'r2', 'r1', 'r2', 'r1', 'r2']);
    const dead = events.filter((e) => e.kind === 'dead-letter');
    expect(dead).toHaveLength(1);
    const status = reconciler.status('m');
    expect(status.deadLettered).toHaveLength(1);
    expect(status.deadLettered[0]!.attempts.map((a) => [a.runner, a.reason, a.output])).toEqual(
      Array.from({ length: 10 }, (_, i) => [runnersTried[i], `exit code ${i + 1}`, [`line of ${i + 1}`]]),
    );
    expect(status.blocked).toMatch(/failed 10 times.*exit code 10/);
    expect(events.filter((e) => e.kind === 'failed')).toHaveLength(10);
    // Blocked: no new start, however long.
    clock.advance(3_600_000);
    await reconciler.pass();
    expect([reconciler.orderFor('r1'), reconciler.orderFor('r2')]).toEqual([null, null]);
    const logged = JSON.stringify(warnings);
    expect(logged).toContain('exit code 3');
    expect(logged).not.toContain('secret-value');
    expect(logged).not.toContain('hush');

    // A PUT (a new updatedAt) clears the block.
    clock.advance(1);
    await store.put(d);
    await reconciler.pass();
    expect(reconciler.status('m').blocked).toBeUndefined();
    expect(reconciler.orderFor('r1')).toMatchObject({ model: 'm' });
    expect(reconciler.status('m').deadLettered).toHaveLength(1);
  });

  it('fails an attempt whose runner leaves the fleet, or stops being placeable, before the replica is ready', async () => {
    const { clock, fleet, store, reconciler, events } = setup([runner('r1'), runner('r2'), runner('r3')]);
    await store.put(deployment('m', { minReplicas: 1 }));
    await reconciler.pass();
    obey(fleet, reconciler, clock.now(), 'starting');
    fleet.remove('r1');
    await reconciler.pass();
    expect(events.filter((e) => e.kind === 'failed').map((e) => e.kind === 'failed' && [e.runner, e.reason])).toEqual([
      ['r1', 'runner lost: it left the fleet before the replica was ready'],
    ]);
    expect(reconciler.status('m').pending[0]).toMatchObject({
      attempts: [{ runner: 'r1' }],
      nextAttemptAt: clock.now() + 30_000,
    });
    clock.advance(30_000);
    await reconciler.pass();
    expect(reconciler.orderFor('r2')).toMatchObject({ model: 'm' });
    fleet.get('r2').placeable = false;
    await reconciler.pass();
    expect(reconciler.status('m').pending[0]!.attempts.map((a) => a.reason)).toEqual([
      'runner lost: it left the fleet before the replica was ready',
      'runner lost: it stopped being placeable (draining, or missing heartbeats) before the replica was ready',
    ]);
    expect(reconciler.status('m').pending[0]!.nextAttemptAt).toBe(clock.now() + 60_000);
  });

  it(`fails an attempt whose runner has not reported the replica within orderTimeout (${reconcilerDefaults.orderTimeout} ms)`, async () => {
    const { clock, store, reconciler } = setup([runner('r1'), runner('r2')]);
    await store.put(deployment('m', { minReplicas: 1 }));
    await reconciler.pass();
    const replica = reconciler.orderFor('r1')!.replica;
    clock.advance(29_999);
    await reconciler.pass();
    expect(reconciler.status('m').pending[0]).toMatchObject({ replica, attempts: [] });
    clock.advance(1);
    await reconciler.pass();
    expect(reconciler.orderFor('r1')).toBeNull();
    expect(reconciler.status('m').pending[0]!.attempts).toEqual([
      {
        runner: 'r1',
        replica,
        reason: 'the runner did not report the replica within 30 s of the order',
        at: clock.now(),
      },
    ]);
  });

  it('shows every runner and its reason when no runner fits', async () => {
    const { store, reconciler } = setup([
      Object.assign(runner('old'), { capacity: undefined }),
      runner('own', { orders: false }),
      runner('gone', {}, { placeable: false }),
      runner('llama', { engineKinds: ['llamacpp'] }),
      runner('zone-b', { labels: { zone: 'b' } }),
    ]);
    await store.put(deployment('m', { minReplicas: 1, runnerLabels: { zone: 'a' } }));
    await reconciler.pass();
    expect(reconciler.status('m').unplaced).toEqual({
      reason: 'no runner fits a replica of m',
      runners: {
        old: 'reports no capacity (a runner older than engine orders)',
        own: 'takes no engine orders (it runs an engine of its own)',
        gone: 'not placeable (draining, or missing heartbeats)',
        llama: 'cannot launch kind sim (it can launch: llamacpp)',
        'zone-b': 'label zone is b, wanted a',
      },
    });
    expect(reconciler.status('m').pending).toEqual([
      expect.objectContaining({ attempts: [], lastReason: 'no runner fits' }),
    ]);
    expect(reconciler.orderFor('old')).toBeUndefined();
    expect(reconciler.orderFor('own')).toBeUndefined();
  });
});

describe('Reconciler: leadership', () => {
  it('answers undefined while following, reports replicas from the runners, and gives orders once it leads', async () => {
    const { clock, fleet, store, lease, reconciler, events } = setup([runner('r1'), runner('r2')]);
    host(fleet.get('r1'), 'm', 'm-1', 'ready', T0 - 5);
    await store.put(deployment('m', { minReplicas: 2, maxReplicas: 2 }));
    lease.held = false;
    expect(reconciler.orderFor('r1')).toBeUndefined();
    await reconciler.pass();
    expect(reconciler.leading).toBe(false);
    expect(reconciler.orderFor('r1')).toBeUndefined();
    expect(reconciler.orderFor('r2')).toBeUndefined();
    expect(reconciler.isDeployed('m')).toBe(true);
    expect(reconciler.status('m')).toEqual({
      reconciler: 'following',
      wanted: 0,
      starting: 0,
      ready: 1,
      draining: 0,
      outdated: 0,
      replicas: [{ replica: 'm-1', runner: 'r1', state: 'ready', since: T0 - 5 }],
      pending: [],
      deadLettered: [],
      events: [],
    });

    lease.held = true;
    await reconciler.pass();
    expect(reconciler.leading).toBe(true);
    expect(reconciler.orderFor('r1')).toMatchObject({ replica: 'm-1', model: 'm' });
    expect(reconciler.orderFor('r2')).toMatchObject({ model: 'm' });

    lease.held = false;
    await reconciler.pass();
    expect(reconciler.orderFor('r1')).toBeUndefined();
    expect(events.filter((e) => e.kind === 'leader')).toEqual([
      { kind: 'leader', leading: true },
      { kind: 'leader', leading: false },
    ]);
    void clock;
  });

  it('warns when it loses the lease while running, and not when it releases it at close', async () => {
    const { lease, reconciler, warnings, events } = setup([runner('r1')]);
    await reconciler.pass();
    lease.held = false;
    await reconciler.pass();
    expect(warnings).toEqual([{ msg: 'reconciler lease lost', why: 'lease not held' }]);

    lease.held = true;
    await reconciler.pass();
    expect(reconciler.leading).toBe(true);
    await reconciler.close();
    expect(reconciler.leading).toBe(false);
    expect(warnings).toHaveLength(1);
    expect(events.filter((e) => e.kind === 'leader').at(-1)).toEqual({ kind: 'leader', leading: false });
  });

  it('adopts hosted replicas of deployed models on taking the lease and gives them no null, while a replica of no deployment gets one', async () => {
    const { clock, fleet, store, reconciler, scales } = setup([runner('r1'), runner('r2'), runner('r3'), runner('r4')]);
    host(fleet.get('r1'), 'm', 'm-ready', 'ready', T0 - 60_000);
    host(fleet.get('r2'), 'm', 'm-starting', 'starting', T0 - 1_000);
    host(fleet.get('r3'), 'gone', 'gone-1', 'ready', T0 - 60_000);
    await store.put(deployment('m', { maxReplicas: 4, scaleDownDelay: 300_000 }));
    await reconciler.pass();
    expect(reconciler.orderFor('r1')).toMatchObject({ replica: 'm-ready' });
    expect(reconciler.orderFor('r2')).toMatchObject({ replica: 'm-starting' });
    expect(reconciler.orderFor('r3')).toBeNull();
    expect(reconciler.orderFor('r4')).toBeNull();
    expect(reconciler.status('m')).toMatchObject({ wanted: 0, ready: 1, starting: 1 });
    // Nothing is stopped before the scale-down delay, even with no load and min 0.
    clock.advance(299_999);
    host(fleet.get('r2'), 'm', 'm-starting', 'ready', clock.now());
    await reconciler.pass();
    expect(reconciler.orderFor('r1')).toMatchObject({ replica: 'm-ready' });
    expect(reconciler.orderFor('r2')).toMatchObject({ replica: 'm-starting' });
    expect(scales()).toEqual([]);
  });
});

describe('Reconciler: a leader that dies mid scale-up', () => {
  it('the other gateway takes the lease, adopts the replicas starting rather than stopping them, and they become ready under it', async () => {
    const clock = new FakeClock();
    const fleet = new FakeFleet([runner('sl-a'), runner('sl-b')]);
    const store = new MemoryDeploymentStore({ now: () => clock.now() });
    const [leaseA, leaseB] = [new FakeLease(), new FakeLease()];
    leaseB.held = false;
    const make = (lease: FakeLease, seed: number) =>
      new Reconciler({
        store,
        fleet,
        lease,
        clock,
        logger: silentLogger,
        random: seededRandom(seed),
        timers: new ManualTimers(),
      });
    const [a, b] = [make(leaseA, 1), make(leaseB, 2)];
    await store.put(deployment('m', { minReplicas: 2, maxReplicas: 2 }));
    await a.pass();
    await b.pass();
    obey(fleet, a, clock.now(), 'starting');
    clock.advance(1_000);
    await a.pass();
    await b.pass();
    expect(a.status('m')).toMatchObject({ reconciler: 'leading', wanted: 2, starting: 2 });
    expect(b.status('m')).toMatchObject({ reconciler: 'following', starting: 2 });
    const ordered = ['sl-a', 'sl-b'].map((id) => a.orderFor(id)!.replica);

    // The leader is killed: it renews no more, its lease lapses, and the other one takes it.
    leaseA.held = false;
    leaseB.held = true;
    clock.advance(1_000);
    await b.pass();
    expect(b.status('m')).toMatchObject({ reconciler: 'leading', wanted: 2, starting: 2 });
    expect(['sl-a', 'sl-b'].map((id) => b.orderFor(id)?.replica)).toEqual(ordered);
    obey(fleet, b, clock.now());
    await b.pass();
    const s = b.status('m');
    expect(s).toMatchObject({ ready: 2, starting: 0 });
    expect(new Set(s.replicas.map((r) => r.runner))).toEqual(new Set(['sl-a', 'sl-b']));
    expect(s.replicas.map((r) => r.replica)).toEqual(ordered);
  });
});

describe('Reconciler: timers and options', () => {
  it('passes at start and every period, samples every sampleInterval, coalesces pokes, and stops on close', async () => {
    const { fleet, store, lease, timers, reconciler } = setup([runner('r1')], { period: 10_000 });
    await store.put(deployment('m', { maxReplicas: 1 }));
    reconciler.start();
    expect(timers.delays.sort()).toEqual([0, 1_000]);
    timers.fire(0);
    await reconciler.pass();
    expect(reconciler.leading).toBe(true);
    expect(timers.delays.sort((a, b) => a - b)).toEqual([1_000, 10_000]);
    fleet.waitingBy.set('m', 1);
    reconciler.poke('m');
    reconciler.poke('m');
    reconciler.poke('m');
    expect(timers.delays.filter((d) => d === 0)).toHaveLength(1);
    timers.fire(0);
    await reconciler.pass();
    expect(reconciler.orderFor('r1')).toMatchObject({ model: 'm' });
    await reconciler.close();
    expect(timers.pending.size).toBe(0);
    expect(lease.released).toBe(1);
    expect(reconciler.leading).toBe(false);
    expect(reconciler.orderFor('r1')).toBeUndefined();
    await reconciler.close();
    expect(lease.released).toBe(1);
    // A pass after close takes nothing.
    await reconciler.pass();
    expect(reconciler.leading).toBe(false);
    expect(reconciler.orderFor('r1')).toBeUndefined();
  });

  it('runs one pass at a time: a pass asked for during one follows it', async () => {
    const { fleet, store, reconciler } = setup([runner('r1')]);
    await store.put(deployment('m'));
    const first = reconciler.pass();
    fleet.waitingBy.set('m', 1);
    const second = reconciler.pass();
    const third = reconciler.pass();
    expect(third).toBe(second);
    await first;
    await second;
    expect(reconciler.orderFor('r1')).toMatchObject({ model: 'm' });
  });

  it.each([
    [{ period: 0 }, 'period must be a positive integer, got 0'],
    [{ stableWindow: '60s' }, 'stableWindow must be a positive integer, got "60s"'],
    [{ panicWindow: 120_000 }, 'panicWindow must be at most stableWindow (60000 ms), got 120000'],
    [{ panicThreshold: 0.5 }, 'panicThreshold must be at least 1, got 0.5'],
    [{ startBackoffCap: 1_000 }, 'startBackoffCap must be at least startBackoffBase (30000 ms), got 1000'],
    [{ startAttempts: 0 }, 'startAttempts must be a positive integer, got 0'],
    [{ deadLetterKeep: 1.5 }, 'deadLetterKeep must be a positive integer, got 1.5'],
    [{ sampleInterval: 7_000 }, 'sampleInterval must be at most panicWindow (6000 ms), got 7000'],
  ])('refuses %j naming the option and value', (options, message) => {
    const make = () =>
      new Reconciler({
        store: new MemoryDeploymentStore(),
        fleet: new FakeFleet([]),
        lease: new FakeLease(),
        clock: new FakeClock(),
        logger: silentLogger,
        ...(options as ReconcilerOptions),
      });
    expect(make).toThrow(GatewayConfigError);
    expect(make).toThrow(message);
  });

  it('makes replica ids of the model slug and hex digits, within the wire id rule', () => {
    const random = seededRandom(1);
    for (const model of ['meta-llama/Llama-3.1-8B-Instruct', 'm', '/', 'Ω model', 'x'.repeat(300)]) {
      const id = replicaId(model, random);
      expect(id).toMatch(WIRE_ID_PATTERN);
      expect(id).toMatch(/-[0-9a-f]{8}$/);
    }
    expect(replicaId('meta-llama/Llama-3.1-8B-Instruct', () => 0)).toBe('llama-3-1-8b-instruct-00000000');
  });
});

describe('Reconciler: a runner still reporting how its replica ended', () => {
  it('orders the retry onto a runner that still reports the failed replica: a failed engine holds nothing', async () => {
    const { clock, fleet, store, reconciler } = setup([runner('r1')], {
      startBackoffBase: 1_000,
      startBackoffCap: 1_000,
    });
    await store.put(deployment('m', { minReplicas: 1, maxReplicas: 1 }));
    await reconciler.pass();
    const first = reconciler.orderFor('r1')!;
    host(fleet.list[0]!, 'm', first.replica, 'failed', clock.now(), { reason: 'the engine exited with code 1' });
    await reconciler.pass();
    expect(reconciler.orderFor('r1')).toBeNull();
    // The runner reports the failure until it reads that null: the retry must not wait on it.
    clock.advance(1_000);
    await reconciler.pass();
    const second = reconciler.orderFor('r1');
    expect(second?.replica).toBeDefined();
    expect(second!.replica).not.toBe(first.replica);
    expect(reconciler.status('m').unplaced).toBeUndefined();
  });
});

describe('Reconciler: a burst between passes', () => {
  it('asks for a pass at a sample past the panic threshold, not at the next period', async () => {
    const { clock, fleet, store, reconciler, timers } = setup([runner('r1'), runner('r2')]);
    await store.put(deployment('m', { minReplicas: 1, maxReplicas: 2, targetConcurrency: 1 }));
    await reconciler.pass();
    obey(fleet, reconciler, clock.now());
    await reconciler.pass();
    const busy = fleet.list.find((r) => r.hosted)!;
    // One ready replica at target 1: a concurrency of 1 is no panic, 3 is (threshold 2).
    busy.slotsInUse = 1;
    clock.advance(1_000);
    reconciler.sample();
    expect(timers.delays).not.toContain(0);
    busy.slotsInUse = 3;
    clock.advance(1_000);
    reconciler.sample();
    expect(timers.delays).toContain(0);
    timers.fire(0);
    await reconciler.pass();
    expect(reconciler.status('m').wanted).toBe(2);
  });
});

describe('Reconciler: a changed deployment rolls', () => {
  /** Two ready replicas of m, on the first two runners given, at the first profile. */
  async function twoReady(runners: MutableRunner[], options: ReconcilerOptions = {}) {
    const s = setup(runners, options);
    await s.store.put(
      deployment('m', { minReplicas: 2, maxReplicas: 2, profile: { kind: 'sim', args: ['--v', '1'] } }),
    );
    await s.reconciler.pass();
    obey(s.fleet, s.reconciler, s.clock.now());
    await s.reconciler.pass();
    expect(s.reconciler.status('m')).toMatchObject({ ready: 2, outdated: 0 });
    return s;
  }
  const changed = (extra: Record<string, unknown> = {}) =>
    deployment('m', { minReplicas: 2, maxReplicas: 2, profile: { kind: 'sim', args: ['--v', '2'] }, ...extra });
  const argsOn = (reconciler: Reconciler, id: string) => reconciler.orderFor(id)?.profile.args.join(' ');

  it('starts a current replica beside each outdated one and stops the outdated one only once it is ready, one at a time', async () => {
    const { clock, fleet, store, reconciler, events, scales } = await twoReady([
      runner('r1'),
      runner('r2'),
      runner('r3'),
    ]);
    const old = { r1: reconciler.orderFor('r1')!, r2: reconciler.orderFor('r2')! };
    const scalesBefore = scales();
    await store.put(changed());
    await reconciler.pass();
    // The replacement starts on the free runner; both outdated replicas keep serving.
    expect(argsOn(reconciler, 'r3')).toBe('--v 2');
    expect(reconciler.orderFor('r3')!.revision).not.toBe(old.r1.revision);
    expect([reconciler.orderFor('r1'), reconciler.orderFor('r2')]).toEqual([old.r1, old.r2]);
    expect(reconciler.status('m')).toMatchObject({ wanted: 2, ready: 2, starting: 1, outdated: 2 });
    await reconciler.pass();
    expect(reconciler.orderFor('r1')).toEqual(old.r1);

    obey(fleet, reconciler, clock.now());
    await reconciler.pass();
    const first = reconciler.orderFor('r3')!.replica;
    expect(reconciler.orderFor('r1')).toBeNull();
    expect(events.filter((e) => e.kind === 'replaced')).toEqual([
      { kind: 'replaced', model: 'm', replica: old.r1.replica, runner: 'r1', by: first },
    ]);
    expect(reconciler.status('m')).toMatchObject({ ready: 2, draining: 1, outdated: 1 });

    // r1 drains and clears; the second replacement takes it.
    obey(fleet, reconciler, clock.now());
    await reconciler.pass();
    expect(argsOn(reconciler, 'r1')).toBe('--v 2');
    expect(reconciler.orderFor('r2')).toEqual(old.r2);
    obey(fleet, reconciler, clock.now());
    await reconciler.pass();
    expect(reconciler.orderFor('r2')).toBeNull();
    obey(fleet, reconciler, clock.now());
    await reconciler.pass();
    expect(reconciler.status('m')).toMatchObject({ wanted: 2, ready: 2, starting: 0, outdated: 0 });
    expect(['r1', 'r2', 'r3'].map((id) => argsOn(reconciler, id))).toEqual(['--v 2', undefined, '--v 2']);
    expect(events.filter((e) => e.kind === 'replaced')).toHaveLength(2);
    // The count never moved: no scale event.
    expect(scales()).toEqual(scalesBefore);
  });

  it('stops an outdated replica first when no runner has room beside it, and starts its replacement on that runner', async () => {
    const { clock, fleet, store, reconciler } = await twoReady([runner('r1'), runner('r2')]);
    const old2 = reconciler.orderFor('r2')!;
    await store.put(changed());
    await reconciler.pass();
    expect(reconciler.orderFor('r1')).toBeNull();
    expect(reconciler.orderFor('r2')).toEqual(old2);
    expect(reconciler.status('m')).toMatchObject({ ready: 1, draining: 1, outdated: 1 });
    obey(fleet, reconciler, clock.now());
    await reconciler.pass();
    expect(argsOn(reconciler, 'r1')).toBe('--v 2');
    obey(fleet, reconciler, clock.now());
    await reconciler.pass();
    // r1 ready at the new profile: now r2 goes the same way.
    expect(reconciler.orderFor('r2')).toBeNull();
    obey(fleet, reconciler, clock.now());
    await reconciler.pass();
    obey(fleet, reconciler, clock.now());
    await reconciler.pass();
    expect(['r1', 'r2'].map((id) => argsOn(reconciler, id))).toEqual(['--v 2', '--v 2']);
    expect(reconciler.status('m')).toMatchObject({ ready: 2, outdated: 0 });
  });

  it('keeps outdated replicas serving when the new revision fits no runner, saying why', async () => {
    const { store, reconciler } = await twoReady([
      runner('r1', { labels: { zone: 'a' } }),
      runner('r2', { labels: { zone: 'a' } }),
      runner('r3', { labels: { zone: 'a' } }),
    ]);
    const old = ['r1', 'r2'].map((id) => reconciler.orderFor(id));
    await store.put(
      deployment('m', {
        minReplicas: 2,
        maxReplicas: 2,
        profile: { kind: 'sim', args: ['--v', '1'] },
        runnerLabels: { zone: 'b' },
      }),
    );
    for (let i = 0; i < 3; i++) await reconciler.pass();
    expect(['r1', 'r2'].map((id) => reconciler.orderFor(id))).toEqual(old);
    expect(reconciler.orderFor('r3')).toBeNull();
    const status = reconciler.status('m');
    expect(status).toMatchObject({ ready: 2, outdated: 2, unplaced: { runners: { r3: 'label zone is a, wanted b' } } });
    expect(status.replicas.every((r) => r.outdated)).toBe(true);
  });

  it('restarts a replica still starting at once with the current profile', async () => {
    const { store, reconciler } = setup([runner('r1'), runner('r2')]);
    await store.put(deployment('m', { minReplicas: 1, profile: { kind: 'sim', args: ['--v', '1'] } }));
    await reconciler.pass();
    const before = reconciler.orderFor('r1')!;
    await store.put(deployment('m', { minReplicas: 1, profile: { kind: 'sim', args: ['--v', '2'] } }));
    await reconciler.pass();
    const after = reconciler.orderFor('r1')!;
    expect(after.replica).not.toBe(before.replica);
    expect(after.profile.args).toEqual(['--v', '2']);
    expect(reconciler.orderFor('r2')).toBeNull();
    expect(reconciler.status('m')).toMatchObject({ starting: 1, outdated: 0 });
  });

  it('restarts nothing when only the replica counts, the target or the delay change', async () => {
    const { store, reconciler } = await twoReady([runner('r1'), runner('r2'), runner('r3')]);
    const old = ['r1', 'r2', 'r3'].map((id) => reconciler.orderFor(id));
    await store.put(
      deployment('m', {
        minReplicas: 2,
        maxReplicas: 3,
        targetConcurrency: 7,
        scaleDownDelay: 1_000,
        profile: { kind: 'sim', args: ['--v', '1'] },
      }),
    );
    await reconciler.pass();
    expect(['r1', 'r2', 'r3'].map((id) => reconciler.orderFor(id))).toEqual(old);
    expect(reconciler.status('m').outdated).toBe(0);
  });

  it('keeps the outdated replicas when every replacement fails: dead-lettered, blocked, still serving', async () => {
    const { clock, fleet, store, reconciler, events } = await twoReady([runner('r1'), runner('r2'), runner('r3')], {
      startAttempts: 2,
      startBackoffBase: 1_000,
      startBackoffCap: 1_000,
    });
    const old = ['r1', 'r2'].map((id) => reconciler.orderFor(id));
    await store.put(changed());
    for (let attempt = 1; attempt <= 2; attempt++) {
      await reconciler.pass();
      const order = reconciler.orderFor('r3')!;
      expect(order.profile.args).toEqual(['--v', '2']);
      host(fleet.get('r3'), 'm', order.replica, 'failed', clock.now(), { reason: `exit code ${attempt}` });
      await reconciler.pass();
      obey(fleet, reconciler, clock.now());
      clock.advance(1_000);
    }
    for (let i = 0; i < 3; i++) await reconciler.pass();
    expect(events.filter((e) => e.kind === 'dead-letter')).toHaveLength(1);
    expect(['r1', 'r2'].map((id) => reconciler.orderFor(id))).toEqual(old);
    expect(reconciler.orderFor('r3')).toBeNull();
    expect(reconciler.status('m')).toMatchObject({
      ready: 2,
      outdated: 2,
      blocked: expect.stringMatching(/failed 2 times.*exit code 2/),
    });
  });

  it('a new leader rolls a replica its runner reports at an older revision, and takes one reporting none as current', async () => {
    const { fleet, store, reconciler } = setup([runner('r1'), runner('r2'), runner('r3')]);
    await store.put(deployment('m', { minReplicas: 2, maxReplicas: 2 }));
    host(fleet.get('r1'), 'm', 'm-old', 'ready', T0 - 5, { revision: '0123456789abcdef' });
    host(fleet.get('r2'), 'm', 'm-unknown', 'ready', T0 - 5);
    await reconciler.pass();
    expect(reconciler.orderFor('r1')).toMatchObject({ replica: 'm-old' });
    expect(reconciler.orderFor('r2')).toMatchObject({ replica: 'm-unknown' });
    expect(reconciler.orderFor('r3')).toMatchObject({ model: 'm' });
    expect(reconciler.status('m')).toMatchObject({ ready: 2, starting: 1, outdated: 1 });
    expect(
      reconciler
        .status('m')
        .replicas.filter((r) => r.outdated)
        .map((r) => r.runner),
    ).toEqual(['r1']);
  });
});
