/**
 * runner/protocol/launch-rules.ts and launch-policy.ts: reserved options reached in every
 * spelling the kind's parser reads, the environment allow-list (deny by default, NEVER_ENV never),
 * and the operator's additions.
 */
import { describe, expect, it } from 'vitest';
import { DEFAULT_LAUNCH_POLICY, launchProblems, reservedFlagOf, resolveLaunchPolicy } from '../../../runner/protocol/index.ts';
import type { ProfileKind } from '../../../runner/protocol/index.ts';

describe('reservedFlagOf', () => {
  it.each([
    // argparse (vLLM, SGLang): any prefix of a long option, `=` forms, `_` for `-`, attached and prefixed short forms.
    ['vllm', '--host', '--host'],
    ['vllm', '--ho=0.0.0.0', '--host'],
    ['vllm', '--h', '--host'],
    ['vllm', '--po', '--port'],
    ['vllm', '--tensor_parallel_size=2', '--tensor-parallel-size'],
    ['vllm', '-tp2', '-tp'],
    ['vllm', '-tp=2', '-tp'],
    ['vllm', '-t', '-tp'],
    ['vllm', '--conf=x.yaml', '--config'],
    ['vllm', '--ud', '--uds'],
    ['sglang', '--model-p', '--model-path'],
    ['sglang', '--tp', '--tp'],
    // clap (TGI): exact long names, `=`, `-p8000`, `-p=8000`, clustered one-letter options.
    ['tgi', '--hostname=0.0.0.0', '--hostname'],
    ['tgi', '-p8000', '-p'],
    ['tgi', '-p=8000', '-p'],
    ['tgi', '-xp8000', '-p'],
    // llama.cpp: exact names, `_` read as `-`, `=` refused too.
    ['llamacpp', '--port=1', '--port'],
    ['llamacpp', '-m', '-m'],
    ['llamacpp', '--hf_repo', '--hf-repo'],
    ['sim', '--config', '--config'],
  ] as const)('%s reads %s as %s', (kind, arg, flag) => {
    expect(reservedFlagOf(kind as ProfileKind, arg)?.flag).toBe(flag);
  });

  it.each([
    ['vllm', '--max-model-len'],
    ['vllm', '0.0.0.0'],
    ['vllm', '-1'],
    ['vllm', '--'],
    ['vllm', '--hostile-but-no-such-prefix'],
    ['vllm', '-pp'],
    ['tgi', '--hostnam'],
    ['tgi', '--max-input-tokens'],
    ['llamacpp', '--po'],
    ['llamacpp', '-mg'],
    ['llamacpp', '-ngl'],
    ['sim', '--ttft-ms=0'],
  ] as const)('%s reads %s as no reserved option', (kind, arg) => {
    expect(reservedFlagOf(kind as ProfileKind, arg)).toBeUndefined();
  });
});

describe('launchProblems', () => {
  it('names each field, never a value', () => {
    const problems = launchProblems({ kind: 'vllm', binary: '/bin/bash', args: ['--ho=0.0.0.0', '--api-key', 'k-secret'], env: { BASH_ENV: 'x', HF_TOKEN: 'hf', CUSTOM: 'v', CUDA_VISIBLE_DEVICES: '0' } });
    expect(problems.map((p) => p.field)).toEqual(['profile.binary', 'profile.args[0]', 'profile.env.BASH_ENV', 'profile.env.CUSTOM', 'profile.env.CUDA_VISIBLE_DEVICES']);
    const text = problems.map((p) => p.message).join('\n');
    expect(text).not.toMatch(/0\.0\.0\.0|k-secret/);
    expect(problems[1]!.message).toBe('profile.args[0] "--ho" (read as --host) is set by the runner from profile.host; set it there instead');
  });

  it('takes the kind\'s usual binary by name, and nothing for sim', () => {
    expect(launchProblems({ kind: 'vllm', binary: 'vllm' })).toEqual([]);
    expect(launchProblems({ kind: 'sim', binary: 'sluice' }).map((p) => p.field)).toEqual(['profile.binary']);
    expect(DEFAULT_LAUNCH_POLICY.binaries.sglang).toEqual(['python3']);
  });
});

describe('resolveLaunchPolicy', () => {
  it('adds binaries and variables per kind or for every kind', () => {
    const resolved = resolveLaunchPolicy({ binaries: ['vllm=/opt/vllm/bin/vllm', 'sim=sluice'], envAllow: ['HF_HOME', 'ollama=OLLAMA_MODELS'] });
    expect(resolved.kind).toBe('ok');
    if (resolved.kind !== 'ok') return;
    expect(resolved.policy.binaries.vllm).toEqual(['vllm', '/opt/vllm/bin/vllm']);
    expect(launchProblems({ kind: 'sim', binary: 'sluice', env: { HF_HOME: '/c' } }, resolved.policy)).toEqual([]);
    expect(launchProblems({ kind: 'vllm', env: { OLLAMA_MODELS: '/m' } }, resolved.policy).map((p) => p.field)).toEqual(['profile.env.OLLAMA_MODELS']);
  });

  it.each([
    [{ binaries: ['vllm'] }, 'engineBinaries entry "vllm" must be kind=path'],
    [{ binaries: ['triton=/x'] }, 'engineBinaries entry "triton=/x" must be kind=path'],
    [{ binaries: ['vllm=bin/vllm'] }, 'must name an absolute path or a bare name'],
    [{ envAllow: ['LD_PRELOAD'] }, 'LD_PRELOAD can make a process run other code and is never allowed'],
    [{ envAllow: ['vllm=PYTHONPATH'] }, 'never allowed'],
    [{ envAllow: ['NODE_OPTIONS'] }, 'never allowed'],
    [{ envAllow: ['CUDA_VISIBLE_DEVICES'] }, 'is set by the runner from profile.gpus'],
    [{ envAllow: ['A-B'] }, 'must name an environment variable'],
  ])('refuses %j', (options, message) => {
    const resolved = resolveLaunchPolicy(options);
    expect(resolved.kind).toBe('invalid');
    expect(resolved.kind === 'invalid' && resolved.problem).toContain(message);
  });
});

describe('forbidden options', () => {
  it('refuses code-running options in orders, and says which rule', () => {
    const problems = launchProblems({ kind: 'vllm', args: ['--trust-remote', '--tool-parser-plugin=/tmp/p.py'] });
    expect(problems.map((p) => [p.field, p.rule])).toEqual([
      ['profile.args[0]', 'forbidden'],
      ['profile.args[1]', 'forbidden'],
    ]);
    expect(launchProblems({ kind: 'llamacpp', args: ['--log-file', 'x'] })[0]!.message).toContain('it writes to a file of the runner');
  });
});
