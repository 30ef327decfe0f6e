import { chmodSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import type { Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ProfileError } from '../../../runner/engines/errors.ts';
import { defaultProfileFacts, validateProfile } from '../../../runner/engines/profile.ts';
import type { ProfileFacts } from '../../../runner/engines/profile.ts';

const BINARIES: Record<string, string> = {
  vllm: '/opt/bin/vllm',
  python3: '/usr/bin/python3',
  'llama-server': '/opt/llama/llama-server',
  'text-generation-launcher': '/usr/local/bin/text-generation-launcher',
  ollama: '/usr/local/bin/ollama',
  '/models/venv/bin/vllm': '/models/venv/bin/vllm',
};

/** A node with GPUs 0 and 1 where port 8001 is taken and 10.255.0.1 is no local address. */
function facts(overrides: Partial<ProfileFacts> = {}): ProfileFacts & { looked: string[] } {
  const looked: string[] = [];
  return {
    gpuIndices: [0, 1],
    findBinary: async (name) => {
      looked.push(name);
      return BINARIES[name];
    },
    portFree: async (host, port) => {
      if (host === '10.255.0.1') throw Object.assign(new Error('listen EADDRNOTAVAIL'), { code: 'EADDRNOTAVAIL' });
      return port !== 8001;
    },
    looked,
    ...overrides,
  };
}

const vllm = { kind: 'vllm', model: 'meta-llama/Llama-3.1-8B-Instruct', port: 8000 };

describe('validateProfile', () => {
  it('applies the defaults and resolves the binary on PATH', async () => {
    const profile = await validateProfile({ ...vllm, gpus: [1, 0] }, facts());
    expect(profile).toEqual({
      kind: 'vllm',
      model: 'meta-llama/Llama-3.1-8B-Instruct',
      gpus: [1, 0],
      port: 8000,
      host: '127.0.0.1',
      binary: '/opt/bin/vllm',
      args: [],
      env: {},
      startTimeout: 600_000,
    });
    expect(Object.isFrozen(profile) && Object.isFrozen(profile.gpus) && Object.isFrozen(profile.args)).toBe(true);
  });

  it.each([
    ['sglang', '/usr/bin/python3', 600_000],
    ['llamacpp', '/opt/llama/llama-server', 600_000],
    ['tgi', '/usr/local/bin/text-generation-launcher', 600_000],
    ['ollama', '/usr/local/bin/ollama', 600_000],
    ['sim', undefined, 30_000],
  ])('gives kind %s the binary %s and a start timeout of %i ms', async (kind, binary, startTimeout) => {
    const profile = await validateProfile({ kind, model: 'm', port: 9000 }, facts());
    expect(profile).toMatchObject({ binary, startTimeout });
  });

  it('keeps a profile binary, extra args, env and start timeout', async () => {
    const profile = await validateProfile(
      {
        ...vllm,
        host: '0.0.0.0',
        binary: '/models/venv/bin/vllm',
        args: ['--max-model-len', '8192', '--enforce-eager', '--seed', '-1', '--dtype=half'],
        env: { HF_HOME: '/models/hf' },
        startTimeout: 900_000,
      },
      facts(),
    );
    expect(profile).toMatchObject({
      host: '0.0.0.0',
      binary: '/models/venv/bin/vllm',
      args: ['--max-model-len', '8192', '--enforce-eager', '--seed', '-1', '--dtype=half'],
      env: { HF_HOME: '/models/hf' },
      startTimeout: 900_000,
    });
  });

  it.each([
    [null, 'profile must be an object, got null'],
    [
      { ...vllm, gpu: [0] },
      'profile has an unknown field "gpu"; known fields: kind, model, gpus, port, host, binary, args, env, startTimeout',
    ],
    [{ ...vllm, kind: 'vlm' }, 'profile.kind must be one of vllm, sglang, llamacpp, tgi, ollama, sim, got "vlm"'],
    [{ kind: 'vllm', port: 8000 }, 'profile.model must be a non-empty string, got undefined'],
    [{ ...vllm, model: ' ' }, 'profile.model must be a non-empty string, got " "'],
    [{ ...vllm, port: '8000' }, 'profile.port must be a positive integer, got "8000"'],
    [{ ...vllm, port: 0 }, 'profile.port must be a positive integer, got 0'],
    [{ ...vllm, port: 70_000 }, 'profile.port must be at most 65535, got 70000'],
    [
      { ...vllm, port: 8001 },
      'profile.port 8001 is not free on 127.0.0.1: something listens there or binding it is not allowed',
    ],
    [{ ...vllm, host: '' }, 'profile.host must be a non-empty string, got ""'],
    [{ ...vllm, host: '10.255.0.1' }, 'profile.host "10.255.0.1" cannot be bound on this node (EADDRNOTAVAIL)'],
    [{ ...vllm, gpus: '0,1' }, 'profile.gpus must be an array of GPU indices, got "0,1"'],
    [{ ...vllm, gpus: [0, -1] }, 'profile.gpus[1] must be a non-negative integer, got -1'],
    [{ ...vllm, gpus: [1, 1] }, 'profile.gpus lists GPU 1 twice'],
    [{ ...vllm, gpus: [0, 3] }, 'profile.gpus[1]: GPU 3 is not on this node (this node has GPUs 0, 1)'],
    [
      { kind: 'sim', model: 'm', port: 9000, gpus: [0] },
      'profile.gpus must be empty for kind sim (the simulated engine uses no GPUs), got [0]',
    ],
    [{ ...vllm, binary: 'vllm-nightly' }, 'profile.binary "vllm-nightly" was not found on PATH'],
    [
      { ...vllm, binary: '/opt/vllm/bin/vllm' },
      'profile.binary "/opt/vllm/bin/vllm" was not found or is not executable',
    ],
    [{ ...vllm, binary: 7 }, 'profile.binary must be a non-empty string, got 7'],
    [{ ...vllm, args: '--enforce-eager' }, 'profile.args must be an array of strings, got "--enforce-eager"'],
    [{ ...vllm, args: ['--max-num-seqs', 64] }, 'profile.args[1] must be a string without NUL bytes, got 64'],
    [
      { ...vllm, args: ['--enforce-eager', '--max-model-len'] },
      'profile.args[1] "--max-model-len" needs a value, got nothing after it',
    ],
    [
      { ...vllm, args: ['--max-model-len', '--dtype', 'half'] },
      'profile.args[0] "--max-model-len" needs a value, got "--dtype" after it',
    ],
    [
      { ...vllm, args: ['--max-model-len='] },
      'profile.args[0] "--max-model-len=" needs a value, got nothing after "="',
    ],
    [
      { ...vllm, kind: 'sglang', args: ['--context-length'] },
      'profile.args[0] "--context-length" needs a value, got nothing after it',
    ],
    [{ ...vllm, kind: 'llamacpp', args: ['-c'] }, 'profile.args[0] "-c" needs a value, got nothing after it'],
    [
      { ...vllm, kind: 'ollama', args: ['--verbose'] },
      'profile.args must be empty for kind ollama (ollama serve takes no arguments; configure it through profile.env, e.g. OLLAMA_NUM_PARALLEL), got ["--verbose"]',
    ],
    [
      { kind: 'sim', model: 'm', port: 9000, args: ['--model', 'x'] },
      'profile.args[0] "--model" is set by the runner from profile.model; set it there instead',
    ],
    [{ ...vllm, env: ['A=1'] }, 'profile.env must be an object of string values, got an array'],
    [{ ...vllm, env: { HF_HOME: 1 } }, 'profile.env.HF_HOME must be a string, got a number'],
    // Never quoting the value: profile.env is where engine credentials go.
    [{ ...vllm, env: { HF_TOKEN: 'hf_secret\0' } }, 'profile.env.HF_TOKEN must not contain NUL bytes'],
    [{ ...vllm, env: { 'A=B': 'x' } }, 'profile.env has an invalid variable name "A=B"'],
    [
      { ...vllm, env: { CUDA_VISIBLE_DEVICES: '0' } },
      'profile.env.CUDA_VISIBLE_DEVICES is set by the runner from profile.gpus; set it there instead',
    ],
    [
      { ...vllm, kind: 'ollama', env: { OLLAMA_HOST: '0.0.0.0' } },
      'profile.env.OLLAMA_HOST is set by the runner from profile.host and profile.port; set it there instead',
    ],
    [{ ...vllm, startTimeout: 0 }, 'profile.startTimeout must be a positive integer, got 0'],
  ])('refuses %j with one message naming the field and value', async (profile, message) => {
    await expect(validateProfile(profile, facts())).rejects.toThrow(new ProfileError(message));
  });

  // A flag the runner sets from a profile field, given in args (its value after it or after "=").
  it.each([
    ['vllm', ['--port', '9000'], 'port'],
    ['vllm', ['--host=0.0.0.0'], 'host'],
    ['vllm', ['-tp', '2'], 'gpus'],
    ['vllm', ['--tensor-parallel-size', '2'], 'gpus'],
    ['sglang', ['--tp', '2'], 'gpus'],
    ['sglang', ['--tp-size', '2'], 'gpus'],
    ['sglang', ['--model-path', 'x'], 'model'],
    ['llamacpp', ['-m', 'other.gguf'], 'model'],
    ['tgi', ['--hostname', '0.0.0.0'], 'host'],
    ['tgi', ['--model-id', 'x'], 'model'],
    ['tgi', ['--num-shard', '2'], 'gpus'],
    ['tgi', ['-p', '1'], 'port'],
  ])('refuses kind %s with args %j, naming the field %s the flag comes from', async (kind, args, field) => {
    const flag = args[0]!.split('=')[0];
    await expect(validateProfile({ ...vllm, kind, args }, facts())).rejects.toThrow(
      new ProfileError(`profile.args[0] "${flag}" is set by the runner from profile.${field}; set it there instead`),
    );
  });

  it('says so plainly when the node has no GPUs', async () => {
    await expect(validateProfile({ ...vllm, gpus: [0] }, facts({ gpuIndices: [] }))).rejects.toThrow(
      'profile.gpus[0]: GPU 0 is not on this node (this node has no GPUs)',
    );
  });

  it('names the default binary and the field to set when the kind’s binary is missing', async () => {
    await expect(validateProfile(vllm, facts({ findBinary: async () => undefined }))).rejects.toThrow(
      'vllm (the default binary for kind vllm) was not found on PATH; install it or set profile.binary',
    );
  });

  it('throws a ProfileError with code RUNNER_INVALID_PROFILE and status 500', async () => {
    const error = await validateProfile({ ...vllm, port: 8001 }, facts()).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ProfileError);
    expect(error).toMatchObject({ code: 'RUNNER_INVALID_PROFILE', status: 500, name: 'ProfileError' });
  });

  it('checks the profile itself before looking at the node', async () => {
    const node = facts();
    await expect(validateProfile({ ...vllm, args: ['--port', '1'] }, node)).rejects.toThrow(ProfileError);
    expect(node.looked).toEqual([]);
  });
});

