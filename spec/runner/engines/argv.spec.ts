import { describe, expect, it } from 'vitest';
import { RunnerConfigError } from '../../../runner/errors.ts';
import { engineCommand } from '../../../runner/engines/argv.ts';
import { validateProfile } from '../../../runner/engines/profile.ts';
import { launchProblems } from '../../../runner/protocol/index.ts';
import type { EngineProfile, ProfileFacts, ValidProfile } from '../../../runner/engines/profile.ts';

/** A node with four GPUs where every binary lives in /opt/bin and every port is free. */
const node: ProfileFacts = {
  gpuIndices: [0, 1, 2, 3],
  findBinary: async (name) => (name.startsWith('/') ? name : `/opt/bin/${name}`),
  portFree: async () => true,
};
const profile = (p: Partial<EngineProfile> & Pick<EngineProfile, 'kind'>): Promise<ValidProfile> =>
  validateProfile({ model: 'org/model', port: 8000, ...p }, node);
const base = { PATH: '/usr/bin', HOME: '/home/runner' };
const SIM = ['/usr/bin/node', '/srv/sluice/gateway/cli/sluice.mjs'];
/** What every vllm command line here starts with: the model served on the profile's host and port. */
const VLLM_HEAD = ['serve', 'org/model', '--host', '127.0.0.1', '--port', '8000'];

