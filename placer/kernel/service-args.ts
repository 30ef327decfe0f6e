/**
 * The argument lists that start a simulated engine and a runner as services on port 0, for
 * a `StartService` (processes.ts). `sluice up`, the bench and the specs all build fleets of them, so the
 * flags that make an engine and a runner in front of it are written here once, and each caller
 * adds only what is its own (timings, slots, a log level).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * The hash seed of every fleet started here whose engines publish KV events: engines take it as
 * PYTHONHASHSEED in their environment (as vLLM does), and {@link runnerArgs} gives it to their
 * runners (`--hash-seed`), so gateways name blocks as the engines do. Any fixed value would do.
 */
export const KV_HASH_SEED = '0';

/** A scratch folder of ipc sockets for a fleet's engines to publish KV events on. */
export interface KvEventSockets {
  /** Engine `name`'s endpoint, for {@link SimEngineArgs.kvEvents} and {@link RunnerArgs.kvEvents}. */
  endpoint(name: string): string;
  /** Removes the folder; call it once the engines are stopped. */
  remove(): Promise<void>;
}

/** Makes a {@link KvEventSockets} folder in the temp directory, named from `prefix`. */
export async function kvEventSockets(prefix: string): Promise<KvEventSockets> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  return {
    endpoint: (name) => `ipc://${join(dir, `${name}.kv`)}`,
    remove: () => rm(dir, { recursive: true, force: true }),
  };
}

/** What names a simulated engine started by {@link simEngineArgs}. */
export interface SimEngineArgs {
  /** Its engine id (`--engine-id`); without one the engine makes its own. */
  readonly id?: string;
  /**
   * An endpoint (`ipc://` or `tcp://`) the engine binds to publish its KV-cache events on, as
   * vLLM's `--kv-events-config` takes it, with cached tokens in its answers and sha256_cbor block
   * hashes: what a runner needs to carry its cache to gateways. The engine's PYTHONHASHSEED, which
   * seeds the hashes, is the caller's to set in its environment: {@link KV_HASH_SEED}. Without it
   * the engine publishes nothing.
   */
  readonly kvEvents?: string;
}

/** Where a runner started by {@link runnerArgs} gets its calls and its engine. */
export interface RunnerArgs {
  /** Its id (`--id`); without one the runner makes its own. */
  readonly id?: string;
  /** The URL of the engine it stands in front of (`--engine`); without one it waits for a gateway's orders. */
  readonly engine?: string;
  /** The engine's kind (`--engine-kind`), with an engine. @default 'sim' */
  readonly kind?: string;
  /** A gateway it registers with (`--gateway`). */
  readonly gateway?: string;
  /**
   * Where its engine publishes KV-cache events (`--engine-kv-events`): the engine's
   * {@link SimEngineArgs.kvEvents}. The runner then announces {@link KV_HASH_SEED} as the seed.
   */
  readonly kvEvents?: string;
}

/** `sim-engine --port 0`, its id when given, then `extra`. */
export function simEngineArgs(engine: SimEngineArgs, extra: readonly string[] = []): string[] {
  return ['sim-engine', '--port', '0', ...flag('--engine-id', engine.id), ...kvEventsArgs(engine.kvEvents), ...extra];
}

/** `runner --port 0` in front of its engine (of kind sim unless told), its id and gateway when given, then `extra`. */
export function runnerArgs(runner: RunnerArgs, extra: readonly string[] = []): string[] {
  const engine = runner.engine === undefined ? [] : ['--engine', runner.engine, '--engine-kind', runner.kind ?? 'sim'];
  return [
    'runner',
    '--port',
    '0',
    ...engine,
    ...flag('--id', runner.id),
    ...flag('--gateway', runner.gateway),
    ...flag('--engine-kv-events', runner.kvEvents),
    ...(runner.kvEvents === undefined ? [] : ['--hash-seed', KV_HASH_SEED]),
    ...extra,
  ];
}

/** vLLM's flags, which the simulated engine takes too, that publish cache truth on `endpoint`. */
function kvEventsArgs(endpoint: string | undefined): string[] {
  if (endpoint === undefined) return [];
  const config = { enable_kv_cache_events: true, publisher: 'zmq', endpoint, topic: '' };
  return [
    '--enable-prompt-tokens-details',
    '--prefix-caching-hash-algo',
    'sha256_cbor',
    '--kv-events-config',
    JSON.stringify(config),
  ];
}

function flag(name: string, value: string | undefined): string[] {
  return value === undefined ? [] : [name, value];
}
