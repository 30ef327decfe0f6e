/**
 * The fleet the placement scenario measures, all real child processes on 127.0.0.1: simulated
 * engines on the H100 profile, a runner in front of each, one sluice gateway per placer in front
 * of all the runners, and, when nginx is installed, nginx in front of the same engines once with
 * round-robin and once with least_conn: what a team would put there instead of sluice.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { KV_HASH_SEED, kvEventSockets, runnerArgs, simEngineArgs } from '../../placer/index.ts';
import type { ChildService } from '../../placer/index.ts';
import { referenceNginx, startNginx } from './nginx.ts';
import { startAll, startGroup } from './stack.ts';
import type { FleetBase } from './stack.ts';

/** One contender: a name for the tables and the base URL its calls go to. */
export interface Contender {
  readonly name: string;
  readonly url: string;
}

/** What {@link startPlacementFleet} started. */
export interface PlacementFleet {
  readonly engines: readonly ChildService[];
  readonly runners: readonly ChildService[];
  /** The sluice gateways, then the nginx proxies, in that order. */
  readonly contenders: readonly Contender[];
  /** Why there is no nginx contender, when there is none. */
  readonly nginxSkipped: string | undefined;
  /** Stops everything, front to back; idempotent, and safe after a partial start. */
  stop(): Promise<void>;
}

/** How to start the fleet. */
export interface PlacementFleetOptions extends FleetBase {
  readonly engines: number;
  /** Runner slots: the docs' advice, the engine's max-num-seqs, so a full engine reads busy. */
  readonly slots: number;
  /** The engines' model name; the workload calls it. */
  readonly model: string;
  /** Sluice placers, one gateway each. */
  readonly placers: readonly string[];
  readonly nginx: boolean;
}

/** Starts the fleet; on failure stops what did start and rethrows. */
export function startPlacementFleet(options: PlacementFleetOptions): Promise<PlacementFleet> {
  return startGroup(options, async (started) => {
    const { env, level, group } = started;
    const ids = Array.from({ length: options.engines }, (_, i) => i + 1);
    const engineFlags = ['--profile', 'h100-8b', '--model', options.model, ...level];
    const engines = await startAll(
      started,
      ids.map((i) => simEngineArgs({ id: `h100-${i}` }, engineFlags)),
      env,
    );
    const runnerFlags = ['--slots', String(options.slots), ...level];
    const runners = await startAll(
      started,
      engines.map((engine, i) => runnerArgs({ engine: engine.url, id: `runner-${i + 1}` }, runnerFlags)),
      env,
    );
    const runnerList = runners.map((r) => r.url).join(',');
    const gatewayFlags = (placer: string) => [
      '--runners',
      runnerList,
      '--placer',
      placer,
      '--gateway-id',
      `bench-${placer}`,
    ];
    const gateways = await startAll(
      started,
      options.placers.map((placer) => ['gateway', '--port', '0', ...gatewayFlags(placer), ...level]),
      env,
    );
    const contenders: Contender[] = options.placers.map((placer, i) => ({ name: placer, url: gateways[i]!.url }));
    const upstreams = engines.map((e) => new URL(e.url));
    const reference = await referenceNginx(options.nginx, options.env.PATH, async (bin) => {
      for (const method of ['round-robin', 'least_conn'] as const) {
        const proxy = await group.track(startNginx(bin, upstreams, { method, buffering: false }));
        contenders.push({ name: `nginx ${method}`, url: proxy.url });
      }
    });
    const nginxSkipped = reference.skipped;
    return { engines, runners, contenders, nginxSkipped };
  });
}

/** One sluice gateway of a {@link CacheFleet}: its name (a contender's, numbered from the second on) and placer. */
export interface FleetGateway {
  readonly name: string;
  readonly placer: string;
}

/** How to start a {@link CacheFleet}. */
export interface CacheFleetOptions extends FleetBase {
  readonly engines: number;
  readonly slots: number;
  readonly model: string;
  readonly gateways: readonly FleetGateway[];
  /** Whether to put nginx round-robin in front of the engines too. */
  readonly nginx: boolean;
  /** Longest wait for every gateway to hear every runner's cache feed, ms. @default 30000 */
  readonly joinTimeoutMs?: number;
}

/** What {@link startCacheFleet} started. */
export interface CacheFleet {
  readonly engines: readonly ChildService[];
  readonly runners: readonly ChildService[];
  /** Gateway URL by gateway name. */
  readonly gateways: ReadonlyMap<string, string>;
  /** nginx round-robin's URL, when it started. */
  readonly nginx: string | undefined;
  readonly nginxSkipped: string | undefined;
  /** The cache-truth panel of gateway `name`. */
  cacheTruth(name: string): Promise<CacheTruthPanel | undefined>;
  stop(): Promise<void>;
}

/**
 * A fleet on cache truth, as `sluice up` wires it: every engine publishes its KV-cache events on
 * an ipc socket of its own, its runner subscribes (`--engine-kv-events`) and registers with every
 * gateway with a runner token of this run's, so each gateway gets every engine's cache feed.
 * Resolves once every gateway hears every runner's feed; on failure stops what did start.
 */
