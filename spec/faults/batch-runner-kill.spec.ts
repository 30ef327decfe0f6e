/**
 * Fault: a runner is killed (SIGKILL) while a batch runs over two. Real processes: two sim
 * engines writing call logs, a runner in front of each, one gateway over both.
 *
 * What must hold: the batch completes on the runner left; every custom_id is in the output or
 * the error file exactly once; a line that was on the dead runner is in the error file with the
 * answer the gateway gave it (an engine failure is recorded, never run again); no line ran twice
 * on the engines (their call logs, per `<batch id>:<custom_id>`).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ChildService } from '../../placer/kernel/processes.ts';
import { batchEnded, fileLines } from '../support/batches.ts';
import { chatLines, createBatch, startBatchFleet, untilCompleted } from './batch-fleet.ts';
import type { BatchFleet } from './batch-fleet.ts';

const LINES = 40;

let fleet: BatchFleet;
let gateway: ChildService;

beforeAll(async () => {
  fleet = await startBatchFleet({
    nodes: 2,
    engineArgs: ['--ttft-ms', '0', '--itl-ms', '10', '--max-num-seqs', '4'],
    runnerArgs: ['--slots', '2'],
  });
  gateway = await fleet.gateway('gw-runner-kill');
}, 60_000);

afterAll(() => fleet?.stop());

describe('a runner killed mid-batch', () => {
  it('finishes the batch on the runner left, each line once, none run twice', async () => {
    const client = fleet.client(gateway);
    const created = await createBatch(client, chatLines(LINES));
    await untilCompleted(client, created.id, 5);
    await fleet.runners[0]!.stop('SIGKILL');

    const batch = await batchEnded(client, created.id);
    expect(batch.status).toBe('completed');
    const output = batch.output_file_id ? await fileLines(client, batch.output_file_id) : [];
    const errors = batch.error_file_id ? await fileLines(client, batch.error_file_id) : [];
    const ids = [...output, ...errors].map((line) => line.custom_id).sort();
    expect(ids).toEqual(Array.from({ length: LINES }, (_, i) => `c${i}`).sort());
    // At most the lines the dead runner held failed, each with the gateway's answer.
    expect(errors.length).toBeLessThanOrEqual(2);
    for (const line of errors) expect(line.response?.status_code ?? line.error?.code).toBeTruthy();
    expect(output.length).toBeGreaterThanOrEqual(LINES - 2);

    const runs = fleet.runs();
    expect([...runs].filter(([, n]) => n > 1)).toEqual([]);
    for (const line of output) expect(runs.get(`${created.id}:${line.custom_id}`)).toBe(1);
  });
});
