/**
 * Fault: what a client sends a batch gateway that it must refuse or bound. Real processes: a sim
 * engine writing its call log, a runner, a gateway reading a keys file, with a small file bound.
 *
 * What must hold: a file larger than the bound gets 413 BATCH_FILE_TOO_LARGE naming the bound; a
 * line that is not JSON gets 400 at upload naming its line; a JSON line that is no request fails
 * the batch at validation with the line's problem, running nothing; a batch over its key's
 * requests per minute completes as the window allows, each line run once; and a batch of a key
 * with concurrentCalls leaves it room for an interactive call while it runs.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI, { APIError, toFile } from 'openai';
import { afterAll, describe, expect, it } from 'vitest';
import { batchEnded, fileLines } from '../support/batches.ts';
import { eventually } from '../support/fleet.ts';
import { keyedFleetForSuite } from '../support/keyed-fleet.ts';
import { countRequestRuns } from '../../runner/index.ts';
import { chatLines, createBatch } from './batch-fleet.ts';

const MAX_FILE_BYTES = 4000;
const RATED = 'sk-rated-0123456789abcdef0123';
const NARROW = 'sk-narrow-0123456789abcdef012';

const dir = mkdtempSync(join(tmpdir(), 'sluice-batch-input-'));
const callLog = join(dir, 'calls.log');
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const suite = keyedFleetForSuite(
  [
    { name: 'rated', token: RATED, limits: { requestsPerMinute: 4 } },
    { name: 'narrow', token: NARROW, limits: { concurrentCalls: 2 } },
  ],
  {
    nodes: 1,
    engineArgs: ['--ttft-ms', '0', '--itl-ms', '20', '--max-num-seqs', '8', '--call-log', callLog],
    runnerArgs: ['--slots', '4'],
    gatewayArgs: ['--batch-max-file-bytes', String(MAX_FILE_BYTES), '--key-limit-window', '2s'],
  },
);

const client = (token: string) => new OpenAI({ baseURL: `${suite.gw}/v1`, apiKey: token, maxRetries: 0 });

/** The refusal `work` ends with. */
async function refusal(work: Promise<unknown>): Promise<APIError> {
  const error = await work.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(APIError);
  return error as APIError;
}

/** Runs of each request id on the engine. */
const runs = () => countRequestRuns([readFileSync(callLog, 'utf8')]);

describe('batch input and key limits', () => {
  it('refuses a file larger than the bound with 413 naming it', async () => {
    const big = Buffer.alloc(MAX_FILE_BYTES + 1, 'x');
    const error = await refusal(client(RATED).files.create({ file: await toFile(big, 'big.jsonl'), purpose: 'batch' }));
    expect(error.status).toBe(413);
    expect(error.code).toBe('BATCH_FILE_TOO_LARGE');
    expect(error.message).toContain(String(MAX_FILE_BYTES));
  });

  it('refuses a line that is not JSON at upload, naming the line', async () => {
    const text = Buffer.from(`${chatLines(1).toString()}\n{"custom_id": "c1", oops\n`);
    const error = await refusal(
      client(RATED).files.create({ file: await toFile(text, 'bad.jsonl'), purpose: 'batch' }),
    );
    expect(error.status).toBe(400);
    expect(error.code).toBe('BATCH_INVALID_FILE');
    expect(error.message).toContain('line 2');
  });

  it('fails a batch whose line is no request at validation, with the line named, running nothing', async () => {
    const text = Buffer.from(
      `${chatLines(1).toString()}\n{"custom_id":"c1","method":"POST","url":"/v1/nowhere","body":{}}\n`,
    );
    const created = await createBatch(client(RATED), text);
    const batch = await batchEnded(client(RATED), created.id);
    expect(batch.status).toBe('failed');
    expect(batch.errors?.data?.some((e) => e.line === 2 && e.param === 'url')).toBe(true);
    expect([...runs().keys()].filter((id) => id.startsWith(created.id))).toEqual([]);
  });

  it("completes a batch over its key's requests per minute as the window allows, each line run once", async () => {
    const lines = 10;
    const created = await createBatch(client(RATED), chatLines(lines, 2));
    const batch = await batchEnded(client(RATED), created.id);
    expect(batch.status).toBe('completed');
    expect(batch.request_counts).toEqual({ total: lines, completed: lines, failed: 0 });
    const output = await fileLines(client(RATED), batch.output_file_id!);
    const ran = runs();
    for (const line of output) expect(ran.get(`${created.id}:${line.custom_id}`)).toBe(1);
  });

  it('leaves a key with concurrentCalls room for an interactive call while its batch runs', async () => {
    const narrow = client(NARROW);
    const created = await createBatch(narrow, chatLines(8, 20));
    await eventually(
      async () => (await narrow.batches.retrieve(created.id)).status === 'in_progress',
      10_000,
      'the batch to run',
    );
    const answer = await narrow.chat.completions.create({
      model: 'sim-small',
      messages: [{ role: 'user', content: 'now' }],
      max_tokens: 2,
    });
    expect(answer.choices).toHaveLength(1);
    expect((await batchEnded(narrow, created.id)).request_counts).toEqual({ total: 8, completed: 8, failed: 0 });
  });
});
