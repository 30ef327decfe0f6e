/**
 * The fleet the batch fault specs run on: simulated engines each writing a call log, a runner in
 * front of each, and gateways over those runners (on a real redis-server when asked), each a real
 * process on 127.0.0.1; and what the specs read back: a batch's lines, and how many times each
 * line ran on the engine, per `<batch id>:<custom_id>`.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI, { toFile } from 'openai';
import { startService } from '../../gateway/cli/entry.ts';
import type { ChildService } from '../../placer/kernel/processes.ts';
import { runnerArgs, simEngineArgs } from '../../placer/kernel/service-args.ts';
import { countRequestRuns } from '../../runner/index.ts';
import { eventually, operatorEnv } from '../support/fleet.ts';
import { startRedis } from '../support/redis.ts';
import type { RedisServer } from '../support/redis.ts';

const quiet = ['--log-level', 'warn'];

/** What a batch fleet is started with. */
export interface BatchFleetOptions {
  /** Keep files and batches in a redis-server started for the fleet. */
  redis?: boolean;
  /** Engine and runner pairs. @default 1 */
  nodes?: number;
  engineArgs?: readonly string[];
  runnerArgs?: readonly string[];
  gatewayArgs?: readonly string[];
}

/** A running batch fleet. */
export interface BatchFleet {
  readonly redis: RedisServer | undefined;
  /** The engines and, in the same order, the runners in front of them. */
  readonly engines: readonly ChildService[];
  readonly runners: readonly ChildService[];
  /** Starts a gateway over the fleet's runner, named `id`. */
  gateway(id: string): Promise<ChildService>;
  /** The OpenAI SDK on a gateway. */
  client(gateway: ChildService): OpenAI;
  /** How many times each request id ran on the engines, by their call logs (`refused` answers not counted). */
  runs(): Map<string, number>;
  stop(): Promise<void>;
}

/** Starts a batch fleet; the caller stops it. */
export async function startBatchFleet(options: BatchFleetOptions = {}): Promise<BatchFleet> {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-batch-'));
  const callLog = (n: number) => join(dir, `calls-${n}.log`);
  const started: ChildService[] = [];
  const redis = options.redis ? await startRedis() : undefined;
  const stop = async () => {
    await Promise.all(started.map((s) => s.stop('SIGTERM', 5000)));
    await redis?.stop();
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const nodes = Array.from({ length: options.nodes ?? 1 }, (_, i) => i + 1);
    const engines: ChildService[] = [];
    const runners: ChildService[] = [];
    for (const n of nodes) {
      const engine = await startService(
        simEngineArgs({ id: `sim-${n}` }, [...quiet, '--call-log', callLog(n), ...(options.engineArgs ?? [])]),
      );
      started.push(engine);
      engines.push(engine);
      const runner = await startService(
        runnerArgs({ engine: engine.url, id: `runner-${n}` }, [...quiet, ...(options.runnerArgs ?? [])]),
      );
      started.push(runner);
      runners.push(runner);
    }
    const gateway = async (id: string) => {
      const args = [
        'gateway',
        '--port',
        '0',
        '--gateway-id',
        id,
        '--runners',
        runners.map((r) => r.url).join(','),
        ...(redis ? ['--store', redis.url] : []),
        ...quiet,
        ...(options.gatewayArgs ?? []),
      ];
      const service = await startService(args, { env: operatorEnv(), stdio: 'capture' });
      started.push(service);
      return service;
    };
    return {
      redis,
      engines,
      runners,
      gateway,
      client: (g) => new OpenAI({ baseURL: `${g.url}/v1`, apiKey: 'sk-test-dummy', maxRetries: 0 }),
      runs: () => countRequestRuns(nodes.map((n) => readLog(callLog(n)))),
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}

/** A call log's text; empty when its engine never wrote one. */
function readLog(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return '';
  }
}

/** A JSONL input of `lines` chat requests, custom ids `c0`…, each asking `maxTokens` tokens. */
export function chatLines(lines: number, maxTokens = 8): Buffer {
  const body = (i: number) => ({
    model: 'sim-small',
    messages: [{ role: 'user', content: `line ${i}` }],
    max_tokens: maxTokens,
    ignore_eos: true,
  });
  const text = Array.from({ length: lines }, (_, i) =>
    JSON.stringify({ custom_id: `c${i}`, method: 'POST', url: '/v1/chat/completions', body: body(i) }),
  ).join('\n');
  return Buffer.from(text);
}

/** Uploads `content` and creates a batch over it. */
export async function createBatch(client: OpenAI, content: Buffer): Promise<OpenAI.Batch> {
  const file = await client.files.create({ file: await toFile(content, 'in.jsonl'), purpose: 'batch' });
  return client.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
}

/** Waits (20 s at most) until `lines` lines of batch `id` completed: the batch is under way. */
export async function untilCompleted(client: OpenAI, id: string, lines: number): Promise<void> {
  await eventually(
    async () => ((await client.batches.retrieve(id)).request_counts?.completed ?? 0) >= lines,
    20_000,
    `${lines} lines of the batch to complete`,
  );
}
