/**
 * The deployments file (gateway/control/file.ts): a list checked whole, every problem of every
 * entry one line each, naming the file, the entry and the field; duplicates and unreadable or
 * non-JSON files refused with their own line.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadDeploymentsFile, parseDeploymentsFile } from '../../../gateway/control/file.ts';
import { DeploymentsFileError } from '../../../gateway/errors.ts';

/** The problems `text` is refused with. */
function problemsOf(text: string): readonly string[] {
  try {
    parseDeploymentsFile(text, 'd.json');
  } catch (error) {
    expect(error).toBeInstanceOf(DeploymentsFileError);
    expect((error as DeploymentsFileError).code).toBe('GW_INVALID_DEPLOYMENTS_FILE');
    expect((error as Error).message).toBe((error as DeploymentsFileError).problems.join('\n'));
    return (error as DeploymentsFileError).problems;
  }
  throw new Error('the file was taken');
}

describe('parseDeploymentsFile', () => {
  it('reads a YAML file as its JSON twin, and refuses its problems alike', () => {
    const yaml = [
      '- model: a',
      '  profile: {kind: sim}',
      '- model: org/b',
      '  profile:',
      '    kind: vllm',
      '    gpus: 2',
      '  maxReplicas: 4',
    ];
    const json = JSON.stringify([
      { model: 'a', profile: { kind: 'sim' } },
      { model: 'org/b', profile: { kind: 'vllm', gpus: 2 }, maxReplicas: 4 },
    ]);
    expect(parseDeploymentsFile(yaml.join('\n'), 'd.yaml')).toEqual(parseDeploymentsFile(json, 'd.json'));
    const twice = ['- model: a', '  profile: {kind: sim}', '- model: a', '  profile: {kind: sim}'].join('\n');
    expect(() => parseDeploymentsFile(twice, 'd.yml')).toThrow(
      'deployments file d.yml: entry 1 ("a"): model is already deployed by entry 0',
    );
    expect(() => parseDeploymentsFile('model: a', 'd.yaml')).toThrow(
      'deployments file d.yaml: must be a YAML list of deployments, got object',
    );
    expect(() => parseDeploymentsFile('- model: [a', 'd.yaml')).toThrow(
      /^deployments file d\.yaml: not YAML: .*at line 1/,
    );
  });

  it('reads a list of deployments with their defaults', () => {
    const deployments = parseDeploymentsFile(
      JSON.stringify([
        { model: 'a', profile: { kind: 'sim' } },
        { model: 'org/b', profile: { kind: 'vllm', gpus: 2 }, maxReplicas: 4 },
      ]),
      'd.json',
    );
    expect(deployments.map((d) => [d.model, d.profile.kind, d.minReplicas, d.maxReplicas])).toEqual([
      ['a', 'sim', 0, 1],
      ['org/b', 'vllm', 0, 4],
    ]);
    expect(parseDeploymentsFile('[]', 'd.json')).toEqual([]);
  });

  it.each([
    ['text that is not JSON', '[{', [expect.stringMatching(/^deployments file d\.json: not JSON: /)]],
    [
      'an object in place of a list',
      '{"model":"a"}',
      ['deployments file d.json: must be a JSON list of deployments, got object'],
    ],
    ['null', 'null', ['deployments file d.json: must be a JSON list of deployments, got null']],
    ['an entry that is not an object', '[7]', ['deployments file d.json: entry 0: must be an object, got a number']],
    [
      'a model deployed twice',
      JSON.stringify([
        { model: 'a', profile: { kind: 'sim' } },
        { model: 'a', profile: { kind: 'sim' } },
      ]),
      ['deployments file d.json: entry 1 ("a"): model is already deployed by entry 0'],
    ],
  ] as const)('refuses %s', (_name, text, problems) => {
    expect(problemsOf(text)).toEqual(problems);
  });

  it('lists every problem of every entry, one line each', () => {
    const text = JSON.stringify([
      { model: 'org/m', profile: { kind: 'vllm' }, minReplicas: 3, maxReplicas: 2 },
      { model: 'ok', profile: { kind: 'sim' } },
      { model: 'm2', profile: { kind: 'nope' }, targetConcurrency: 0 },
      { model: 'org/m', profile: { kind: 'sim' } },
    ]);
    expect(problemsOf(text)).toEqual([
      'deployments file d.json: entry 0 ("org/m"): minReplicas 3 must be at most maxReplicas 2',
      'deployments file d.json: entry 2 ("m2"): targetConcurrency must be a whole number from 1 to 1024, got 0',
      'deployments file d.json: entry 2 ("m2"): profile.kind must be one of vllm, sglang, llamacpp, tgi, ollama, sim, got "nope"',
      'deployments file d.json: entry 3 ("org/m"): model is already deployed by entry 0',
    ]);
  });

  it('lists the first 50 problems and counts the rest', () => {
    const problems = problemsOf(JSON.stringify(Array.from({ length: 60 }, () => 0)));
    expect(problems).toHaveLength(51);
    expect(problems.at(-1)).toBe('deployments file d.json: and 10 more');
  });
});

describe('loadDeploymentsFile', () => {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-deployments-spec-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('reads a file, and refuses one that cannot be read', async () => {
    const file = join(dir, 'deployments.json');
    writeFileSync(file, JSON.stringify([{ model: 'a', profile: { kind: 'sim' } }]));
    expect((await loadDeploymentsFile(file)).map((d) => d.model)).toEqual(['a']);
    const missing = join(dir, 'missing.json');
    await expect(loadDeploymentsFile(missing)).rejects.toThrow(
      new RegExp(`^deployments file ${missing}: cannot be read: ENOENT`),
    );
  });
});