describe('engineCommand', () => {
  it.each<[string, Partial<EngineProfile> & Pick<EngineProfile, 'kind'>, string, string[], Record<string, string>]>([
    [
      'vllm on two GPUs',
      { kind: 'vllm', gpus: [2, 3] },
      '/opt/bin/vllm',
      [...VLLM_HEAD, '--tensor-parallel-size', '2'],
      { CUDA_VISIBLE_DEVICES: '2,3' },
    ],
    ['vllm with no GPUs listed', { kind: 'vllm' }, '/opt/bin/vllm', VLLM_HEAD, {}],
    [
      'sglang on four GPUs',
      { kind: 'sglang', gpus: [0, 1, 2, 3], host: '0.0.0.0', port: 30000 },
      '/opt/bin/python3',
      [
        '-m',
        'sglang.launch_server',
        '--model-path',
        'org/model',
        '--host',
        '0.0.0.0',
        '--port',
        '30000',
        '--tp-size',
        '4',
      ],
      { CUDA_VISIBLE_DEVICES: '0,1,2,3' },
    ],
    [
      'sglang with a venv interpreter',
      { kind: 'sglang', binary: '/srv/venv/bin/python' },
      '/srv/venv/bin/python',
      ['-m', 'sglang.launch_server', '--model-path', 'org/model', '--host', '127.0.0.1', '--port', '8000'],
      {},
    ],
    [
      'llama.cpp on one GPU',
      { kind: 'llamacpp', model: '/models/q4.gguf', gpus: [1] },
      '/opt/bin/llama-server',
      ['-m', '/models/q4.gguf', '--host', '127.0.0.1', '--port', '8000', '--metrics', '--n-gpu-layers', '999'],
      { CUDA_VISIBLE_DEVICES: '1' },
    ],
    [
      'llama.cpp on a GPU with its own layer count',
      { kind: 'llamacpp', model: '/models/q4.gguf', gpus: [1], args: ['-ngl', '20'] },
      '/opt/bin/llama-server',
      ['-m', '/models/q4.gguf', '--host', '127.0.0.1', '--port', '8000', '--metrics', '-ngl', '20'],
      { CUDA_VISIBLE_DEVICES: '1' },
    ],
    [
      'llama.cpp on the CPU',
      { kind: 'llamacpp', model: '/models/q4.gguf', args: ['-c', '4096'] },
      '/opt/bin/llama-server',
      ['-m', '/models/q4.gguf', '--host', '127.0.0.1', '--port', '8000', '--metrics', '-c', '4096'],
      {},
    ],
    [
      'tgi on two GPUs',
      { kind: 'tgi', gpus: [0, 1], port: 3000 },
      '/opt/bin/text-generation-launcher',
      ['--model-id', 'org/model', '--hostname', '127.0.0.1', '--port', '3000', '--num-shard', '2'],
      { CUDA_VISIBLE_DEVICES: '0,1' },
    ],
    [
      'ollama',
      { kind: 'ollama', model: 'llama3.1:8b', port: 11434 },
      '/opt/bin/ollama',
      ['serve'],
      { OLLAMA_HOST: '127.0.0.1:11434' },
    ],
    [
      'ollama on IPv6 and a GPU',
      { kind: 'ollama', model: 'llama3.1:8b', host: '::1', port: 11434, gpus: [0] },
      '/opt/bin/ollama',
      ['serve'],
      { OLLAMA_HOST: '[::1]:11434', CUDA_VISIBLE_DEVICES: '0' },
    ],
    [
      'sim through the caller’s sluice command',
      { kind: 'sim', model: 'sim-small', port: 9001, args: ['--max-num-seqs', '2'] },
      '/usr/bin/node',
      [
        '/srv/sluice/gateway/cli/sluice.mjs',
        'sim-engine',
        '--host',
        '127.0.0.1',
        '--port',
        '9001',
        '--model',
        'sim-small',
        '--max-num-seqs',
        '2',
      ],
      {},
    ],
    [
      'sim through a sluice binary',
      { kind: 'sim', model: 'sim-small', binary: 'sluice' },
      '/opt/bin/sluice',
      ['sim-engine', '--host', '127.0.0.1', '--port', '8000', '--model', 'sim-small'],
      {},
    ],
  ])('runs %s exactly so', async (_, p, command, args, added) => {
    const built = engineCommand(await profile(p), { simCommand: SIM, baseEnv: base });
    expect(built).toEqual({ command, args, env: { ...base, ...added } });
  });

  it('appends the profile args after its own, in order', async () => {
    const built = engineCommand(
      await profile({ kind: 'vllm', gpus: [0], args: ['--max-model-len', '8192', '--enforce-eager'] }),
      { baseEnv: {} },
    );
    expect(built.args).toEqual([
      ...VLLM_HEAD,
      '--tensor-parallel-size',
      '1',
      '--max-model-len',
      '8192',
      '--enforce-eager',
    ]);
  });

  const cache = { eventsEndpoint: 'tcp://127.0.0.1:41234', hashSeed: '0' };
  const cacheArgs = [
    '--enable-prompt-tokens-details',
    '--prefix-caching-hash-algo',
    'sha256_cbor',
    '--kv-events-config',
    '{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://127.0.0.1:41234","topic":""}',
  ];

  it('turns cache truth on for vllm: KV events to the given endpoint, cached tokens, sha256_cbor, PYTHONHASHSEED', async () => {
    const built = engineCommand(await profile({ kind: 'vllm', args: ['--enforce-eager'] }), {
      baseEnv: { ...base, PYTHONHASHSEED: 'random' },
      cache,
    });
    expect(built.args).toEqual([...VLLM_HEAD, ...cacheArgs, '--enforce-eager']);
    expect(built.env).toEqual({ ...base, PYTHONHASHSEED: '0' });
  });

  it('turns it on for the simulated engine with the same flags, and for no kind without KV events', async () => {
    const sim = engineCommand(await profile({ kind: 'sim' }), { simCommand: SIM, baseEnv: base, cache });
    expect(sim.args.slice(-cacheArgs.length)).toEqual(cacheArgs);
    expect(sim.env.PYTHONHASHSEED).toBe('0');
    const tgi = engineCommand(await profile({ kind: 'tgi' }), { baseEnv: base, cache });
    expect(tgi.args).not.toContain('--kv-events-config');
    expect(tgi.env.PYTHONHASHSEED).toBeUndefined();
  });

  it("turns it on for sglang with SGLang's flags: cached tokens in usage, KV events to the endpoint, no seed", async () => {
    const sglang = engineCommand(await profile({ kind: 'sglang', args: ['--page-size', '1'] }), {
      baseEnv: base,
      cache,
    });
    expect(sglang.args.slice(-5)).toEqual([
      '--enable-cache-report',
      '--kv-events-config',
      '{"publisher":"zmq","endpoint":"tcp://127.0.0.1:41234","topic":""}',
      '--page-size',
      '1',
    ]);
    expect(sglang.env.PYTHONHASHSEED).toBeUndefined();
  });

  it.each([
    ['vllm', '--kv-events-config'],
    ['vllm', '--prefix-caching-hash-algo=builtin'],
    ['sim', '--kv-events-config'],
    ['sglang', '--kv-events-config'],
  ] as const)('refuses an order for a %s engine that sets %s, which the runner sets', (kind, arg) => {
    const problems = launchProblems({ kind, model: 'org/model', args: [arg, '{}'] });
    expect(problems).toEqual([
      expect.objectContaining({ rule: 'forbidden', message: expect.stringMatching(/runner sets/) }),
    ]);
  });

  it('lays the profile env over the runner’s, dropping unset variables', async () => {
    const built = engineCommand(await profile({ kind: 'vllm', gpus: [0], env: { HF_HOME: '/models', HOME: '/srv' } }), {
      baseEnv: { ...base, HF_HOME: '/tmp/hf', UNSET: undefined, CUDA_VISIBLE_DEVICES: '0,1,2,3' },
    });
    expect(built.env).toEqual({ PATH: '/usr/bin', HOME: '/srv', HF_HOME: '/models', CUDA_VISIBLE_DEVICES: '0' });
  });

  it('keeps the runner’s SLUICE_* settings from the engine, whose own settings they are not', async () => {
    const built = engineCommand(await profile({ kind: 'sim' }), {
      simCommand: SIM,
      baseEnv: { PATH: '/usr/bin', SLUICE_PROFILE: '{"kind":"sim"}', SLUICE_CONFIG: '/etc/runner.json' },
    });
    expect(built.env).toEqual({ PATH: '/usr/bin' });
  });

  it('inherits the runner’s CUDA_VISIBLE_DEVICES when the profile lists no GPUs', async () => {
    const built = engineCommand(await profile({ kind: 'vllm' }), { baseEnv: { CUDA_VISIBLE_DEVICES: '3' } });
    expect(built.env).toEqual({ CUDA_VISIBLE_DEVICES: '3' });
  });

  it('uses process.env when no base environment is given', async () => {
    const built = engineCommand(await profile({ kind: 'vllm' }));
    expect(built.env.PATH).toBe(process.env.PATH);
  });

  it('refuses a sim profile with neither a binary nor a sim command', async () => {
    const sim = await profile({ kind: 'sim' });
    expect(() => engineCommand(sim, {})).toThrow(
      new RunnerConfigError('simCommand is required for a sim profile that names no binary'),
    );
    expect(() => engineCommand(sim, { simCommand: [] })).toThrow(RunnerConfigError);
  });
});
