/**
 * The fleet the batch fault specs run on: simulated engines each writing a call log, a runner in
 * front of each, and gateways over those runners (on a real redis-server when asked), each a real
 * process on 127.0.0.1, started for a suite; a batch put under way; and what the specs check once
 * it ended: a batch's lines, and how many times each line ran on the engine, per
 * `<batch id>:<custom_id>`.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI, { toFile } from 'openai';
import { expect } from 'vitest';
import { startService } from '../../gateway/cli/entry.ts';
import type { ChildService } from '../../placer/kernel/processes.ts';
import { runnerArgs, simEngineArgs } from '../../placer/kernel/service-args.ts';
import { countRequestRuns } from '../../runner/index.ts';
import { batchEnded, fileLines } from '../support/batches.ts';
import { textOrEmpty } from '../support/files.ts';
import { eventually, operatorEnv, startedForSuite } from '../support/fleet.ts';
import { startRedis } from '../support/redis.ts';
import type { RedisServer } from '../support/redis.ts';

const quiet = ['--log-level', 'warn'];

/**
 * The engines' and runners' arguments unless a spec names its own: 8 tokens at 10 ms, so a line
 * takes about 80 ms, four at once on an engine and two on a runner: a batch takes a few seconds.
 */
const LINE_PACE = {
  engineArgs: ['--ttft-ms', '0', '--itl-ms', '10', '--max-num-seqs', '4'],
  runnerArgs: ['--slots', '2'],
} as const;

/** Gateway arguments for chunks of 5 lines on a 1 s lease: a dead gateway's chunks are free again within a second. */
export const SHORT_LEASES: readonly string[] = ['--batch-lease-ttl', '1s', '--batch-chunk-lines', '5'];

/** What a batch fleet is started with. */
export interface BatchFleetOptions {
  /** Keep files and batches in a redis-server started for the fleet. */
  redis?: boolean;
  /** Engine and runner pairs. @default 1 */
  nodes?: number;
  /** @default a line in about 80 ms, four at once */
  engineArgs?: readonly string[];
  /** @default two slots */
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
        simEngineArgs({ id: `sim-${n}` }, [
          ...quiet,
          '--call-log',
          callLog(n),
          ...(options.engineArgs ?? LINE_PACE.engineArgs),
        ]),
      );
      started.push(engine);
      engines.push(engine);
      const runner = await startService(
        runnerArgs({ engine: engine.url, id: `runner-${n}` }, [
          ...quiet,
          ...(options.runnerArgs ?? LINE_PACE.runnerArgs),
        ]),
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
      runs: () => countRequestRuns(nodes.map((n) => textOrEmpty(callLog(n)))),
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}

/** A batch fleet started for a suite, read inside its tests. */
export interface SuiteBatchFleet {
  /** The fleet; throws when read before the suite started it. */
  fleet(): BatchFleet;
  /** The gateway started as `id`; throws for an id the suite did not start. */
  gateway(id: string): ChildService;
}

/**
 * Starts a batch fleet and a gateway for each of `gatewayIds` before the tests of the enclosing
 * describe (or file), and stops them all after.
 */
export function batchFleetForSuite(options: BatchFleetOptions, gatewayIds: readonly string[]): SuiteBatchFleet {
  const started = startedForSuite(
    'batch fleet',
    async () => {
      const fleet = await startBatchFleet(options);
      try {
        const gateways = new Map<string, ChildService>();
        for (const id of gatewayIds) gateways.set(id, await fleet.gateway(id));
        return { fleet, gateways };
      } catch (error) {
        await fleet.stop();
        throw error;
      }
    },
    ({ fleet }) => fleet.stop(),
    60_000,
  );
  return {
    fleet: () => started().fleet,
    gateway: (id) => {
      const gateway = started().gateways.get(id);
      if (!gateway) throw new Error(`the suite started no gateway ${id}`);
      return gateway;
    },
  };
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

/**
 * Creates a batch over {@link chatLines}`(lines)` and waits (20 s at most) until `completed` of
 * its lines completed: the batch is under way. Resolves with its id.
 */
export async function batchUnderWay(client: OpenAI, lines: number, completed: number): Promise<string> {
  const { id } = await createBatch(client, chatLines(lines));
  await eventually(
    async () => ((await client.batches.retrieve(id)).request_counts?.completed ?? 0) >= completed,
    20_000,
    `${completed} lines of the batch to complete`,
  );
  return id;
}

/** A batch once it ended: its record, and the lines of its output and error files. */
export interface EndedBatch {
  batch: OpenAI.Batch;
  output: any[];
  errors: any[];
}

/**
 * Waits (20 s at most) for batch `id` to end and reads its lines; asserts that it completed with
 * each of its `lines` custom ids (`c0`…) exactly once between the output and the error file.
 */
export async function completedOnce(client: OpenAI, id: string, lines: number): Promise<EndedBatch> {
  const batch = await batchEnded(client, id);
  expect(batch.status).toBe('completed');
  const output = batch.output_file_id ? await fileLines(client, batch.output_file_id) : [];
  const errors = batch.error_file_id ? await fileLines(client, batch.error_file_id) : [];
  const ids = [...output, ...errors].map((line) => line.custom_id).sort();
  expect(ids).toEqual(Array.from({ length: lines }, (_, i) => `c${i}`).sort());
  return { batch, output, errors };
}

/** Asserts that no line ran twice on the fleet's engines, and that each `output` line of batch `id` ran once. */
export function expectRanOnce(fleet: BatchFleet, id: string, output: ReadonlyArray<{ custom_id: string }>): void {
  const runs = fleet.runs();
  expect([...runs].filter(([, n]) => n > 1)).toEqual([]);
  for (const line of output) expect(runs.get(`${id}:${line.custom_id}`)).toBe(1);
}
