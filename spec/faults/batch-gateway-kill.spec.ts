/**
 * Fault: a gateway is killed (SIGKILL) while it runs a batch, with two gateways sharing a Redis
 * store. Real processes: a redis-server, a sim engine writing its call log, a runner, two
 * gateways over that runner with a short chunk lease.
 *
 * What must hold: the other gateway takes over the dead one's chunks once their lease expires
 * and finishes the batch; every custom_id is in the output or the error file exactly once; no
 * line ran twice on the engine (its call log, per `<batch id>:<custom_id>`); a line the dead
 * gateway had in flight is either answered (its result was written) or listed
 * `line_interrupted`, never run again; and the lines that completed ran exactly once. A lone
 * gateway stopped (SIGTERM) mid-batch and started again resumes the batch likewise.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ChildService } from '../../placer/kernel/processes.ts';
import { batchEnded, fileLines } from '../support/batches.ts';
import { chatLines, createBatch, startBatchFleet, untilCompleted } from './batch-fleet.ts';
import type { BatchFleet } from './batch-fleet.ts';

const LINES = 60;

let fleet: BatchFleet;
let one: ChildService;
let two: ChildService;

beforeAll(async () => {
  fleet = await startBatchFleet({
    redis: true,
    // 8 tokens at 10 ms: a line takes about 80 ms, the batch a few seconds on two slots.
    engineArgs: ['--ttft-ms', '0', '--itl-ms', '10', '--max-num-seqs', '4'],
    runnerArgs: ['--slots', '2'],
    gatewayArgs: ['--batch-lease-ttl', '1s', '--batch-chunk-lines', '5'],
  });
  one = await fleet.gateway('gw-one');
  two = await fleet.gateway('gw-two');
}, 60_000);

afterAll(() => fleet?.stop());

describe('a gateway killed mid-batch, with Redis', () => {
  it('leaves the batch to the other gateway, which finishes it with every line run at most once', async () => {
    const client = fleet.client(one);
    const created = await createBatch(client, chatLines(LINES));
    await untilCompleted(client, created.id, 5);
    await one.stop('SIGKILL');

    const other = fleet.client(two);
    // Work was left when the gateway died: the other gateway finished it.
    const atKill = (await other.batches.retrieve(created.id)).request_counts!;
    expect(atKill.completed + atKill.failed).toBeLessThan(LINES);
    const batch = await batchEnded(other, created.id);
    expect(batch.status).toBe('completed');
    const output = batch.output_file_id ? await fileLines(other, batch.output_file_id) : [];
    const errors = batch.error_file_id ? await fileLines(other, batch.error_file_id) : [];
    const ids = [...output, ...errors].map((line) => line.custom_id).sort();
    expect(ids).toEqual(Array.from({ length: LINES }, (_, i) => `c${i}`).sort());
    expect(batch.request_counts).toEqual({ total: LINES, completed: output.length, failed: errors.length });
    // Only a line in flight on the dead gateway may fail, and only as interrupted: at most its slots' worth.
    expect(errors.map((line) => line.error?.code)).toEqual(errors.map(() => 'line_interrupted'));
    expect(errors.length).toBeLessThanOrEqual(4);

    const runs = fleet.runs();
    const ranTwice = [...runs].filter(([, n]) => n > 1);
    expect(ranTwice).toEqual([]);
    for (const line of output) expect(runs.get(`${created.id}:${line.custom_id}`)).toBe(1);
  });

  it('resumes a batch when the lone gateway running it stops and starts again', async () => {
    const client = fleet.client(two);
    const created = await createBatch(client, chatLines(LINES));
    await untilCompleted(client, created.id, 5);
    await two.stop('SIGTERM');
    const again = await fleet.gateway('gw-two-again');
    const other = fleet.client(again);
    const batch = await batchEnded(other, created.id);
    expect(batch.status).toBe('completed');
    const output = batch.output_file_id ? await fileLines(other, batch.output_file_id) : [];
    const errors = batch.error_file_id ? await fileLines(other, batch.error_file_id) : [];
    expect([...output, ...errors].map((line) => line.custom_id).sort()).toEqual(
      Array.from({ length: LINES }, (_, i) => `c${i}`).sort(),
    );
    expect([...fleet.runs()].filter(([, n]) => n > 1)).toEqual([]);
  });
});
