/**
 * A runner's status page, `GET /status`: what the runner serves, whether it admits calls, and its
 * load. The runner writes it; a gateway probes static runners with it (registered runners say the
 * same through heartbeats) and reads it with {@link readStatus}. One type, both sides.
 */
import { WIRE_ID_PATTERN } from './registration.ts';
import type { Capacity, HostedEngine, ReportedLoad } from './registration.ts';

/** Path of a runner's status page. */
export const STATUS_PATH = '/status';

/**
 * An engine's load as its own metrics report it, summed over every engine or model label set on
 * the page. A field is absent when the page does not carry it (or carries NaN), never guessed.
 */
export interface EngineLoad {
  /** Requests in the running batch. */
  running?: number;
  /** Requests queued for a batch slot. */
  waiting?: number;
  /** Share of the KV cache in use, 0..1; the mean over label sets (each engine has its own cache). */
  kvCacheUsage?: number;
  /** Prompt tokens found in the prefix cache since the engine started (a counter). */
  prefixCacheHits?: number;
  /** Prompt tokens looked up in the prefix cache since the engine started (a counter). */
  prefixCacheQueries?: number;
}

/** Where a supervised engine stands. A supervisor not yet started reads `stopped`. */
export type SupervisorState = 'starting' | 'ready' | 'draining' | 'stopped' | 'failed';

/** How the engine process ended. */
export interface EngineExit {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  /** Why the process could not be started at all (spawn failures only). */
  readonly error?: string;
  /** When, by the supervisor's clock. */
  readonly at: number;
}

/** One GPU as nvidia-smi lists it. */
export interface Gpu {
  /** nvidia-smi's index, the number CUDA_VISIBLE_DEVICES takes by default. */
  readonly index: number;
  readonly uuid: string;
  readonly name: string;
  /** Null where nvidia-smi printed `[N/A]`; kept in status output rather than dropped. */
  readonly memoryTotalMiB: number | null;
  readonly memoryUsedMiB: number | null;
}

/** The GPUs on this node and where the list came from. */
export type GpuInventory =
  | { readonly source: 'nvidia-smi'; readonly gpus: readonly Gpu[] }
  | { readonly source: 'none'; readonly gpus: readonly []; readonly reason: string };

/** What /status shows of the engine. */
export interface EngineStatus {
  kind: string;
  url: string;
  /** `ready` only when the runner admits calls to it. */
  state: string;
  models: readonly string[];
  /** The engine's own load from its metrics, when its kind publishes any. */
  load?: EngineLoad;
  /** Age of that load in ms. */
  loadAgeMs?: number;
  /** Present when the runner launched the engine from a profile. */
  supervised?: {
    state: SupervisorState;
    model: string;
    gpus: readonly number[];
    pid: number | undefined;
    restarts: number;
    lastExit: EngineExit | undefined;
    /** The engine's last output lines, shown while it is not ready (a failure's explanation). */
    output?: readonly string[];
  };
}

/** What GET /status answers. */
export interface RunnerStatus {
  id: string;
  version: string;
  state: 'serving' | 'draining';
  /** True when the runner admits calls: serving, and its engine ready. */
  ready: boolean;
  /** The engines behind this runner (one today; none while an on-demand runner hosts none), each with its slots, state and load. */
  engines: Array<EngineStatus & { slots: { total: number; inUse: number } }>;
  /** The models the engine serves, as it last listed them. */
  models: readonly string[];
  /** GPUs on this node, from nvidia-smi; `source: 'none'` with the reason on a CPU-only node. */
  gpus: GpuInventory;
  slots: { total: number; inUse: number };
  /** What the runner could host: labels, GPUs its engine does not hold, engine kinds it can launch, whether it takes orders. */
  capacity: Capacity;
  /** The ordered engine an on-demand runner hosts (runner/hosting.ts); absent before any order and on runners with an engine of their own. */
  hosted?: HostedEngine;
  /**
   * Calls served, turned away busy, failed, and refused for want of a gateway's credential
   * (`unauthorized`: a bad or missing signature, a TLS handshake without a valid client
   * certificate; absent from runners older than that check).
   */
  calls: { served: number; rejected: number; failed: number; unauthorized?: number };
}

/** What a gateway takes from a status page. */
export interface StatusReading {
  /** The runner's own id ({@link WIRE_ID_PATTERN}); absent when the page has none that is valid. */
  id?: string;
  /**
   * The models served, or undefined while the runner's engine is not ready: a runner whose engine
   * is still loading lists no models yet, and that is not "serves none".
   */
  models: readonly string[] | undefined;
  /** The runner's load, when the page carries its slots. */
  load: ReportedLoad | undefined;
}

/**
 * Reads a status page leniently: a field missing or of the wrong type (an older or newer runner)
 * leaves its part of the reading undefined rather than failing the probe.
 */
export function readStatus(body: unknown): StatusReading {
  const status = (body ?? {}) as Partial<Record<keyof RunnerStatus, unknown>> & {
    slots?: { total?: unknown; inUse?: unknown };
    engines?: Array<{ load?: { waiting?: number; kvCacheUsage?: number } }>;
  };
  let load: ReportedLoad | undefined;
  if (typeof status.slots?.total === 'number' && typeof status.slots.inUse === 'number') {
    const engine = Array.isArray(status.engines) ? status.engines[0]?.load : undefined;
    load = {
      slotsInUse: status.slots.inUse,
      slots: status.slots.total,
      queue: engine?.waiting ?? 0,
      ...(engine?.kvCacheUsage === undefined ? {} : { kvCacheUsage: engine.kvCacheUsage }),
      models: {},
    };
  }
  const models =
    status.ready === false || !Array.isArray(status.models)
      ? undefined
      : (status.models as unknown[]).filter((m): m is string => typeof m === 'string');
  const id = typeof status.id === 'string' && WIRE_ID_PATTERN.test(status.id) ? status.id : undefined;
  return { ...(id === undefined ? {} : { id }), models, load };
}
