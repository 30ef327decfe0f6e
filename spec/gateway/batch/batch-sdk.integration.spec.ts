/**
 * The Files and Batch APIs through the official OpenAI SDK, against a real gateway in this
 * process in front of a real runner and the simulated engine on 127.0.0.1: upload, create,
 * poll until done, read the output and error files, cancel, list, and the refusals of a bad file.
 */
import OpenAI, { APIError, toFile } from 'openai';
import { describe, expect, it } from 'vitest';
import { createPrometheusMetrics } from '../../../gateway/observe/telemetry.ts';
import { batchEnded, fileLines } from '../../support/batches.ts';
import { eventually, getJson, metricValue } from '../../support/fleet.ts';
import { asKeyedOperator, keyRingOf, startKeyedGateway } from '../../support/keyed-gateway.ts';
import type { KeyedGateway } from '../../support/keyed-gateway.ts';
import { serversForEach } from '../../support/servers.ts';

const { cleanups } = serversForEach();

const ALICE = 'sk-alice-0123456789abcdef0123';
const BOB = 'sk-bob-0123456789abcdef012345';
const ring = () =>
  keyRingOf([
    { name: 'alice', token: ALICE },
    { name: 'bob', token: BOB },
  ]);

/** A JSONL line calling the chat route with `content`. */
function chatLine(customId: string, content: string, extra: Record<string, unknown> = {}): string {
  const body = { model: 'sim-small', messages: [{ role: 'user', content }], max_tokens: 4, ...extra };
  return JSON.stringify({ custom_id: customId, method: 'POST', url: '/v1/chat/completions', body });
}

function sdk(url: string, token: string): OpenAI {
  // No retries: a request sent twice would hide a refusal.
  return new OpenAI({ baseURL: `${url}/v1`, apiKey: token, maxRetries: 0 });
}

async function upload(client: OpenAI, lines: string[]): Promise<string> {
  const file = await client.files.create({
    file: await toFile(Buffer.from(`${lines.join('\n')}\n`), 'input.jsonl'),
    purpose: 'batch',
  });
  return file.id;
}

/** How a request the gateway refused was answered. */
async function refusal(pending: Promise<unknown>): Promise<{ status: number | undefined; code: unknown }> {
  const error = await pending.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(APIError);
  return { status: (error as APIError).status, code: (error as APIError).code };
}

async function start(options: Parameters<typeof startKeyedGateway>[1] = {}): Promise<KeyedGateway> {
  return startKeyedGateway(cleanups, { clientKeys: ring(), requireKeys: true, ...options });
}

