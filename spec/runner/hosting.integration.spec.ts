/**
 * On-demand runners (runner/hosting.ts) against a tiny gateway that answers registrations and
 * heartbeats and hands out the engine orders a test scripts. The runner is in-process; the
 * engines it launches are real `sim` processes, so starts, drains, stops and failures are real.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import { SLUICE_BIN, startService } from '../../gateway/cli/entry.ts';
import {
  REGISTER_PATH,
  REGISTRATION_LIMITS,
  BUSY_HEADER,
  parseHeartbeat,
  parseRegistration,
  blockKey,
  chainBlockHashes,
  seedHash,
  simChatPrompt,
  simTokenIds,
  unpackBlockKeys,
} from '../../runner/protocol/index.ts';
import type { EngineOrder, HostedEngine, OrderedProfile } from '../../runner/protocol/index.ts';
import { freePort } from '../../runner/hosting.ts';
import { createRunner } from '../../runner/server.ts';
import type { RunnerEnvironment, RunnerServer } from '../../runner/server.ts';
import type { RunnerOptions } from '../../runner/options.ts';
import type { GpuInventory } from '../../runner/protocol/index.ts';
import type { LogFields, Logger } from '../../placer/kernel/index.ts';
import { alive, openStream } from '../support/faults.ts';
import { chatBody, eventually, postJson } from '../support/fleet.ts';
import { commandLine } from '../support/command-line.ts';
import { serversForEach } from '../support/servers.ts';
import { startTextServer } from '../support/text-server.ts';
import type { TextServer } from '../support/text-server.ts';

const TOKEN = 'hosting-spec-token-0123456789';

const { cleanups } = serversForEach();

/** A gateway's registration endpoints: records every body, answers heartbeats with `host` as scripted. */
class OrderingGateway {
  /** What heartbeat answers carry: `undefined` leaves `host` out. */
  host: EngineOrder | null | undefined | Record<string, unknown> = undefined;
  readonly registrations: any[] = [];
  readonly beats: any[] = [];
  /** Cache updates (runner/cache-forwarder.ts): a launched sim engine's feed. */
  readonly cacheUpdates: any[] = [];
  #server: TextServer | undefined;

  static async start(): Promise<OrderingGateway> {
    const gw = new OrderingGateway();
    gw.#server = await startTextServer((req, res, text) => {
      if (req.method === 'DELETE') return res.writeHead(204).end();
      const body = JSON.parse(text);
      if (req.url === REGISTER_PATH) {
        gw.registrations.push(body);
        return res
          .writeHead(200, { 'content-type': 'application/json' })
          .end(JSON.stringify({ gatewayId: 'gw-hosting', heartbeatInterval: 50 }));
      }
      if (req.url?.endsWith('/cache')) {
        gw.cacheUpdates.push(body);
        return res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      }
      gw.beats.push(body);
      const answer = { drain: false, ...(gw.host === undefined ? {} : { host: gw.host }) };
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(answer));
    });
    cleanups.push(() => gw.close());
    return gw;
  }

  get url(): string {
    return this.#server!.url;
  }

  /** The hosted reports of every heartbeat so far, in order, as `replica state` texts without repeats. */
  states(): string[] {
    const seen: string[] = [];
    for (const beat of this.beats) {
      const h = beat.hosted as HostedEngine | undefined;
      const text = h ? `${h.replica} ${h.state}` : 'none';
      if (seen.at(-1) !== text) seen.push(text);
    }
    return seen;
  }

  /** The last heartbeat's hosted report. */
  hosted(): HostedEngine | undefined {
    return this.beats.at(-1)?.hosted;
  }

  close(): Promise<void> {
    return this.#server!.close();
  }
}

/** `count` distinct words, each one token of the simulated engine. */
const words = (count: number): string => Array.from({ length: count }, (_, i) => `w${i}`).join(' ');

