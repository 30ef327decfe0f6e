/**
 * runner/protocol/launch-policy.ts: what an order may launch, the environment allow-list (deny
 * by default, NEVER_ENV never), and the operator's additions.
 */
import { describe, expect, it } from 'vitest';
import { DEFAULT_LAUNCH_POLICY, launchProblems, resolveLaunchPolicy } from '../../../runner/protocol/index.ts';

describe('launchProblems', () => {
  it('names each field, never a value', () => {
    const problems = launchProblems({
      kind: 'vllm',
      binary: '/bin/bash',
      args: ['--ho=0.0.0.0', '--api-key', 'k-secret'],
      env: { BASH_ENV: 'x', HF_TOKEN: 'hf', CUSTOM: 'v', CUDA_VISIBLE_DEVICES: '0' },
    });
    expect(problems.map((p) => p.field)).toEqual([
      'profile.binary',
      'profile.args[0]',
      'profile.env.BASH_ENV',
      'profile.env.CUSTOM',
      'profile.env.CUDA_VISIBLE_DEVICES',
    ]);
    const text = problems.map((p) => p.message).join('\n');
    expect(text).not.toMatch(/0\.0\.0\.0|k-secret/);
    expect(problems[1]!.message).toBe(
      'profile.args[0] "--ho" (read as --host) is set by the runner from profile.host; set it there instead',
    );
  });

  it("takes the kind's usual binary by name, and nothing for sim", () => {
    expect(launchProblems({ kind: 'vllm', binary: 'vllm' })).toEqual([]);
    expect(launchProblems({ kind: 'sim', binary: 'sluice' }).map((p) => p.field)).toEqual(['profile.binary']);
    expect(DEFAULT_LAUNCH_POLICY.binaries.sglang).toEqual(['python3']);
  });
});

describe('resolveLaunchPolicy', () => {
  it('adds binaries and variables per kind or for every kind', () => {
    const resolved = resolveLaunchPolicy({
      binaries: ['vllm=/opt/vllm/bin/vllm', 'sim=sluice'],
      envAllow: ['HF_HOME', 'ollama=OLLAMA_MODELS'],
    });
    expect(resolved.kind).toBe('ok');
    if (resolved.kind !== 'ok') return;
    expect(resolved.policy.binaries.vllm).toEqual(['vllm', '/opt/vllm/bin/vllm']);
    expect(launchProblems({ kind: 'sim', binary: 'sluice', env: { HF_HOME: '/c' } }, resolved.policy)).toEqual([]);
    expect(launchProblems({ kind: 'vllm', env: { OLLAMA_MODELS: '/m' } }, resolved.policy).map((p) => p.field)).toEqual(
      ['profile.env.OLLAMA_MODELS'],
    );
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
    expect(launchProblems({ kind: 'llamacpp', args: ['--log-file', 'x'] })[0]!.message).toContain(
      'it writes to a file of the runner',
    );
  });
});
