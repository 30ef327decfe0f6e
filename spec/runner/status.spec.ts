/** runner/status.ts: the runner's status as /status, registrations and heartbeats carry it. */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import type { RunnerEngine } from '../../runner/engine.ts';
import { parseNvidiaSmi } from '../../runner/inventory.ts';
import type { GpuInventory } from '../../runner/protocol/index.ts';
import { resolveRunnerOptions } from '../../runner/options.ts';
import { Slots } from '../../runner/slots.ts';
import { readStatus } from '../../runner/status.ts';

const fixture = (name: string): GpuInventory => ({
  source: 'nvidia-smi',
  gpus: parseNvidiaSmi(readFileSync(new URL(`../fixtures/nvidia-smi/${name}`, import.meta.url), 'utf8')),
});

describe('readStatus capacity', () => {
  /** An engine as status reads it: a launched one holding `gpus`, or one behind a URL. */
  const engine = (gpus: readonly number[] | undefined): RunnerEngine =>
    ({
      status: () => ({
        kind: 'vllm',
        url: 'http://127.0.0.1:8000',
        state: 'ready',
        models: ['m'],
        ...(gpus ? { supervised: { state: 'ready', model: 'm', gpus, pid: 1, restarts: 0, lastExit: undefined } } : {}),
      }),
    }) as unknown as RunnerEngine;
  const status = (gpus: readonly number[] | undefined, inventory: GpuInventory) =>
    readStatus({
      config: resolveRunnerOptions({ engine: 'http://127.0.0.1:8000', labels: { zone: 'a' } }),
      engine: engine(gpus),
      slots: new Slots(2),
      counts: { served: 0, rejected: 0, failed: 0, unauthorized: 0 },
      draining: () => false,
      gpus: () => inventory,
      engineKinds: () => ['vllm', 'sim'],
    });

  it("advertises the labels, the kinds, and the inventory minus the launched engine's GPUs", () => {
    expect(status([0, 1], fixture('h100x8.csv')).capacity).toEqual({
      labels: { zone: 'a' },
      freeGpus: [2, 3, 4, 5, 6, 7],
      engineKinds: ['vllm', 'sim'],
    });
    // An engine behind a URL holds no GPU the runner knows of.
    expect(status(undefined, fixture('l4x1.csv')).capacity.freeGpus).toEqual([0]);
  });
});
