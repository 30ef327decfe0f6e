/**
 * The fleet the placement scenario measures, all real child processes on 127.0.0.1: simulated
 * engines on the H100 profile, a runner in front of each, one sluice gateway per placer in front
 * of all the runners, and, when nginx is installed, nginx in front of the same engines once with
 * round-robin and once with least_conn: what a team would put there instead of sluice.
 */
import { runnerArgs, simEngineArgs, startService } from '../../placer/index.ts';
import type { ChildService } from '../../placer/index.ts';
import { referenceNginx, startNginx } from './nginx.ts';
import { startGroup } from './stack.ts';

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
export interface PlacementFleetOptions {
  readonly env: NodeJS.ProcessEnv;
  readonly logLevel: string;
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
  return startGroup(options, async ({ env, level, group }) => {
    const ids = Array.from({ length: options.engines }, (_, i) => i + 1);
    const engineFlags = ['--profile', 'h100-8b', '--model', options.model, ...level];
    const engines = await Promise.all(
      ids.map((i) => group.track(startService(simEngineArgs({ id: `h100-${i}` }, engineFlags), { env }))),
    );
    const runnerFlags = ['--slots', String(options.slots), ...level];
    const runners = await Promise.all(
      engines.map((engine, i) =>
        group.track(startService(runnerArgs({ engine: engine.url, id: `runner-${i + 1}` }, runnerFlags), { env })),
      ),
    );
    const runnerList = runners.map((r) => r.url).join(',');
    const gateways = await Promise.all(
      options.placers.map((placer) =>
        group.track(
          startService(
            [
              'gateway',
              '--port',
              '0',
              '--runners',
              runnerList,
              '--placer',
              placer,
              '--gateway-id',
              `bench-${placer}`,
              ...level,
            ],
            { env },
          ),
        ),
      ),
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
