/**
 * gateway/control/deployments.ts: a deployment's defaults, and every problem of a bad one found
 * at once, each naming the model and the field, never quoting an engine's args or env values.
 */
import { describe, expect, it } from 'vitest';
import { checkDeployment, deploymentDefaults, deploymentRevision } from '../../../gateway/control/deployments.ts';
import { resolveLaunchPolicy } from '../../../runner/protocol/index.ts';
import type { LaunchPolicy } from '../../../runner/protocol/index.ts';
import { LLAMA_PROFILE } from './fake-fleet.ts';

/** A policy that adds what these deployments launch beyond the defaults. */
function policyOf(binaries: string[], envAllow: string[]): LaunchPolicy {
  const resolved = resolveLaunchPolicy({ binaries, envAllow });
  if (resolved.kind !== 'ok') throw new Error(resolved.problem);
  return resolved.policy;
}

const sim = { kind: 'sim' };

describe('checkDeployment', () => {
  it('applies the defaults to a deployment that gives only a model and a kind', () => {
    const checked = checkDeployment({ model: 'org/m', profile: sim });
    expect(checked).toEqual({
      kind: 'valid',
      deployment: {
        model: 'org/m',
        profile: { kind: 'sim', model: 'org/m', gpus: 0, args: [], env: {} },
        minReplicas: 0,
        maxReplicas: 1,
        targetConcurrency: 100,
        scaleDownDelay: 300_000,
        runnerLabels: {},
      },
    });
    expect(deploymentDefaults).toEqual({
      minReplicas: 0,
      maxReplicas: 1,
      targetConcurrency: 100,
      scaleDownDelay: 300_000,
    });
    expect(Object.isFrozen(checked.kind === 'valid' && checked.deployment.profile)).toBe(true);
  });

  it('keeps every field given', () => {
    const given = {
      model: 'llama',
      // A binary and a variable beyond the defaults, which the policy below adds.
      profile: {
        ...LLAMA_PROFILE,
        gpus: [0, 1],
        port: 8001,
        binary: '/opt/vllm',
        env: { HF_HOME: '/cache' },
        startTimeout: 900_000,
      },
      minReplicas: 1,
      maxReplicas: 4,
      targetConcurrency: 32,
      scaleDownDelay: 0,
      runnerLabels: { zone: 'a', 'gpu.type': 'h100' },
    };
    expect(checkDeployment(given, undefined, policyOf(['vllm=/opt/vllm'], ['vllm=HF_HOME']))).toEqual({
      kind: 'valid',
      deployment: given,
    });
    expect(checkDeployment({ model: 'm', profile: { kind: 'llamacpp', model: '/m.gguf', gpus: 2 } })).toMatchObject({
      kind: 'valid',
      deployment: { profile: { gpus: 2 } },
    });
  });

  it.each([
    ['not an object', 'm', ['deployment: must be an object, got a string']],
    [
      'no profile',
      { model: 'm' },
      [
        'deployment "m": profile must be an object with at least a kind (vllm, sglang, llamacpp, tgi, ollama, sim), got an undefined',
      ],
    ],
    [
      'an empty model',
      { model: ' ', profile: sim },
      ['deployment " ": model must be a non-empty string without control characters or surrounding spaces, got " "'],
    ],
    [
      'an unknown field',
      { model: 'm', profile: sim, replicas: 2 },
      [expect.stringMatching(/^deployment "m": unknown field "replicas"; known fields: model, profile/)],
    ],
    [
      'an unknown profile field',
      { model: 'm', profile: { kind: 'sim', gpu: 1 } },
      [expect.stringMatching(/^deployment "m": profile has an unknown field "gpu"/)],
    ],
  ] as const)('refuses %s', (_name, value, problems) => {
    expect(checkDeployment(value)).toEqual({ kind: 'invalid', problems });
  });

  // Fields of deployment "m" on the simulated engine unless they name a profile, and the one problem.
  it.each([
    ['min above max', { minReplicas: 3, maxReplicas: 2 }, 'minReplicas 3 must be at most maxReplicas 2'],
    ['min above the default max', { minReplicas: 2 }, 'minReplicas 2 must be at most maxReplicas 1'],
    ['a zero max', { maxReplicas: 0 }, 'maxReplicas must be a whole number from 1 to 1024, got 0'],
    ['a zero target', { targetConcurrency: 0 }, 'targetConcurrency must be a whole number from 1 to 1024, got 0'],
    [
      'a fractional target',
      { targetConcurrency: 1.5 },
      'targetConcurrency must be a whole number from 1 to 1024, got 1.5',
    ],
    [
      'a negative delay',
      { scaleDownDelay: -1 },
      'scaleDownDelay must be a whole number of ms from 0 to 86400000, got -1',
    ],
    [
      'a delay as text',
      { scaleDownDelay: '5m' },
      'scaleDownDelay must be a whole number of ms from 0 to 86400000, got "5m"',
    ],
    [
      'labels as a list',
      { runnerLabels: ['zone=a'] },
      'runnerLabels must be an object of label names to values, e.g. {"zone":"a"}, got a list',
    ],
    [
      'a label value not text',
      { runnerLabels: { zone: 1 } },
      'runnerLabels.zone must be a label value (letters, digits, . _ / -, up to 63), got 1',
    ],
    [
      'an unknown kind',
      { profile: { kind: 'triton' } },
      'profile.kind must be one of vllm, sglang, llamacpp, tgi, ollama, sim, got "triton"',
    ],
    [
      'GPUs for sim',
      { profile: { kind: 'sim', gpus: 1 } },
      'profile.gpus must be empty or 0 for kind sim (the simulated engine uses no GPUs), got 1',
    ],
    ['a GPU listed twice', { profile: { kind: 'vllm', gpus: [0, 0] } }, 'profile.gpus lists GPU 0 twice'],
    [
      'a negative GPU count',
      { profile: { kind: 'vllm', gpus: -1 } },
      'profile.gpus must be a list of GPU indices or a GPU count from 0 to 64, got -1',
    ],
    [
      'a port out of range',
      { profile: { kind: 'vllm', port: 70_000 } },
      'profile.port must be a whole number from 1 to 65535, or absent for the runner to pick one, got 70000',
    ],
    [
      'a zero start timeout',
      { profile: { kind: 'vllm', startTimeout: 0 } },
      'profile.startTimeout must be a whole number of ms from 1, got 0',
    ],
    [
      'a flag the runner sets',
      { profile: { kind: 'vllm', args: ['--port=9000'] } },
      'profile.args[0] "--port" is set by the runner from profile.port; set it there instead',
    ],
    [
      'a variable the runner sets',
      { profile: { kind: 'vllm', env: { CUDA_VISIBLE_DEVICES: '0' } } },
      'profile.env.CUDA_VISIBLE_DEVICES is set by the runner from profile.gpus; set it there instead',
    ],
  ] as const)('refuses %s', (_name, fields, problem) => {
    expect(checkDeployment({ model: 'm', profile: sim, ...fields })).toEqual({
      kind: 'invalid',
      problems: [`deployment "m": ${problem}`],
    });
  });

  it('lists every problem of one deployment, and never quotes args or env values', () => {
    const checked = checkDeployment({
      model: 'org/m',
      profile: { kind: 'vllm', args: ['--api-key', 7, '--model=x'], env: { HF_TOKEN: 12345 } },
      minReplicas: 5,
      maxReplicas: 2,
      targetConcurrency: 0,
    });
    expect(checked.kind).toBe('invalid');
    const problems = checked.kind === 'invalid' ? checked.problems : [];
    expect(problems).toEqual([
      'deployment "org/m": minReplicas 5 must be at most maxReplicas 2',
      'deployment "org/m": targetConcurrency must be a whole number from 1 to 1024, got 0',
      'deployment "org/m": profile.args[1] must be a string without NUL bytes, got a number',
      'deployment "org/m": profile.env.HF_TOKEN must be a string without NUL bytes, got a number',
      'deployment "org/m": profile.args[2] "--model" is set by the runner from profile.model; set it there instead',
    ]);
    expect(problems.join('\n')).not.toMatch(/12345|--model=x/);
  });

  it('names the entry with the where given', () => {
    expect(checkDeployment({ model: 'm', profile: sim, maxReplicas: 0 }, 'entry 3 ("m")')).toEqual({
      kind: 'invalid',
      problems: ['entry 3 ("m"): maxReplicas must be a whole number from 1 to 1024, got 0'],
    });
  });
});