export async function startCacheFleet(options: CacheFleetOptions): Promise<CacheFleet> {
  const sockets = await kvEventSockets('sluice-bench-kv-');
  const removeSockets = () => sockets.remove();
  try {
    const fleet = await startGroup(options, async (started) => {
      const { env: base, level, group } = started;
      const env: NodeJS.ProcessEnv = {
        ...base,
        PYTHONHASHSEED: KV_HASH_SEED,
        SLUICE_RUNNER_TOKEN: randomBytes(24).toString('base64url'),
      };
      const kvEvents = (i: number) => sockets.endpoint(`engine-${i + 1}`);
      const engineFlags = ['--profile', 'h100-8b', '--model', options.model, ...level];
      const engines = await startAll(
        started,
        Array.from({ length: options.engines }, (_, i) =>
          simEngineArgs({ id: `h100-${i + 1}`, kvEvents: kvEvents(i) }, engineFlags),
        ),
        env,
      );
      const gatewayFlags = ['--port', '0', '--runner-networks', '127.0.0.0/8', ...level];
      const idOf = (g: FleetGateway) => `bench-${g.name.replaceAll(' ', '-')}`;
      const gateways = await startAll(
        started,
        options.gateways.map((g) => ['gateway', '--placer', g.placer, '--gateway-id', idOf(g), ...gatewayFlags]),
        env,
      );
      const gatewayList = gateways.map((g) => g.url).join(',');
      const runnerFlags = ['--slots', String(options.slots), ...level];
      const runners = await startAll(
        started,
        engines.map((engine, i) =>
          runnerArgs(
            { engine: engine.url, id: `runner-${i + 1}`, gateway: gatewayList, kvEvents: kvEvents(i) },
            runnerFlags,
          ),
        ),
        env,
      );
      const token = env.SLUICE_OPERATOR_TOKEN;
      await Promise.all(gateways.map((g) => fedBy(g.url, options.engines, token, options.joinTimeoutMs ?? 30_000)));
      const reference = await referenceNginx(options.nginx, options.env.PATH, async (bin) => {
        const upstreams = engines.map((e) => new URL(e.url));
        return (await group.track(startNginx(bin, upstreams, { method: 'round-robin', buffering: false }))).url;
      });
      const named = new Map(options.gateways.map((g, i) => [g.name, gateways[i]!.url] as const));
      const cacheTruth = (name: string) => cacheTruthOf(named.get(name) ?? '', token);
      return {
        engines,
        runners,
        gateways: named,
        nginx: reference.started,
        nginxSkipped: reference.skipped,
        cacheTruth,
      };
    });
    return {
      ...fleet,
      stop: async () => {
        await fleet.stop();
        await removeSockets();
      },
    };
  } catch (error) {
    await removeSockets();
    throw error;
  }
}

/** What a gateway's `/v1/stats` says of cache truth: the runners whose feed it hears, and the blocks it indexes. */
export interface CacheTruthPanel {
  readonly runners: readonly { readonly runner: string }[];
  readonly blocks: number;
}

/** The cache-truth panel of the gateway at `url`, read with the operator `token`; undefined when it does not answer. */
export async function cacheTruthOf(url: string, token: string | undefined): Promise<CacheTruthPanel | undefined> {
  const headers: Record<string, string> = token === undefined ? {} : { authorization: `Bearer ${token}` };
  const res = await fetch(new URL('/v1/stats', url), { headers }).catch(() => undefined);
  if (!res?.ok) {
    await res?.body?.cancel();
    return undefined;
  }
  return ((await res.json()) as { cacheTruth?: CacheTruthPanel }).cacheTruth;
}

/**
 * Resolves once the gateway at `url` has heard the cache feed of `runners` runners.
 * @throws {Error} naming how many it heard when they do not all report within `timeoutMs`.
 */
export async function fedBy(url: string, runners: number, token: string | undefined, timeoutMs: number): Promise<void> {
  const until = performance.now() + timeoutMs;
  let heard = 0;
  while (performance.now() < until) {
    heard = (await cacheTruthOf(url, token))?.runners.length ?? 0;
    if (heard >= runners) return;
    await delay(50);
  }
  throw new Error(`gateway ${url} heard the cache feed of ${heard} of ${runners} runners within ${timeoutMs} ms`);
}

/** The sum over engines of their prefix-cache counters, in tokens (vLLM's `prefix_cache_queries` and `_hits`). */
export async function prefixCacheTotals(engines: readonly ChildService[]): Promise<{ queries: number; hits: number }> {
  let queries = 0;
  let hits = 0;
  for (const engine of engines) {
    const text = await (await fetch(new URL('/metrics', engine.url))).text();
    queries += counter(text, 'vllm:prefix_cache_queries_total');
    hits += counter(text, 'vllm:prefix_cache_hits_total');
  }
  return { queries, hits };
}

/** The sum of every sample of `name` in a Prometheus text page. */
export function counter(text: string, name: string): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(name)) continue;
    const rest = line.slice(name.length);
    if (rest[0] !== '{' && rest[0] !== ' ') continue;
    const value = Number(line.slice(line.lastIndexOf(' ') + 1));
    if (Number.isFinite(value)) sum += value;
  }
  return sum;
}