const noGpus: GpuInventory = { source: 'none', gpus: [], reason: 'no GPUs in this spec' };
const twoGpus: GpuInventory = {
  source: 'nvidia-smi',
  gpus: [0, 1].map((index) => ({
    index,
    uuid: `GPU-${index}`,
    name: 'Spec GPU',
    memoryTotalMiB: 81_920,
    memoryUsedMiB: 0,
  })),
};

async function startRunner(
  gw: OrderingGateway,
  options: Partial<RunnerOptions> = {},
  environment: RunnerEnvironment = {},
): Promise<{ runner: RunnerServer; url: string }> {
  const runner = createRunner(
    {
      id: 'r-demand',
      slots: 2,
      runnerToken: TOKEN,
      gateways: [gw.url],
      heartbeatInterval: 50,
      drainTimeout: 10_000,
      engineStopGrace: 2000,
      simCommand: [process.execPath, SLUICE_BIN],
      ...options,
    },
    { readInventory: async () => noGpus, ...environment },
  );
  const { url } = await runner.listen(0, '127.0.0.1');
  cleanups.push(() => runner.close({ drainTimeout: 0 }));
  return { runner, url };
}

function simOrder(replica: string, args: string[] = [], extra: Partial<OrderedProfile> = {}): EngineOrder {
  return {
    replica,
    model: 'sim-small',
    profile: {
      kind: 'sim',
      model: 'sim-small',
      gpus: 0,
      args: ['--ttft-ms', '0', '--itl-ms', '0', ...args],
      env: {},
      ...extra,
    },
  };
}

/** A logger that keeps every line, children included. */
function recordingLogger(): {
  logger: Logger;
  lines: Array<{ message: string; fields: LogFields }>;
  transitions(): string[];
} {
  const lines: Array<{ message: string; fields: LogFields }> = [];
  const make = (base: LogFields): Logger => {
    const at = (message: string, fields: LogFields = {}) =>
      void lines.push({ message, fields: { ...base, ...fields } });
    return { debug: at, info: at, warn: at, error: at, child: (fields) => make({ ...base, ...fields }) };
  };
  return {
    logger: make({}),
    lines,
    transitions: () =>
      lines
        .filter((l) => l.message === 'hosted engine state changed')
        .map((l) => `${String(l.fields.replica)} ${String(l.fields.to)}`),
  };
}

const enginePid = (runner: RunnerServer): number | undefined => runner.status().engines[0]?.supervised?.pid;

