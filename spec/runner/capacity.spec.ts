import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { freeGpus, launchableKinds, parseLabels } from '../../runner/capacity.ts';
import { RunnerConfigError } from '../../runner/errors.ts';
import { parseNvidiaSmi } from '../../runner/inventory.ts';
import type { GpuInventory } from '../../runner/protocol/index.ts';
import { resolveRunnerOptions } from '../../runner/options.ts';
import { expectThrows } from '../support/throws.ts';

const fixture = (name: string): GpuInventory => ({
  source: 'nvidia-smi',
  gpus: parseNvidiaSmi(readFileSync(new URL(`../fixtures/nvidia-smi/${name}`, import.meta.url), 'utf8')),
});
const none: GpuInventory = { source: 'none', gpus: [], reason: 'nvidia-smi not found' };

describe('parseLabels', () => {
  it('returns the same frozen labels from an object or from key=value texts', () => {
    const fromList = parseLabels(['zone=a', 'example.com/gpu=h100', 'spot=', 'rack=r1']);
    expect(fromList).toEqual({ zone: 'a', 'example.com/gpu': 'h100', spot: '', rack: 'r1' });
    expect(Object.isFrozen(fromList)).toBe(true);
    expect(parseLabels({ zone: 'a', 'example.com/gpu': 'h100', spot: '', rack: 'r1' })).toEqual(fromList);
    expect(parseLabels(undefined)).toEqual({});
    // At the limits: 64 labels, a name and a value of 63 characters.
    const wide = Object.fromEntries(Array.from({ length: 64 }, (_, i) => [`k${i}`.padEnd(63, 'x'), 'v'.repeat(63)]));
    expect(Object.keys(parseLabels(wide))).toHaveLength(64);
  });

  it.each<[string, unknown, RegExp]>([
    ['a text without =', ['zone'], /^labels must be key=value texts, got "zone"$/],
    ['a number', 7, /^labels must be an object of keys and values or a list of key=value texts, got 7$/],
    ['an empty key', ['=a'], /^labels: label key "" must be a key of 1-63 letters/],
    ['a key with a space', ['my zone=a'], /label key "my zone" must be/],
    ['a key starting with -', ['-zone=a'], /label key "-zone" must be/],
    ['a name of 64 characters', [`${'k'.repeat(64)}=a`], /label key "k{64}" must be/],
    ['an uppercase prefix', ['Example.com/zone=a'], /label key "Example.com\/zone" must be/],
    ['an empty prefix', ['/zone=a'], /label key "\/zone" must be/],
    ['a value with a space', ['zone=a b'], /label zone value "a b" must be/],
    ['a value of 64 characters', [`zone=${'v'.repeat(64)}`], /label zone value "v{64}" must be/],
    ['a value holding =', ['zone=a=b'], /label zone value "a=b" must be/],
    ['a value ending in .', ['zone=a.'], /label zone value "a\." must be .*Kubernetes label syntax/],
    ['a value that is not text', { zone: 1 }, /label zone value 1 must be/],
    ['a key given twice', ['zone=a', 'zone=b'], /^labels gives "zone" twice$/],
    ['65 labels', Array.from({ length: 65 }, (_, i) => `k${i}=v`), /^labels must hold at most 64 labels, got 65$/],
  ])('refuses %s, naming the option and the value', (_name, value, message) => {
    expectThrows(() => parseLabels(value), RunnerConfigError, {
      code: 'RUNNER_INVALID_OPTION',
      message: expect.stringMatching(message),
    });
  });

  it('is the runner option labels', () => {
    expect(resolveRunnerOptions({ engine: 'http://127.0.0.1:8000', labels: ['zone=a'] }).labels).toEqual({ zone: 'a' });
    expect(resolveRunnerOptions({ engine: 'http://127.0.0.1:8000' }).labels).toEqual({});
    expectThrows(
      () => resolveRunnerOptions({ engine: 'http://127.0.0.1:8000', labels: ['zone=a b'] }),
      RunnerConfigError,
      { message: expect.stringMatching(/^labels: label zone value "a b"/) },
    );
  });
});

describe('freeGpus', () => {
  it('returns the GPUs of an H100 node its engine does not hold, in index order', () => {
    const h100 = fixture('h100x8.csv');
    expect(freeGpus(h100, [])).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    expect(freeGpus(h100, [3, 0, 1, 2])).toEqual([4, 5, 6, 7]);
    expect(freeGpus(h100, [0, 1, 2, 3, 4, 5, 6, 7])).toEqual([]);
    // A held index the node does not have frees nothing and invents nothing.
    expect(freeGpus(h100, [9])).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
  });

  it('returns the one L4 until an engine holds it, and none on a node without nvidia-smi', () => {
    expect(freeGpus(fixture('l4x1.csv'), [])).toEqual([0]);
    expect(freeGpus(fixture('l4x1.csv'), [0])).toEqual([]);
    expect(freeGpus(none, [])).toEqual([]);
  });
});

describe('launchableKinds', () => {
  it('returns the kinds whose default binary is on PATH, and sim always, asking once per binary', async () => {
    const asked: string[] = [];
    const found = new Set(['vllm', 'llama-server']);
    const kinds = await launchableKinds(async (name) => {
      asked.push(name);
      return found.has(name) ? `/opt/bin/${name}` : undefined;
    });
    expect(kinds).toEqual(['vllm', 'llamacpp', 'sim']);
    expect(asked.sort()).toEqual(['llama-server', 'ollama', 'python3', 'text-generation-launcher', 'vllm']);
    expect(await launchableKinds(async () => undefined)).toEqual(['sim']);
  });
});
