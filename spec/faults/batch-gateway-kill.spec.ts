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
import { describe, expect, it } from 'vitest';
import { SHORT_LEASES, batchFleetForSuite, batchUnderWay, completedOnce, expectRanOnce } from './batch-fleet.ts';

const LINES = 60;

const suite = batchFleetForSuite({ redis: true, gatewayArgs: SHORT_LEASES }, ['gw-one', 'gw-two']);

describe('a gateway killed mid-batch, with Redis', () => {
  it('leaves the batch to the other gateway, which finishes it with every line run at most once', async () => {
    const fleet = suite.fleet();
    const one = suite.gateway('gw-one');
    const id = await batchUnderWay(fleet.client(one), LINES, 5);
    await one.stop('SIGKILL');

    const other = fleet.client(suite.gateway('gw-two'));
    // Work was left when the gateway died: the other gateway finished it.
    const atKill = (await other.batches.retrieve(id)).request_counts!;
    expect(atKill.completed + atKill.failed).toBeLessThan(LINES);
    const { batch, output, errors } = await completedOnce(other, id, LINES);
    expect(batch.request_counts).toEqual({ total: LINES, completed: output.length, failed: errors.length });
    // Only a line in flight on the dead gateway may fail, and only as interrupted: at most its slots' worth.
    expect(errors.map((line) => line.error?.code)).toEqual(errors.map(() => 'line_interrupted'));
    expect(errors.length).toBeLessThanOrEqual(4);
    expectRanOnce(fleet, id, output);
  });

  it('resumes a batch when the lone gateway running it stops and starts again', async () => {
    const fleet = suite.fleet();
    const two = suite.gateway('gw-two');
    const id = await batchUnderWay(fleet.client(two), LINES, 5);
    await two.stop('SIGTERM');
    const again = await fleet.gateway('gw-two-again');
    const { output } = await completedOnce(fleet.client(again), id, LINES);
    expectRanOnce(fleet, id, output);
  });
});
