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
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ChildService } from '../../placer/kernel/processes.ts';
import { batchEnded, fileLines } from '../support/batches.ts';
import { eventually } from '../support/fleet.ts';
import { startRedis } from '../support/redis.ts';
import { chatLines, createBatch, startBatchFleet, untilCompleted } from './batch-fleet.ts';
import type { BatchFleet } from './batch-fleet.ts';

const LINES = 40;
/** How long Redis stays stopped: past the command timeout and the chunk lease, so both run out. */
const STALL_MS = 4000;

let fleet: BatchFleet;
let gateway: ChildService;

beforeAll(async () => {
  fleet = await startBatchFleet({
    redis: true,
    engineArgs: ['--ttft-ms', '0', '--itl-ms', '10', '--max-num-seqs', '4'],
    runnerArgs: ['--slots', '2'],
    gatewayArgs: ['--batch-lease-ttl', '1s', '--batch-chunk-lines', '5', '--redis-command-timeout', '3s'],
  });
  gateway = await fleet.gateway('gw-redis-outage');
}, 60_000);

afterAll(() => fleet?.stop());

/** The batch's lines each way once it ended, with every custom_id once between them. */
async function linesOnce(id: string): Promise<{ output: any[]; errors: any[] }> {
  const client = fleet.client(gateway);
  const batch = await batchEnded(client, id);
  expect(batch.status).toBe('completed');
  const output = batch.output_file_id ? await fileLines(client, batch.output_file_id) : [];
  const errors = batch.error_file_id ? await fileLines(client, batch.error_file_id) : [];
  const ids = [...output, ...errors].map((line) => line.custom_id).sort();
  expect(ids).toEqual(Array.from({ length: LINES }, (_, i) => `c${i}`).sort());
  return { output, errors };
}

describe('Redis stalled or restarted mid-batch', () => {
  it('finishes a batch across a stall, each line once, none run twice', async () => {
    const client = fleet.client(gateway);
    const created = await createBatch(client, chatLines(LINES));
    await untilCompleted(client, created.id, 5);
    const pid = fleet.redis!.pid;
    process.kill(pid, 'SIGSTOP');
    const stalled = Date.now();
    await eventually(() => Date.now() - stalled >= STALL_MS, STALL_MS * 4, 'the stall to last');
    process.kill(pid, 'SIGCONT');

    const { output } = await linesOnce(created.id);
    const runs = fleet.runs();
    expect([...runs].filter(([, n]) => n > 1)).toEqual([]);
    for (const line of output) expect(runs.get(`${created.id}:${line.custom_id}`)).toBe(1);
  });

  it('answers 404 for a batch Redis lost in a restart, runs none of its lines twice, and takes a new batch', async () => {
    const client = fleet.client(gateway);
    const lost = await createBatch(client, chatLines(LINES));
    await untilCompleted(client, lost.id, 3);
    const { port } = fleet.redis!;
    process.kill(fleet.redis!.pid, 'SIGKILL');
    const again = await startRedis({ port });
    try {
      await eventually(
        async () => {
          const error = await client.batches.retrieve(lost.id).then(
            () => undefined,
            (e: unknown) => e,
          );
          return error instanceof APIError && error.status === 404;
        },
        20_000,
        'the lost batch to answer 404',
      );
      const next = await createBatch(client, chatLines(LINES));
      await linesOnce(next.id);
      expect([...fleet.runs()].filter(([, n]) => n > 1)).toEqual([]);
    } finally {
      await again.stop();
    }
  });
});
