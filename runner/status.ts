/**
 * The runner's status as GET /status answers it and as heartbeats carry it to gateways: its
 * state, its engine, its slots and what it has served, read fresh on every ask.
 */
import type { RunnerEngine } from './engine.ts';
import type { GpuInventory } from './inventory.ts';
import type { RunnerConfig } from './options.ts';
import type { RunnerStatus } from './protocol.ts';
import type { Slots } from './slots.ts';
import { VERSION } from './version.ts';

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
}

/** Reads the runner's status now. */
export function readStatus(from: StatusSources): RunnerStatus {
  const { config, engine, slots } = from;
  const draining = from.draining();
  const engineStatus = engine.status();
  return {
    id: config.id,
    version: VERSION,
    state: draining ? 'draining' : 'serving',
    ready: !draining && engineStatus.state === 'ready',
    engines: [{ ...engineStatus, slots: { total: slots.total, inUse: slots.inUse } }],
    models: engineStatus.models,
    gpus: from.gpus(),
    slots: { total: slots.total, inUse: slots.inUse },
    calls: { ...from.counts },
  };
}