describe('an on-demand runner', () => {
  it('starts with no engine, waits for orders, and says so in its registration, heartbeats, /status and busy answers', async () => {
    const gw = await OrderingGateway.start();
    const { runner, url } = await startRunner(gw);
    await eventually(() => gw.beats.length >= 2, 5000, 'heartbeats');

    const registration = parseRegistration(gw.registrations[0]);
    expect(registration).toMatchObject({
      kind: 'ok',
      value: { ready: false, models: [], engines: [], capacity: { orders: true } },
    });
    expect((registration as { value: { hosted?: unknown } }).value.hosted).toBeUndefined();
    expect(parseHeartbeat(gw.beats[0])).toMatchObject({
      kind: 'ok',
      value: { ready: false, models: [], capacity: { orders: true } },
    });
    expect(runner.status()).toMatchObject({ ready: false, models: [], engines: [], capacity: { orders: true } });
    const busy = await postJson(`${url}/v1/chat/completions`, chatBody());
    expect(busy.status).toBe(503);
    expect(busy.headers[BUSY_HEADER]).toBe('no-engine');
    expect((await request(`${url}/readyz`)).statusCode).toBe(503);
  });

  it('launches an ordered engine: starting, then ready with its models, and a call succeeds', async () => {
    const gw = await OrderingGateway.start();
    const { runner, url } = await startRunner(gw);
    gw.host = simOrder('rep-1', ['--startup-delay-ms', '800']);

    await eventually(() => gw.hosted()?.state === 'starting', 10_000, 'starting reported');
    const early = await postJson(`${url}/v1/chat/completions`, chatBody());
    expect(early.status).toBe(503);
    expect(early.headers[BUSY_HEADER]).toBe('starting');

    await eventually(() => gw.hosted()?.state === 'ready', 20_000, 'ready reported');
    const beat = gw.beats.at(-1);
    expect(parseHeartbeat(beat).kind).toBe('ok');
    expect(beat).toMatchObject({
      ready: true,
      models: ['sim-small'],
      hosted: { replica: 'rep-1', model: 'sim-small', state: 'ready', since: expect.any(Number) },
    });
    expect(gw.states()).toEqual(['none', 'rep-1 starting', 'rep-1 ready']);
    expect(runner.status().hosted).toMatchObject({ replica: 'rep-1', state: 'ready' });

    const ok = await postJson(`${url}/v1/chat/completions`, chatBody());
    expect(ok.status).toBe(200);
    expect(alive(enginePid(runner)!)).toBe(true);
  });

  it("carries an ordered sim engine's cache truth: announced in heartbeats, its blocks fed live after a call", async () => {
    const gw = await OrderingGateway.start();
    const { url } = await startRunner(gw);
    gw.host = simOrder('rep-1');
    await eventually(() => gw.hosted()?.state === 'ready', 20_000, 'ready reported');
    await eventually(() => gw.beats.at(-1)?.cache !== undefined, 5000, 'announced');
    expect(parseHeartbeat(gw.beats.at(-1)).kind).toBe('ok');
    expect(gw.beats.at(-1).cache).toEqual({
      tokenizer: 'sluice-sim',
      scheme: { algorithm: 'sha256_cbor', seed: '0', blockSize: 16 },
      events: true,
    });
    const long = chatBody({ messages: [{ role: 'user', content: words(80) }] });
    expect((await postJson(`${url}/v1/chat/completions`, long)).status).toBe(200);
    // 80 words and the role make 5 full blocks of 16 tokens: the engine's events reach the gateway.
    await eventually(
      () => gw.cacheUpdates.some((u) => u.engineFeed === 'live' && typeof u.stored === 'string'),
      10_000,
      'stored blocks fed',
    );
    const stored = gw.cacheUpdates
      .filter((u) => u.engineFeed === 'live')
      .flatMap((u) => unpackBlockKeys(u.stored ?? '')!);
    // The keys a gateway computes with the announced tokenizer and seed: the engine read PYTHONHASHSEED.
    const tokens = simTokenIds(simChatPrompt([{ role: 'user', content: words(80) }]));
    const expected = chainBlockHashes(tokens, 16, seedHash('0')).map((hash) => blockKey(hash));
    expect(stored.sort()).toEqual(expected.sort());
  });

  it('ignores an answer without host, and drains and stops the engine on null: draining, stopped, the process gone', async () => {
    const gw = await OrderingGateway.start();
    const { runner, url } = await startRunner(gw);
    gw.host = simOrder('rep-1');
    await eventually(() => gw.hosted()?.state === 'ready', 20_000, 'ready reported');
    const pid = enginePid(runner)!;

    // No word: the runner keeps what it hosts.
    gw.host = undefined;
    const seen = gw.beats.length;
    await eventually(() => gw.beats.length >= seen + 3, 5000, 'more heartbeats');
    expect(gw.hosted()?.state).toBe('ready');

    gw.host = null;
    // `stopped` is reported once; the null answering that beat clears it, and no engine is reported.
    await eventually(
      () => gw.states().includes('rep-1 stopped') && gw.hosted() === undefined,
      20_000,
      'stopped reported, then cleared',
    );
    expect(gw.states()).toEqual(['none', 'rep-1 starting', 'rep-1 ready', 'rep-1 draining', 'rep-1 stopped', 'none']);
    expect(alive(pid)).toBe(false);
    expect(gw.beats.at(-1)).toMatchObject({ ready: false, models: [] });
    const busy = await postJson(`${url}/v1/chat/completions`, chatBody());
    expect(busy.headers[BUSY_HEADER]).toBe('no-engine');
  });

  it('lets a call in flight finish when another replica is ordered, and launches that one only after the stop', async () => {
    const gw = await OrderingGateway.start();
    const log = recordingLogger();
    const { runner, url } = await startRunner(gw, { logger: log.logger });
    gw.host = simOrder('rep-1', ['--itl-ms', '40', '--output-tokens', '40']);
    await eventually(() => gw.hosted()?.state === 'ready', 20_000, 'ready reported');
    const firstPid = enginePid(runner)!;

    const stream = await openStream(`${url}/v1/chat/completions`, chatBody({ stream: true }));
    await stream.flowing;
    gw.host = simOrder('rep-2');
    await eventually(
      () => gw.hosted()?.replica === 'rep-1' && gw.hosted()?.state === 'draining',
      10_000,
      'draining reported',
    );
    const refused = await postJson(`${url}/v1/chat/completions`, chatBody());
    expect(refused.status).toBe(503);
    expect(refused.headers[BUSY_HEADER]).toBe('draining');

    const done = await stream.done;
    expect(done.status).toBe(200);
    expect(done.error).toBeUndefined();
    expect(done.events.at(-1)).toBe('[DONE]');

    await eventually(
      () => gw.hosted()?.replica === 'rep-2' && gw.hosted()?.state === 'ready',
      20_000,
      'the next replica ready',
    );
    // The runner's own account has every step; a gateway may miss `stopped` when the next order
    // already waits, since the beat that follows reads the new replica starting.
    expect(log.transitions()).toEqual([
      'rep-1 starting',
      'rep-1 ready',
      'rep-1 draining',
      'rep-1 stopped',
      'rep-2 starting',
      'rep-2 ready',
    ]);
    const states = gw.states();
    expect(states.slice(0, 4)).toEqual(['none', 'rep-1 starting', 'rep-1 ready', 'rep-1 draining']);
    expect(states.slice(-2)).toEqual(['rep-2 starting', 'rep-2 ready']);
    expect(alive(firstPid)).toBe(false);
    expect(enginePid(runner)).not.toBe(firstPid);
  });

  it('reports an engine that exits at once as failed with the exit code and its output, and does not restart it', async () => {
    const gw = await OrderingGateway.start();
    const crash = "console.log('boom: no weights here\\tat all'); process.exit(1)";
    const { runner } = await startRunner(gw, { simCommand: [process.execPath, '-e', crash] });
    gw.host = simOrder('rep-bad');

    await eventually(() => gw.hosted()?.state === 'failed', 20_000, 'failed reported');
    const hosted = gw.hosted()!;
    expect(hosted).toMatchObject({ replica: 'rep-bad', state: 'failed', reason: 'the engine exited with code 1' });
    // The tab became a space: the wire takes one-line text only.
    expect(hosted.output).toContain('boom: no weights here at all');
    expect(parseHeartbeat(gw.beats.at(-1)).kind).toBe('ok');

    // Kept until the next order; never relaunched.
    const seen = gw.beats.length;
    await eventually(() => gw.beats.length >= seen + 4, 5000, 'more heartbeats');
    expect(gw.states().filter((s) => s.startsWith('rep-bad'))).toEqual(['rep-bad starting', 'rep-bad failed']);
    expect(runner.status().engines).toEqual([]);
  });

  it("cuts a failed engine's output to the wire's limits", async () => {
    const gw = await OrderingGateway.start();
    const noisy = "for (let i = 0; i < 30; i++) console.log(i + ' ' + 'x'.repeat(600)); process.exit(3)";
    await startRunner(gw, { simCommand: [process.execPath, '-e', noisy] });
    gw.host = simOrder('rep-noisy');
    await eventually(() => gw.hosted()?.state === 'failed', 20_000, 'failed reported');
    const { output, reason } = gw.hosted()!;
    expect(reason).toBe('the engine exited with code 3');
    expect(output).toHaveLength(REGISTRATION_LIMITS.outputLines);
    expect(output!.at(-1)!.startsWith('29 x')).toBe(true);
    for (const line of output!) expect(line.length).toBeLessThanOrEqual(REGISTRATION_LIMITS.outputLine);
  });

  it('refuses an order for more GPUs than are free as failed, naming the count, and hosts the next order', async () => {
    const gw = await OrderingGateway.start();
    const { runner } = await startRunner(gw, {}, { readInventory: async () => twoGpus });
    await eventually(() => gw.beats.length >= 1, 5000, 'a heartbeat');
    expect(gw.beats.at(-1).capacity.freeGpus).toEqual([0, 1]);

    gw.host = { replica: 'rep-big', model: 'm', profile: { kind: 'vllm', model: 'm', gpus: 3, args: [], env: {} } };
    await eventually(() => gw.hosted()?.state === 'failed', 10_000, 'failed reported');
    expect(gw.hosted()!.reason).toMatch(/asks for 3 GPUs, this node has 2 free \(0, 1\)/);
    expect(runner.status().engines).toEqual([]);

    // A profile this node refuses (validateProfile) is a failed report too, with its message.
    gw.host = simOrder('rep-refused', ['--port', '9']);
    await eventually(
      () => gw.hosted()?.replica === 'rep-refused' && gw.hosted()?.state === 'failed',
      10_000,
      'refusal reported',
    );
    expect(gw.hosted()!.reason).toMatch(/--port/);

    gw.host = simOrder('rep-ok');
    await eventually(
      () => gw.hosted()?.replica === 'rep-ok' && gw.hosted()?.state === 'ready',
      20_000,
      'the next order ready',
    );
  });

  it('reports an engine not ready within its start timeout as failed, and leaves no process behind', async () => {
    const gw = await OrderingGateway.start();
    const { runner } = await startRunner(gw);
    gw.host = simOrder('rep-slow', ['--startup-delay-ms', '20000'], { startTimeout: 300 });
    await eventually(() => enginePid(runner) !== undefined, 10_000, 'the engine launched');
    const pid = enginePid(runner)!;
    await eventually(() => gw.hosted()?.state === 'failed', 20_000, 'failed reported');
    expect(gw.hosted()!.reason).toBe('the engine was not ready within 300 ms');
    await eventually(() => !alive(pid), 5000, 'the engine process gone');
  });

  it('takes a GPU count from the free GPUs, holds them out of capacity while the engine runs, and frees them after the stop', async () => {
    const gw = await OrderingGateway.start();
    // An engine binary that never becomes ready: enough to hold GPUs while it starts.
    const dir = await mkdtemp(join(tmpdir(), 'sluice-hosting-'));
    cleanups.push(() => rm(dir, { recursive: true, force: true }));
    const binary = join(dir, 'llama-server');
    await writeFile(binary, '#!/bin/sh\nexec sleep 60\n', { mode: 0o755 });
    // The runner's operator allows this binary for kind llamacpp; an order may name nothing else.
    const { runner } = await startRunner(
      gw,
      { engineBinaries: [`llamacpp=${binary}`] },
      { readInventory: async () => twoGpus },
    );
    gw.host = {
      replica: 'rep-gpu',
      model: 'm.gguf',
      profile: { kind: 'llamacpp', model: 'm.gguf', gpus: 1, binary, args: [], env: {} },
    };

    await eventually(
      () => gw.hosted()?.state === 'starting' && gw.beats.at(-1).capacity.freeGpus.length === 1,
      10_000,
      'one GPU held',
    );
    expect(gw.beats.at(-1).capacity.freeGpus).toEqual([1]);
    expect(runner.status().engines[0]!.supervised?.gpus).toEqual([0]);
    const pid = enginePid(runner)!;

    gw.host = null;
    await eventually(
      () => gw.states().includes('rep-gpu stopped') && gw.hosted() === undefined,
      10_000,
      'stopped reported, then cleared',
    );
    expect(gw.beats.at(-1).capacity.freeGpus).toEqual([0, 1]);
    expect(alive(pid)).toBe(false);
  });

  it('logs and ignores a bad order, keeping what it hosts', async () => {
    const gw = await OrderingGateway.start();
    const log = recordingLogger();
    const { runner } = await startRunner(gw, { logger: log.logger });
    gw.host = simOrder('rep-1');
    await eventually(() => gw.hosted()?.state === 'ready', 20_000, 'ready reported');
    gw.host = { replica: 'has space', model: 'm', profile: {} };
    await eventually(
      () =>
        log.lines.some(
          (l) =>
            l.message === 'gateway sent an invalid engine order, ignored' &&
            /host\.replica must be/.test(String(l.fields.problem)),
        ),
      5000,
      'the warning',
    );
    expect(gw.hosted()).toMatchObject({ replica: 'rep-1', state: 'ready' });
    expect(runner.status().ready).toBe(true);
  });

  it('stops its hosted engine on close, leaving no process behind', async () => {
    const gw = await OrderingGateway.start();
    const { runner } = await startRunner(gw);
    gw.host = simOrder('rep-1');
    await eventually(() => gw.hosted()?.state === 'ready', 20_000, 'ready reported');
    const pid = enginePid(runner)!;
    await runner.close({ drainTimeout: 0 });
    expect(alive(pid)).toBe(false);
    expect(runner.status().hosted).toMatchObject({ replica: 'rep-1', state: 'stopped' });
  });
});