describe('deploymentRevision', () => {
  const valid = (value: Record<string, unknown>) => {
    const checked = checkDeployment({ model: 'm', ...value }, undefined, policyOf([], ['A', 'B']));
    if (checked.kind !== 'valid') throw new Error(checked.problems.join('\n'));
    return checked.deployment;
  };
  const base = {
    profile: { kind: 'sim', args: ['--a', '1'], env: { A: '1', B: '2' } },
    runnerLabels: { zone: 'a', gpu: 'h100' },
  };

  it('is 16 hex digits, the same for the same profile and labels written in any key order', () => {
    const one = deploymentRevision(valid(base));
    expect(one).toMatch(/^[0-9a-f]{16}$/);
    expect(
      deploymentRevision(
        valid({
          runnerLabels: { gpu: 'h100', zone: 'a' },
          profile: { env: { B: '2', A: '1' }, args: ['--a', '1'], kind: 'sim' },
        }),
      ),
    ).toBe(one);
    // What never restarts an engine is not in it.
    expect(
      deploymentRevision(
        valid({ ...base, minReplicas: 2, maxReplicas: 5, targetConcurrency: 3, scaleDownDelay: 1_000 }),
      ),
    ).toBe(one);
  });

  it('changes with anything a replica was launched with or placed by', () => {
    const one = deploymentRevision(valid(base));
    const others = [
      { ...base, profile: { ...base.profile, args: ['--a', '2'] } },
      { ...base, profile: { ...base.profile, env: { A: '1', B: '3' } } },
      { ...base, profile: { ...base.profile, kind: 'vllm', gpus: 1 } },
      { ...base, profile: { ...base.profile, kind: 'vllm', gpus: 2 } },
      { ...base, runnerLabels: { zone: 'b', gpu: 'h100' } },
    ].map((d) => deploymentRevision(valid(d)));
    for (const other of others) expect(other).not.toBe(one);
    expect(new Set(others).size).toBe(others.length);
  });
});
