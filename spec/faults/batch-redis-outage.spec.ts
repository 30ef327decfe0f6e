/**
 * Fault: the Redis holding a batch stalls (SIGSTOP, then SIGCONT) or restarts (SIGKILL, started
 * again on its port, its data gone: the spec's redis-server keeps nothing on disk) while the
 * batch runs. Real processes: a redis-server, a sim engine writing its call log, a runner, one
 * gateway on that Redis.
 *
 * What must hold: across a stall the batch completes with every custom_id once, the results of
 * lines that ended during the stall written when Redis answers again, none run twice; across a
 * restart the batch is gone (404, said plainly), the gateway stops running it, runs nothing twice,
 * and takes a new batch.
 */
import { APIError } from 'openai';
import { describe, it } from 'vitest';
import { eventually } from '../support/fleet.ts';
import { startRedis } from '../support/redis.ts';
import {
  SHORT_LEASES,
  batchFleetForSuite,
  batchUnderWay,
  chatLines,
  completedOnce,
  createBatch,
  expectRanOnce,
} from './batch-fleet.ts';

const LINES = 40;
/** How long Redis stays stopped: past the command timeout and the chunk lease, so both run out. */
const STALL_MS = 4000;

const suite = batchFleetForSuite({ redis: true, gatewayArgs: [...SHORT_LEASES, '--redis-command-timeout', '3s'] }, [
  'gw-redis-outage',
]);

describe('Redis stalled or restarted mid-batch', () => {
  it('finishes a batch across a stall, each line once, none run twice', async () => {
    const fleet = suite.fleet();
    const client = fleet.client(suite.gateway('gw-redis-outage'));
    const id = await batchUnderWay(client, LINES, 5);
    const pid = fleet.redis!.pid;
    process.kill(pid, 'SIGSTOP');
    const stalled = Date.now();
    await eventually(() => Date.now() - stalled >= STALL_MS, STALL_MS * 4, 'the stall to last');
    process.kill(pid, 'SIGCONT');

    const { output } = await completedOnce(client, id, LINES);
    expectRanOnce(fleet, id, output);
  });

  it('answers 404 for a batch Redis lost in a restart, runs none of its lines twice, and takes a new batch', async () => {
    const fleet = suite.fleet();
    const client = fleet.client(suite.gateway('gw-redis-outage'));
    const lost = await batchUnderWay(client, LINES, 3);
    const { port } = fleet.redis!;
    process.kill(fleet.redis!.pid, 'SIGKILL');
    const again = await startRedis({ port });
    try {
      await eventually(
        async () => {
          const error = await client.batches.retrieve(lost).then(
            () => undefined,
            (e: unknown) => e,
          );
          return error instanceof APIError && error.status === 404;
        },
        20_000,
        'the lost batch to answer 404',
      );
      const next = await createBatch(client, chatLines(LINES));
      const { output } = await completedOnce(client, next.id, LINES);
      expectRanOnce(fleet, next.id, output);
    } finally {
      await again.stop();
    }
  });
});
