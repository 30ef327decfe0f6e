/**
 * Each line of a batch reaches an engine exactly once: a gateway in this process over two real
 * runners of two slots each, in front of engines that record every call's headers. The lines
 * outnumber the slots many times over, so they are released as slots free, and none may arrive
 * twice.
 */
import type { IncomingHttpHeaders } from 'node:http';
import OpenAI, { toFile } from 'openai';
import { describe, expect, it } from 'vitest';
import { createGateway } from '../../../gateway/server.ts';
import { createRunner } from '../../../runner/server.ts';
import { batchEnded } from '../../support/batches.ts';
import { eventually } from '../../support/fleet.ts';
import { recordingEngine, serversForEach } from '../../support/servers.ts';

const { cleanups, listen } = serversForEach();
const LINES = 60;

async function runnerOver(seen: IncomingHttpHeaders[]): Promise<string> {
  const answer = { status: 200, body: { object: 'chat.completion', choices: [] } };
  const runner = createRunner({ engine: await listen(recordingEngine(seen, answer)), slots: 2 });
  const { url } = await runner.listen();
  cleanups.push(() => runner.close({ drainTimeout: 0 }));
  return url;
}

describe('a batch on real runners', () => {
  it('sends every line to an engine once, named by its batch and custom id', async () => {
    const seen: IncomingHttpHeaders[][] = [[], []];
    const gateway = createGateway({ runners: [await runnerOver(seen[0]!), await runnerOver(seen[1]!)] });
    const { url } = await gateway.listen();
    cleanups.push(() => gateway.close());
    await eventually(() => gateway.pool.models().includes('sim-small'), 10_000, 'the runners to report their model');
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'sk-open', maxRetries: 0 });
    const text = Array.from({ length: LINES }, (_, i) =>
      JSON.stringify({ custom_id: `c${i}`, method: 'POST', url: '/v1/chat/completions', body: { model: 'sim-small' } }),
    ).join('\n');
    const file = await client.files.create({ file: await toFile(Buffer.from(text), 'in.jsonl'), purpose: 'batch' });
    const created = await client.batches.create({
      input_file_id: file.id,
      endpoint: '/v1/chat/completions',
      completion_window: '24h',
    });
    const batch = await batchEnded(client, created.id);
    expect(batch.request_counts).toEqual({ total: LINES, completed: LINES, failed: 0 });
    const ids = seen.flat().map((headers) => String(headers['x-request-id']));
    expect(ids.sort()).toEqual(Array.from({ length: LINES }, (_, i) => `${created.id}:c${i}`).sort());
    // Both runners took lines: the window filled the fleet, not one runner.
    expect(seen.map((calls) => calls.length > 0)).toEqual([true, true]);
  });
});