describe('a runner with an engine of its own', () => {
  it('does not take orders: no capacity.orders, no hosted report, and host in answers is ignored', async () => {
    const gw = await OrderingGateway.start();
    gw.host = simOrder('rep-1');
    const { runner } = await startRunner(gw, {
      profile: { kind: 'sim', model: 'sim-small', port: await freePort(), args: ['--ttft-ms', '0', '--itl-ms', '0'] },
    });
    await eventually(() => runner.status().ready, 20_000, 'its own engine ready');
    const seen = gw.beats.length;
    await eventually(() => gw.beats.length >= seen + 3, 5000, 'more heartbeats');
    const beat = gw.beats.at(-1);
    expect(beat.capacity.orders).toBeUndefined();
    expect(beat.hosted).toBeUndefined();
    expect(runner.status().engines).toHaveLength(1);
    expect(runner.status().engines[0]!.supervised?.restarts).toBe(0);
  });
});

describe('sluice runner without --engine and --profile', () => {
  it('starts as an on-demand runner, says it waits for orders, and hosts a sim engine a gateway orders', async () => {
    const gw = await OrderingGateway.start();
    const child = await startService(
      commandLine('runner', { id: 'r-cli', gateway: gw.url, 'heartbeat-interval': '50ms', 'log-level': 'info' }),
      { env: { ...process.env, SLUICE_RUNNER_TOKEN: TOKEN } },
    );
    cleanups.push(() => child.stop('SIGTERM', 10_000));
    await eventually(() => gw.beats.length >= 1, 10_000, 'a heartbeat');
    expect(child.output()).toContain('runner waits for engine orders');
    expect(gw.beats[0]).toMatchObject({ ready: false, models: [], capacity: { orders: true } });

    gw.host = simOrder('rep-cli');
    await eventually(() => gw.hosted()?.state === 'ready', 20_000, 'ready reported');
    const status = (await (await request(`${child.url}/status`)).body.json()) as {
      hosted: HostedEngine;
      engines: Array<{ supervised: { pid: number } }>;
    };
    expect(status.hosted).toMatchObject({ replica: 'rep-cli', state: 'ready' });
    const pid = status.engines[0]!.supervised.pid;
    expect(await child.stop('SIGTERM', 10_000)).toBe(0);
    await eventually(() => !alive(pid), 5000, 'the engine process gone');
  });
});
