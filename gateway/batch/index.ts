/**
 * Batches: OpenAI's Files and Batch APIs over the gateway's own call path. A client uploads a
 * JSONL file of requests and creates a batch over it; the gateway runs each line as a call in
 * the `batch` priority class, released as the fleet has free slots, and writes the answers to an
 * output file and an error file.
 *
 * The room's public face: what the composition root (gateway/server.ts) takes from it.
 */
import { randomBytes } from 'node:crypto';
import type { Hono } from 'hono';
import type { MeterProvider } from '@opentelemetry/api';
import type { Clock, Logger } from '../../placer/kernel/index.ts';
import type { GatewayEnv, Limiter } from '../access/index.ts';
import type { BatchStore, CallStore } from '../store/index.ts';
import type { BatchOptions } from '../options.ts';
import { registerBatchRoutes } from './batch-routes.ts';
import { BatchRunner } from './batch-runner.ts';
import type { FleetView } from './window.ts';
import { registerFileRoutes } from './file-routes.ts';
import { FileKeeper } from './files.ts';
import { InProcessCalls } from './line-calls.ts';
import type { ServeCall } from './line-calls.ts';
import type { BatchStats } from './metrics.ts';
import { resolveBatchConfig } from './options.ts';

export { batchDefaults, resolveBatchConfig } from './options.ts';
export type { BatchConfig } from './options.ts';
export type { FleetView } from './window.ts';
export { fleetViewOf } from './fleet-view.ts';
export type { LineAnswer, LineCalls, LineRequest, ServeCall } from './line-calls.ts';
export type { BatchStats } from './metrics.ts';

/** What the batch room is built from: the gateway's parts it uses. */
export interface BatchRoomSettings {
  options: BatchOptions | undefined;
  /** Where files and batches are kept. */
  store: BatchStore;
  /** The detached-call store, whose bytes share the bound with the files'. */
  calls: CallStore;
  limiter: Limiter;
  /** Hands a line's call to the agent. */
  serve: ServeCall;
  fleet: FleetView;
  clock: Clock;
  logger: Logger;
  gatewayId: string;
  maxResultBytes: number;
  meterProvider?: MeterProvider;
}

/** The batch room of one gateway. */
export interface BatchRoom {
  /** Adds the Files and Batch routes. */
  register(app: Hono<GatewayEnv>): void;
  /** The snapshot GET /v1/stats shows under `batches`. */
  stats(): BatchStats;
  /** Stops releasing lines, waits up to `timeout` ms for those in flight, fails what still runs, closes the store. */
  close(timeout: number): Promise<void>;
}

/**
 * Builds the batch room.
 * @throws BatchConfigError naming a bad option.
 */
export function createBatchRoom(settings: BatchRoomSettings): BatchRoom {
  const config = resolveBatchConfig(settings.options);
  const { store, clock } = settings;
  const files = new FileKeeper({
    store,
    calls: settings.calls,
    limiter: settings.limiter,
    clock,
    fileTtl: config.fileTtl,
  });
  const runner = new BatchRunner({
    store,
    files,
    calls: new InProcessCalls(settings.serve),
    fleet: settings.fleet,
    clock,
    logger: settings.logger,
    config,
    maxResultBytes: settings.maxResultBytes,
    gatewayId: settings.gatewayId,
    holder: `${settings.gatewayId}.${randomBytes(6).toString('hex')}`,
    ...(settings.meterProvider ? { meterProvider: settings.meterProvider } : {}),
  });
  // On a shared store, the batches running there are joined: a restarted gateway resumes them.
  runner.resume();
  return {
    register(app) {
      registerFileRoutes(app, { store, files, maxFileBytes: config.maxFileBytes });
      registerBatchRoutes(app, { store, runner, clock, gatewayId: settings.gatewayId });
    },
    stats: () => runner.stats(),
    async close(timeout) {
      await runner.close(timeout);
      await store.close();
    },
  };
}