describe('defaultProfileFacts', () => {
  const servers: Server[] = [];
  afterEach(async () => {
    await Promise.all(servers.splice(0).map((s) => new Promise((r) => s.close(r))));
  });

  it('reads GPU indices from the inventory', () => {
    expect(defaultProfileFacts({ gpus: [{ index: 0 }, { index: 2 }] }, '').gpuIndices).toEqual([0, 2]);
    expect(defaultProfileFacts({ gpus: [] }, '').gpuIndices).toEqual([]);
  });

  it('finds executables on the search path and by path, and nothing else', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-path-'));
    writeFileSync(join(dir, 'engine'), '#!/bin/sh\n');
    chmodSync(join(dir, 'engine'), 0o755);
    writeFileSync(join(dir, 'plain'), 'not executable\n');
    mkdirSync(join(dir, 'folder'));
    chmodSync(join(dir, 'folder'), 0o755);
    const { findBinary } = defaultProfileFacts({ gpus: [] }, ['relative/bin', '', '/nonexistent', dir].join(':'));
    expect(await findBinary('engine')).toBe(join(dir, 'engine'));
    expect(await findBinary(join(dir, 'engine'))).toBe(join(dir, 'engine'));
    expect(await findBinary('plain')).toBeUndefined();
    expect(await findBinary('folder')).toBeUndefined();
    expect(await findBinary(join(dir, 'folder'))).toBeUndefined();
    expect(await findBinary('missing')).toBeUndefined();
  });

  it('tells a taken port from a free one with a real bind, and rejects a host it cannot bind', async () => {
    const server = createServer();
    servers.push(server);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as { port: number };
    const { portFree } = defaultProfileFacts({ gpus: [] }, '');
    expect(await portFree('127.0.0.1', port)).toBe(false);
    await new Promise((r) => server.close(r));
    servers.length = 0;
    expect(await portFree('127.0.0.1', port)).toBe(true);
    // 192.0.2.0/24 is TEST-NET-1: never an address of this machine.
    await expect(portFree('192.0.2.1', port)).rejects.toMatchObject({ code: 'EADDRNOTAVAIL' });
  });

  it('refuses, through validateProfile, a sim profile whose port is taken on this node', async () => {
    const server = createServer();
    servers.push(server);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as { port: number };
    const node = defaultProfileFacts({ gpus: [] }, '');
    await expect(validateProfile({ kind: 'sim', model: 'm', port, binary: process.execPath }, node)).rejects.toThrow(
      `profile.port ${port} is not free on 127.0.0.1: something listens there or binding it is not allowed`,
    );
  });
});

describe('validateProfile: forbidden options', () => {
  it("takes --trust-remote-code in the runner's own profile, and refuses it in an order (with a policy)", async () => {
    const { DEFAULT_LAUNCH_POLICY } = await import('../../../runner/protocol/index.ts');
    const own = { kind: 'vllm', model: 'org/m', port: 8000, args: ['--trust-remote-code'] };
    const facts = {
      gpuIndices: [],
      findBinary: async (name: string) => `/usr/bin/${name}`,
      portFree: async () => true,
    };
    await expect(validateProfile(own, facts)).resolves.toMatchObject({ args: ['--trust-remote-code'] });
    await expect(validateProfile(own, facts, DEFAULT_LAUNCH_POLICY)).rejects.toThrow(
      'profile.args[0] "--trust-remote-code" is not allowed',
    );
  });
});
