/**
 * The fleet the detached-store fault specs run on: a real redis-server, and one node (a sim
 * engine making 100 tokens a second, a runner with one slot) behind a gateway that keeps its
 * detached calls in that Redis.
 */
import { request } from 'undici';
import { eventually, startFleet } from './fleet.ts';
import type { Fleet } from './fleet.ts';
import { startRedis } from './redis.ts';
import type { RedisServer } from './redis.ts';

/** The engine makes 100 tokens a second; with ignore_eos a call's length is set by its max_tokens. */
const ITL_MS = 10;

/** A running store fleet. */
export interface StoreFleet {
  readonly redis: RedisServer;
  readonly fleet: Fleet;
  /** The gateway's URL. */
  readonly gw: string;
}

/**
 * Starts Redis and the fleet, the gateway named `gatewayId` with `--detached-placer-timeout
 * placerTimeout` and `gatewayArgs` besides, and waits until the gateway's /readyz answers 200.
 * The caller stops the fleet and then Redis (a spec may restart Redis on the same port on the way).
 */
export async function startStoreFleet(
  gatewayId: string,
  placerTimeout: string,
  gatewayArgs: readonly string[] = [],
): Promise<StoreFleet> {
  const redis = await startRedis();
  let fleet: Fleet | undefined;
  try {
    fleet = await startFleet({
      nodes: 1,
      engineArgs: ['--ttft-ms', '0', '--itl-ms', String(ITL_MS), '--max-num-seqs', '4'],
      runnerArgs: ['--slots', '1'],
      gatewayArgs: [
        '--store',
        redis.url,
        '--gateway-id',
        gatewayId,
        '--detached-placer-timeout',
        placerTimeout,
        ...gatewayArgs,
      ],
    });
    const gw = fleet.gateway.url;
    await eventually(async () => (await request(`${gw}/readyz`)).statusCode === 200, 15_000, 'the gateway to be ready');
    return { redis, fleet, gw };
  } catch (error) {
    await fleet?.stop();
    await redis.stop();
    throw error;
  }
}
