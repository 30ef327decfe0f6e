/**
 * Serverless (gateway/control/serverless.ts) in one process: two gateways' serverless parts over
 * one fleet, one deployment store and one status board, each with a lease the spec hands from
 * one to the other, on a fake clock. Their ticks run on real timers at a short sampleInterval,
 * so the spec polls (with a generous bound) for what a tick brings.
 */
import { metrics } from '@opentelemetry/api';
import { afterEach, describe, expect, it } from 'vitest';
import { MemoryStatusBoard } from '../../../gateway/control/boards.ts';
import type { ReconcilerDeploymentStatus } from '../../../gateway/control/reconciler-options.ts';
import { Serverless } from '../../../gateway/control/serverless.ts';
import { MemoryDeploymentStore } from '../../../gateway/control/store.ts';
import type { RunnerRegistry } from '../../../gateway/fleet/index.ts';
import { silentLogger } from '../../../placer/kernel/index.ts';
import { FakeClock } from '../../placer/fake.ts';
import { eventually } from '../../support/fleet.ts';
import { FakeFleet, FakeLease, deployment, obey, runner } from './fake-fleet.ts';

const parts: Serverless[] = [];
afterEach(async () => {
  await Promise.all(parts.splice(0).map((p) => p.close()));
});

/** The registry as Serverless reads it: the fleet's runners; heartbeat answers are the spec's to give (obey). */
function registryOf(fleet: FakeFleet): RunnerRegistry {
  return { fleet: () => [...fleet.list], setEngineOrders: () => undefined } as unknown as RunnerRegistry;
}

describe('Serverless: two gateways sharing a fleet', () => {
  it('the other gateway takes over when the leader loses its lease mid scale-up, adopts the replicas starting and finishes it; meanwhile it answers with the status the leader published', async () => {
    const clock = new FakeClock();
    const fleet = new FakeFleet([runner('sl-a'), runner('sl-b')]);
    const store = new MemoryDeploymentStore({ now: () => clock.now() });
    await store.put(deployment('m', { minReplicas: 2, maxReplicas: 2 }));
    const statusBoard = new MemoryStatusBoard<ReconcilerDeploymentStatus>({ now: () => clock.now() });
    const [leaseA, leaseB] = [new FakeLease(), new FakeLease()];
    leaseB.held = false;
    const part = (lease: FakeLease): Serverless => {
      const p = new Serverless({
        store,
        registry: registryOf(fleet),
        calls: { waitingFor: () => 0, wakeAll: () => undefined },
        settings: { lease, statusBoard, sampleInterval: 20, period: 3_600_000 },
        clock,
        logger: silentLogger,
        meterProvider: metrics.getMeterProvider(),
      });
      parts.push(p);
      p.start();
      return p;
    };
    const a = part(leaseA);
    const b = part(leaseB);
    await eventually(
      () => a.reconciler.leading && a.reconciler.status('m').starting === 2,
      10_000,
      'the leader ordering two replicas',
    );
    // The runners take the orders; the engines load.
    obey(fleet, a.reconciler, clock.now(), 'starting');
    const ordered = ['sl-a', 'sl-b'].map((id) => a.reconciler.orderFor(id)!.replica);
    // The follower answers with the leader's status, as published.
    await eventually(async () => (await b.status('m')).wanted === 2, 10_000, 'the leader status published');
    expect(await b.status('m')).toMatchObject({ reconciler: 'following', starting: 2 });

    // The leader is killed: its lease lapses and the other gateway's renewal takes it.
    leaseA.held = false;
    leaseB.held = true;
    clock.advance(leaseB.ttl / 3);
    await eventually(() => b.reconciler.leading && !a.reconciler.leading, 10_000, 'the survivor leading');
    // It adopted the replicas starting rather than stopping them, and they become ready.
    await eventually(() => b.reconciler.status('m').starting === 2, 10_000, 'the replicas adopted');
    expect(['sl-a', 'sl-b'].map((id) => b.reconciler.orderFor(id)?.replica)).toEqual(ordered);
    obey(fleet, b.reconciler, clock.now());
    await b.reconciler.pass();
    const s = await b.status('m');
    expect(s).toMatchObject({ reconciler: 'leading', ready: 2, starting: 0 });
    expect(new Set(s.replicas.map((r) => r.runner))).toEqual(new Set(['sl-a', 'sl-b']));
  });
});
