/**
 * What the batch specs do through the OpenAI SDK: wait for a batch to end, within a bound, and
 * read a JSONL file's lines.
 */
import type OpenAI from 'openai';
import { eventually } from './fleet.ts';

/** The statuses a batch never leaves. */
const FINAL = ['completed', 'failed', 'expired', 'cancelled'];

/** Polls the batch until it is final (within 20 s) and resolves with it. */
export async function batchEnded(client: OpenAI, id: string): Promise<OpenAI.Batch> {
  let batch = await client.batches.retrieve(id);
  await eventually(
    async () => {
      batch = await client.batches.retrieve(id);
      return FINAL.includes(batch.status);
    },
    20_000,
    `batch ${id} to end`,
  );
  return batch;
}

/** The lines of a file's content, each parsed. */
export async function fileLines(client: OpenAI, id: string): Promise<any[]> {
  const text = await (await client.files.content(id)).text();
  return text
    .split('\n')
    .filter((line) => line !== '')
    .map((line) => JSON.parse(line));
}
