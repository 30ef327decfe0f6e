/**
 * Fault: a runner is killed (SIGKILL) while a batch runs over two. Real processes: two sim
 * engines writing call logs, a runner in front of each, one gateway over both.
 *
 * What must hold: the batch completes on the runner left; every custom_id is in the output or
 * the error file exactly once; a line that was on the dead runner is in the error file with the
 * answer the gateway gave it (an engine failure is recorded, never run again); no line ran twice
 * on the engines (their call logs, per `<batch id>:<custom_id>`).
 */
import { describe, expect, it } from 'vitest';
import { batchFleetForSuite, batchUnderWay, completedOnce, expectRanOnce } from './batch-fleet.ts';

const LINES = 40;

const suite = batchFleetForSuite({ nodes: 2 }, ['gw-runner-kill']);

describe('a runner killed mid-batch', () => {
  it('finishes the batch on the runner left, each line once, none run twice', async () => {
    const fleet = suite.fleet();
    const client = fleet.client(suite.gateway('gw-runner-kill'));
    const id = await batchUnderWay(client, LINES, 5);
    await fleet.runners[0]!.stop('SIGKILL');

    const { output, errors } = await completedOnce(client, id, LINES);
    // At most the lines the dead runner held failed, each with the gateway's answer.
    expect(errors.length).toBeLessThanOrEqual(2);
    for (const line of errors) expect(line.response?.status_code ?? line.error?.code).toBeTruthy();
    expect(output.length).toBeGreaterThanOrEqual(LINES - 2);
    expectRanOnce(fleet, id, output);
  });
});
