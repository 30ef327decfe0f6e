/**
 * Files and batches on a Redis store shared by two gateways (each in this process, in front of
 * its own runner and simulated engine), through the OpenAI SDK: a batch created on one is
 * polled, read and listed on the other, and a cancel sent to the other stops it on every gateway that
 * runs it.
 */
import { randomUUID } from 'node:crypto';
import OpenAI, { toFile } from 'openai';
import { describe, expect, it } from 'vitest';
import { createRedisBatchStore, createRedisStore } from '../../../gateway/store/index.ts';
import type { SimEngineOptions } from '../../../runner/engines/sim/options.ts';
import { batchEnded, fileLines } from '../../support/batches.ts';
import { eventually } from '../../support/fleet.ts';
import { keyRingOf, startKeyedGateway } from '../../support/keyed-gateway.ts';
import { redisForSuite } from '../../support/redis-suite.ts';
import { serversForEach } from '../../support/servers.ts';

const server = redisForSuite();
const { cleanups } = serversForEach();

const ALICE = 'sk-alice-0123456789abcdef0123';

/** A gateway on the suite's Redis under `keyPrefix`, its detached calls and its batches both there. */
async function gateway(keyPrefix: string, engine: Partial<SimEngineOptions> = {}): Promise<OpenAI> {
  const options = { url: server.url, keyPrefix };
  const { url } = await startKeyedGateway(
    cleanups,
    {
      clientKeys: keyRingOf([{ name: 'alice', token: ALICE }]),
      requireKeys: true,
      // Each its own id, as gateways sharing a store have: they share the work of each batch.
      gatewayId: `gw-${randomUUID().slice(0, 8)}`,
      store: createRedisStore(options),
      batch: { store: createRedisBatchStore(options) },
    },
    engine,
  );
  return new OpenAI({ baseURL: `${url}/v1`, apiKey: ALICE, maxRetries: 0 });
}

async function batchOf(client: OpenAI, lines: number): Promise<OpenAI.Batch> {
  const body = (i: number) => ({ model: 'sim-small', messages: [{ role: 'user', content: `line ${i}` }] });
  const text = Array.from({ length: lines }, (_, i) =>
    JSON.stringify({ custom_id: `c${i}`, method: 'POST', url: '/v1/chat/completions', body: body(i) }),
  ).join('\n');
  const file = await client.files.create({ file: await toFile(Buffer.from(text), 'in.jsonl'), purpose: 'batch' });
  return client.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
}

describe('files and batches on a Redis store shared by two gateways', () => {
  it('answers for a batch on the gateway that did not create it: status, files and lists', async () => {
    const keyPrefix = `t-${randomUUID()}:`;
    const [one, two] = [await gateway(keyPrefix), await gateway(keyPrefix)];
    const created = await batchOf(one, 5);
    const batch = await batchEnded(two, created.id);
    expect(batch.status).toBe('completed');
    expect(batch.request_counts).toEqual({ total: 5, completed: 5, failed: 0 });
    const output = await fileLines(two, batch.output_file_id!);
    expect(output.map((line) => line.custom_id).sort()).toEqual(['c0', 'c1', 'c2', 'c3', 'c4']);
    expect((await two.batches.list()).data.map((b) => b.id)).toEqual([created.id]);
    expect((await two.files.list()).data.map((f) => f.id)).toContain(created.input_file_id);
  });

  it('stops a batch on the gateway that runs it when another gateway cancels it', async () => {
    const keyPrefix = `t-${randomUUID()}:`;
    const one = await gateway(keyPrefix, { ttftMs: 0, itlMs: 40, maxNumSeqs: 1 });
    const two = await gateway(keyPrefix);
    const created = await batchOf(one, 30);
    await eventually(
      async () => ((await two.batches.retrieve(created.id)).request_counts?.completed ?? 0) >= 1,
      10_000,
      'a first line to complete',
    );
    expect((await two.batches.cancel(created.id)).status).toBe('cancelling');
    const batch = await batchEnded(two, created.id);
    expect(batch.status).toBe('cancelled');
    expect(batch.request_counts!.completed).toBeLessThan(30);
  });
});