describe('the Files and Batch APIs through the OpenAI SDK', () => {
  it('runs a batch to completed, with an output file and an error file in OpenAI JSONL', async () => {
    const { url } = await start();
    const alice = sdk(url, ALICE);
    const lines = [
      chatLine('one', 'hello'),
      chatLine('two', 'world'),
      chatLine('three', 'again'),
      // A model no runner serves: answered 404 by the gateway, a line of the error file.
      JSON.stringify({
        custom_id: 'bad-model',
        method: 'POST',
        url: '/v1/chat/completions',
        body: { model: 'no-such-model', messages: [] },
      }),
    ];
    const inputId = await upload(alice, lines);
    const file = await alice.files.retrieve(inputId);
    expect(file).toMatchObject({ id: inputId, object: 'file', purpose: 'batch', filename: 'input.jsonl' });
    expect(file.bytes).toBe(Buffer.byteLength(`${lines.join('\n')}\n`));
    const created = await alice.batches.create({
      input_file_id: inputId,
      endpoint: '/v1/chat/completions',
      completion_window: '24h',
      metadata: { job: 'spec' },
    });
    expect(created).toMatchObject({ object: 'batch', status: 'validating', metadata: { job: 'spec' } });
    const batch = await batchEnded(alice, created.id);
    expect(batch.status).toBe('completed');
    expect(batch.request_counts).toEqual({ total: 4, completed: 3, failed: 1 });
    expect(batch.completed_at).toBeTypeOf('number');
    const output = await fileLines(alice, batch.output_file_id!);
    expect(output.map((line) => line.custom_id).sort()).toEqual(['one', 'three', 'two']);
    for (const line of output) {
      expect(line.id).toMatch(/^batch_req_/);
      expect(line.error).toBeNull();
      expect(line.response.status_code).toBe(200);
      expect(line.response.request_id).toBe(`${created.id}:${line.custom_id}`);
      expect(line.response.body.choices[0].message.content).toBeTypeOf('string');
    }
    const errors = await fileLines(alice, batch.error_file_id!);
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatchObject({ custom_id: 'bad-model', response: { status_code: 404 }, error: null });
    expect(errors[0].response.body.error.code).toBe('GW_UNKNOWN_MODEL');
    const outputFile = await alice.files.retrieve(batch.output_file_id!);
    expect(outputFile.purpose).toBe('batch_output');
  });

  it('fails a batch whose lines do not hold, listing each problem by line, and runs none', async () => {
    const { url } = await start();
    const alice = sdk(url, ALICE);
    const inputId = await upload(alice, [
      chatLine('same', 'a'),
      chatLine('same', 'b'),
      JSON.stringify({ custom_id: 'get', method: 'GET', url: '/v1/chat/completions', body: {} }),
      JSON.stringify({ custom_id: 'url', method: 'POST', url: '/v1/embeddings', body: {} }),
      JSON.stringify({ custom_id: 'body', method: 'POST', url: '/v1/chat/completions', body: 'text' }),
    ]);
    const created = await alice.batches.create({
      input_file_id: inputId,
      endpoint: '/v1/chat/completions',
      completion_window: '24h',
    });
    const batch = await batchEnded(alice, created.id);
    expect(batch.status).toBe('failed');
    expect(batch.errors?.data?.map((e) => [e.code, e.line])).toEqual([
      ['duplicate_custom_id', 2],
      ['invalid_method', 3],
      ['mismatched_url', 4],
      ['invalid_body', 5],
    ]);
    expect(batch.request_counts).toEqual({ total: 0, completed: 0, failed: 0 });
    expect(batch.output_file_id).toBeNull();
  });

  it('refuses a file that is not JSONL, a purpose other than batch, and a file over the bound with 413', async () => {
    const { url } = await start({ batch: { maxFileBytes: 1024 } });
    const alice = sdk(url, ALICE);
    const uploaded = async (file: Buffer, purpose = 'batch') =>
      refusal(alice.files.create({ file: await toFile(file, 'x.jsonl'), purpose: purpose as 'batch' }));
    expect(await uploaded(Buffer.from('not json\n'))).toEqual({ status: 400, code: 'BATCH_INVALID_FILE' });
    expect(await uploaded(Buffer.from(`${chatLine('a', 'b')}\n`), 'fine-tune')).toEqual({
      status: 400,
      code: 'BATCH_INVALID_FILE',
    });
    expect(await uploaded(Buffer.alloc(4096, 'x'))).toEqual({ status: 413, code: 'BATCH_FILE_TOO_LARGE' });
    expect(
      await refusal(
        alice.batches.create({
          input_file_id: 'file-none',
          endpoint: '/v1/chat/completions',
          completion_window: '24h',
        }),
      ),
    ).toEqual({ status: 404, code: 'BATCH_FILE_NOT_FOUND' });
    const inputId = await upload(alice, [chatLine('a', 'b')]);
    expect(
      await refusal(
        alice.batches.create({
          input_file_id: inputId,
          endpoint: '/v1/responses' as '/v1/completions',
          completion_window: '24h',
        }),
      ),
    ).toEqual({ status: 400, code: 'BATCH_INVALID_REQUEST' });
  });

  it('keeps files and batches to their key: 404 to another key, all of them to an operator', async () => {
    const { url } = await start();
    const alice = sdk(url, ALICE);
    const bob = sdk(url, BOB);
    const inputId = await upload(alice, [chatLine('a', 'b')]);
    const created = await alice.batches.create({
      input_file_id: inputId,
      endpoint: '/v1/chat/completions',
      completion_window: '24h',
    });
    for (const attempt of [bob.files.retrieve(inputId), bob.batches.retrieve(created.id), bob.files.content(inputId)]) {
      const error = await attempt.then(
        () => undefined,
        (e: unknown) => e as APIError,
      );
      expect(error?.status).toBe(404);
    }
    expect((await bob.files.list()).data).toEqual([]);
    expect((await bob.batches.list()).data).toEqual([]);
    expect((await alice.batches.list()).data.map((b) => b.id)).toEqual([created.id]);
    const operator = await getJson(`${url}/v1/batches`, asKeyedOperator);
    expect(operator.json.data.map((b: { id: string }) => b.id)).toEqual([created.id]);
    await batchEnded(alice, created.id);
    await alice.files.delete(inputId);
    const gone = await alice.files.retrieve(inputId).catch((e: unknown) => e as APIError);
    expect(gone.status).toBe(404);
  });

  it('pages the batch list with after and limit, newest first', async () => {
    const { url } = await start();
    const alice = sdk(url, ALICE);
    const inputId = await upload(alice, [chatLine('a', 'b')]);
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      const batch = await alice.batches.create({
        input_file_id: inputId,
        endpoint: '/v1/chat/completions',
        completion_window: '24h',
      });
      ids.push(batch.id);
    }
    const first = await alice.batches.list({ limit: 2 });
    expect(first.data.map((b) => b.id)).toEqual([ids[2], ids[1]]);
    expect(first.has_more).toBe(true);
    const second = await alice.batches.list({ limit: 2, after: ids[1] });
    expect(second.data.map((b) => b.id)).toEqual([ids[0]]);
    expect(second.has_more).toBe(false);
  });

  it('cancels a running batch: no new line starts, the running ones finish, the rest never run', async () => {
    // A slow engine (one output token every 50 ms) with one slot, so lines run one at a time.
    const { url } = await startKeyedGateway(
      cleanups,
      { clientKeys: ring(), requireKeys: true },
      { ttftMs: 0, itlMs: 50, maxNumSeqs: 1 },
    );
    const alice = sdk(url, ALICE);
    const lines = Array.from({ length: 20 }, (_, i) => chatLine(`line-${i}`, `slow ${i}`));
    const inputId = await upload(alice, lines);
    const created = await alice.batches.create({
      input_file_id: inputId,
      endpoint: '/v1/chat/completions',
      completion_window: '24h',
    });
    await eventually(
      async () => ((await alice.batches.retrieve(created.id)).request_counts?.completed ?? 0) >= 1,
      10_000,
      'a first line to complete',
    );
    const cancelling = await alice.batches.cancel(created.id);
    expect(['cancelling', 'cancelled']).toContain(cancelling.status);
    const batch = await batchEnded(alice, created.id);
    expect(batch.status).toBe('cancelled');
    const done = batch.request_counts!.completed + batch.request_counts!.failed;
    expect(done).toBeLessThan(20);
    const output = await fileLines(alice, batch.output_file_id!);
    expect(output).toHaveLength(batch.request_counts!.completed);
    // Each line that ran is in the output once.
    expect(new Set(output.map((line) => line.custom_id)).size).toBe(output.length);
    expect(await refusal(alice.batches.cancel(created.id))).toEqual({ status: 409, code: 'BATCH_NOT_CANCELLABLE' });
  });

  it("runs a line refused by its key's rate limit again once the window has room, writing it once", async () => {
    const telemetry = createPrometheusMetrics();
    cleanups.push(() => telemetry.shutdown());
    const { url } = await startKeyedGateway(cleanups, {
      clientKeys: keyRingOf([{ name: 'alice', token: ALICE, limits: { requestsPerMinute: 2 } }]),
      requireKeys: true,
      // A one-second window stands for the minute.
      keyLimitWindow: 1000,
      meterProvider: telemetry.meterProvider,
    });
    const alice = sdk(url, ALICE);
    const inputId = await upload(
      alice,
      ['a', 'b', 'c', 'd'].map((id) => chatLine(id, id)),
    );
    const created = await alice.batches.create({
      input_file_id: inputId,
      endpoint: '/v1/chat/completions',
      completion_window: '24h',
    });
    const batch = await batchEnded(alice, created.id);
    expect(batch.request_counts).toEqual({ total: 4, completed: 4, failed: 0 });
    const output = await fileLines(alice, batch.output_file_id!);
    expect(output.map((line) => line.custom_id).sort()).toEqual(['a', 'b', 'c', 'd']);
    expect(metricValue(await telemetry.render(), 'sluice_batch_lines_total', { outcome: 'retried' })).toBeGreaterThan(
      0,
    );
  });

  it("refuses a file past its key's storedBytes with 503 BATCH_STORE_FULL, and takes it once another is deleted", async () => {
    const line = chatLine('a', 'x'.repeat(100));
    const { url } = await startKeyedGateway(cleanups, {
      clientKeys: keyRingOf([{ name: 'alice', token: ALICE, limits: { storedBytes: 300 } }]),
      requireKeys: true,
    });
    const alice = sdk(url, ALICE);
    const first = await upload(alice, [line]);
    const second = Buffer.from(`${line.replace('"a"', '"b"')}\n`);
    // Each fits alone; the two together pass the key's bound.
    expect(second.length * 2).toBeGreaterThan(300);
    const uploadSecond = async () => alice.files.create({ file: await toFile(second, 'x.jsonl'), purpose: 'batch' });
    expect(await refusal(uploadSecond())).toEqual({ status: 503, code: 'BATCH_STORE_FULL' });
    await alice.files.delete(first);
    expect((await uploadSecond()).bytes).toBe(second.length);
  });

  it('runs a batch on a gateway open to clients, for callers without a key', async () => {
    const { url } = await startKeyedGateway(cleanups, {});
    const open = sdk(url, 'sk-anything');
    const created = await open.batches.create({
      input_file_id: await upload(open, [chatLine('only', 'hi')]),
      endpoint: '/v1/chat/completions',
      completion_window: '24h',
    });
    expect((await batchEnded(open, created.id)).request_counts).toEqual({ total: 1, completed: 1, failed: 0 });
  });

  it('shows batches by status and lines in /v1/stats and /metrics', async () => {
    const telemetry = createPrometheusMetrics();
    cleanups.push(() => telemetry.shutdown());
    const { url } = await start({ meterProvider: telemetry.meterProvider, renderMetrics: () => telemetry.render() });
    const alice = sdk(url, ALICE);
    const inputId = await upload(alice, [chatLine('a', 'b'), chatLine('c', 'd')]);
    const created = await alice.batches.create({
      input_file_id: inputId,
      endpoint: '/v1/chat/completions',
      completion_window: '24h',
    });
    await batchEnded(alice, created.id);
    const stats = await getJson(`${url}/v1/stats`, asKeyedOperator);
    expect(stats.json.batches).toMatchObject({ batches: { completed: 1 }, linesWaiting: 0, linesInFlight: 0 });
    expect(stats.json.batches.linesPerSecond).toBeGreaterThan(0);
    const page = await telemetry.render();
    expect(metricValue(page, 'sluice_batch_batches', { status: 'completed' })).toBe(1);
    expect(metricValue(page, 'sluice_batch_lines_total', { outcome: 'completed' })).toBe(2);
    expect(metricValue(page, 'sluice_batch_lines_waiting')).toBe(0);
  });
});
