/**
 * The argument lists of a simulated engine and a runner on port 0 (placer/kernel/service-args.ts):
 * each flag stands only when its value is given, and the caller's own flags come last.
 */
import { describe, expect, it } from 'vitest';
import { existsSync } from 'node:fs';
import { dirname } from 'node:path';
import { KV_HASH_SEED, kvEventSockets, runnerArgs, simEngineArgs } from '../../../placer/kernel/service-args.ts';
import type { RunnerArgs, SimEngineArgs } from '../../../placer/kernel/service-args.ts';

describe('simEngineArgs', () => {
  it.each<[string, SimEngineArgs, string[], string[]]>([
    ['no id', {}, [], ['sim-engine', '--port', '0']],
    ['an id', { id: 'sim-1' }, [], ['sim-engine', '--port', '0', '--engine-id', 'sim-1']],
    [
      'an id and flags of its own',
      { id: 'h100-2' },
      ['--profile', 'h100-8b'],
      ['sim-engine', '--port', '0', '--engine-id', 'h100-2', '--profile', 'h100-8b'],
    ],
  ])('returns the engine on port 0 with %s', (_, engine, extra, expected) => {
    expect(simEngineArgs(engine, extra)).toEqual(expected);
  });
});

describe('runnerArgs', () => {
  const engine = 'http://127.0.0.1:9000';
  const gateway = 'http://127.0.0.1:8080';
  it.each<[string, RunnerArgs, string[], string[]]>([
    [
      'an engine, of kind sim when not told',
      { engine },
      [],
      ['runner', '--port', '0', '--engine', engine, '--engine-kind', 'sim'],
    ],
    [
      'an engine of the kind given and an id',
      { engine, kind: 'openai', id: 'r-1' },
      [],
      ['runner', '--port', '0', '--engine', engine, '--engine-kind', 'openai', '--id', 'r-1'],
    ],
    [
      'no engine (waiting for orders), a gateway, and flags of its own',
      { id: 'runner-2', gateway },
      ['--slots', '4'],
      ['runner', '--port', '0', '--id', 'runner-2', '--gateway', gateway, '--slots', '4'],
    ],
    [
      'an engine and a gateway',
      { engine, id: 'runner-tls', gateway },
      [],
      ['runner', '--port', '0', '--engine', engine, '--engine-kind', 'sim', '--id', 'runner-tls', '--gateway', gateway],
    ],
  ])('returns the runner on port 0 with %s', (_, runner, extra, expected) => {
    expect(runnerArgs(runner, extra)).toEqual(expected);
  });
});

describe('engines publishing KV events, and their runners', () => {
  it('gives the engine vLLM flags for the endpoint, and its runner the endpoint and the shared hash seed', () => {
    const kvEvents = 'ipc:///tmp/x/engine-1.kv';
    const engine = simEngineArgs({ id: 'sim-1', kvEvents });
    expect(engine).toContain('--enable-prompt-tokens-details');
    expect(JSON.parse(engine[engine.indexOf('--kv-events-config') + 1]!)).toMatchObject({ endpoint: kvEvents });
    const runner = runnerArgs({ engine: 'http://127.0.0.1:9000', kvEvents });
    expect(runner.slice(runner.indexOf('--engine-kv-events'))).toEqual([
      '--engine-kv-events',
      kvEvents,
      '--hash-seed',
      KV_HASH_SEED,
    ]);
    expect(runnerArgs({ engine: 'http://127.0.0.1:9000' })).not.toContain('--hash-seed');
  });

  it('names endpoints in a folder of its own, and removes the folder', async () => {
    const sockets = await kvEventSockets('sluice-spec-kv-');
    const endpoint = sockets.endpoint('engine-1');
    expect(endpoint).toMatch(/^ipc:\/\/.*sluice-spec-kv-[^/]+\/engine-1\.kv$/);
    const dir = dirname(endpoint.slice('ipc://'.length));
    expect(existsSync(dir)).toBe(true);
    await sockets.remove();
    expect(existsSync(dir)).toBe(false);
  });
});
