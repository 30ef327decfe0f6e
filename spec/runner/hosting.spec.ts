/**
 * Hosting's bookkeeping of how a replica ended, without processes: a `failed` (or `stopped`)
 * report is cleared only by a null that answers a beat which carried it, so a gateway always
 * sees how a replica ended before the runner forgets it.
 */
import { describe, expect, it } from 'vitest';
import { silentLogger } from '../../placer/kernel/index.ts';
import type { RunnerEngine } from '../../runner/engine.ts';
import { Hosting } from '../../runner/hosting.ts';
import type { EngineOrder, HostedEngine } from '../../runner/protocol/index.ts';
import { Slots } from '../../runner/slots.ts';

/** An engine that is never launched: the order below is refused before launch. */
const idleEngine = { unload: async () => {}, launch: async () => {}, drain: () => {} } as unknown as RunnerEngine;

function hosting() {
  let changes = 0;
  const h = new Hosting({
    engine: idleEngine,
    slots: new Slots(1),
    drainTimeout: 1000,
    inventory: () => ({ gpus: [], source: 'none', reason: 'spec' }),
    facts: () => ({ gpuIndices: [], findBinary: async () => '/bin/true', portFree: async () => true }),
    changed: () => void changes++,
    logger: silentLogger,
    freePort: async () => 40_000,
  });
  return { h, changes: () => changes };
}

// Two GPUs on a node with none: refused before anything launches, reported failed.
const order: EngineOrder = {
  replica: 'rep-1',
  model: 'm',
  profile: { kind: 'vllm', model: 'm', gpus: 2, args: [], env: {} },
};

describe('Hosting: clearing a failed report', () => {
  it('keeps reporting a failure until a null answers a beat that carried it', async () => {
    const { h } = hosting();
    h.order(order);
    await h.settled();
    const failed = h.report();
    expect(failed).toMatchObject({
      replica: 'rep-1',
      state: 'failed',
      reason: expect.stringContaining('asks for 2 GPUs'),
    });

    // A null answering a beat sent before the failure (it reported the replica starting) clears nothing.
    const earlier: HostedEngine = { ...failed!, state: 'starting' };
    h.order(null, earlier);
    await h.settled();
    expect(h.report()?.state).toBe('failed');
    // Nor one answering a beat that carried no engine at all.
    h.order(null, undefined);
    await h.settled();
    expect(h.report()?.state).toBe('failed');

    // The null that answers the beat which reported the failure: the gateway has seen it.
    h.order(null, failed);
    await h.settled();
    expect(h.report()).toBeUndefined();
  });
});

describe("Hosting: the order's revision", () => {
  it('reports the revision its order came with, in every state, and none for an order without one', async () => {
    const { h } = hosting();
    h.order({ ...order, revision: '9e964c3c25845b4e' });
    await h.settled();
    expect(h.report()).toMatchObject({ replica: 'rep-1', revision: '9e964c3c25845b4e', state: 'failed' });
    h.order({ ...order, replica: 'rep-2' });
    await h.settled();
    expect(h.report()).toMatchObject({ replica: 'rep-2', state: 'failed' });
    expect(h.report()).not.toHaveProperty('revision');
  });
});
