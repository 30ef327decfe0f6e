/**
 * The runner's status as GET /status answers it and as heartbeats carry it to gateways: its
 * state, its engine, its slots and what it has served, read fresh on every ask.
 */
import type { RunnerEngine } from './engine.ts';
import { freeGpus } from './capacity.ts';
import type { GpuInventory } from './protocol/index.ts';
import type { RunnerConfig } from './options.ts';
import type { HostedEngine, RunnerStatus } from './protocol/index.ts';
import type { Slots } from './slots.ts';
import { VERSION } from './protocol/version.ts';

/** Calls the runner served, turned away, saw fail, and refused as not from a gateway, since it started. */
export interface CallCounts {
  served: number;
  rejected: number;
  failed: number;
  unauthorized: number;
}

/** Where the status is read from. */
export interface StatusSources {
  config: RunnerConfig;
  engine: RunnerEngine;
  slots: Slots;
  counts: Readonly<CallCounts>;
  draining(): boolean;
  /** The GPU inventory as last read. */
  gpus(): GpuInventory;
  /** The engine kinds this runner can launch, as found at start (empty before). */
  engineKinds(): readonly string[];
  /** The ordered engine an on-demand runner hosts; undefined for other runners and before any order. */
  hosted?(): HostedEngine | undefined;
}

/** Reads the runner's status now. */
export function readStatus(from: StatusSources): RunnerStatus {
  const { config, engine, slots } = from;
  const draining = from.draining();
  const engineStatus = engine.status();
  const inventory = from.gpus();
  const hosted = from.hosted?.();
  // An ordered engine serves once its order reads ready: not while it drains toward a stop.
  const hostedReady = hosted === undefined || hosted.state === 'ready';
  return {
    id: config.id,
    version: VERSION,
    state: draining ? 'draining' : 'serving',
    ready: !draining && engineStatus?.state === 'ready' && hostedReady,
    engines: engineStatus ? [{ ...engineStatus, slots: { total: slots.total, inUse: slots.inUse } }] : [],
    models: engineStatus?.models ?? [],
    gpus: inventory,
    slots: { total: slots.total, inUse: slots.inUse },
    capacity: {
      labels: config.labels,
      // A launched engine keeps its GPUs while it restarts, fails or stops: they are not free for another.
      freeGpus: freeGpus(inventory, engineStatus?.supervised?.gpus ?? []),
      engineKinds: from.engineKinds(),
      ...(config.orders ? { orders: true } : {}),
    },
    ...(hosted ? { hosted } : {}),
    calls: { ...from.counts },
  };
}
