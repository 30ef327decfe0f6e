import { describe, expect, it } from 'vitest';
import { RunnerConfigError } from '../../runner/errors.ts';
import { parseHttpUrl, resolveRunnerOptions } from '../../runner/options.ts';
import type { RunnerOptions } from '../../runner/options.ts';
import { createJsonLogger, silentLogger } from '../../placer/kernel/index.ts';
import { expectThrows } from '../support/throws.ts';

const engine = 'http://127.0.0.1:8000';

/** The RunnerConfigError resolveRunnerOptions throws; fails the test when it returns. */
const configError = (options: RunnerOptions): RunnerConfigError =>
  expectThrows(() => resolveRunnerOptions(options), RunnerConfigError, {});

describe('resolveRunnerOptions', () => {
  it('returns the documented defaults when only engine is given', () => {
    const config = resolveRunnerOptions({ engine });
    expect(config).toMatchObject({
      profile: undefined,
      engineKind: 'openai',
      slots: 4,
      loadInterval: 1000,
      engineStopGrace: 10_000,
      engineRestartBackoff: 1000,
      engineConnectTimeout: 2000,
      defaultCallTimeout: 600_000,
      engineProbeInterval: 5000,
    });
    expect(config.logger).toBe(silentLogger);
    expect(config.engineUrl).toBeInstanceOf(URL);
    expect(config.engineUrl!.href).toBe('http://127.0.0.1:8000/');
  });

  it('returns a default id of runner- and 6 hex digits, different per call, when no id is given', () => {
    const ids = new Set(Array.from({ length: 20 }, () => resolveRunnerOptions({ engine }).id));
    for (const id of ids) expect(id).toMatch(/^runner-[0-9a-f]{6}$/);
    expect(ids.size).toBeGreaterThan(1);
  });

  it('returns the given values when every option is set', () => {
    const logger = createJsonLogger({ write: () => {} });
    const config = resolveRunnerOptions({
      engine: 'https://engine.internal:8443/base',
      id: 'gpu-0.node_a:1',
      slots: 1,
      engineConnectTimeout: 10,
      defaultCallTimeout: 20,
      engineProbeInterval: 30,
      logger,
    });
    expect(config).toMatchObject({
      id: 'gpu-0.node_a:1',
      slots: 1,
      engineConnectTimeout: 10,
      defaultCallTimeout: 20,
      engineProbeInterval: 30,
    });
    expect(config.logger).toBe(logger);
    expect(config.engineUrl!.pathname).toBe('/base');
  });

  it('returns a frozen config when resolved', () => {
    const config = resolveRunnerOptions({ engine });
    expect(Object.isFrozen(config)).toBe(true);
    expect(() => {
      (config as { slots: number }).slots = 9;
    }).toThrow(TypeError);
  });

  it('throws asking for one of engine and profile when both are given', () => {
    const message =
      'give engine (the URL of a running engine) or profile (an engine to launch), not both; give neither for a runner that hosts engines on order';
    expect(configError({ engine, profile: { kind: 'sim', model: 'm', port: 8001 } }).message).toBe(message);
  });

  it('returns an on-demand config, taking orders and with no engine URL, when neither engine nor profile is given', () => {
    const config = resolveRunnerOptions({});
    expect(config.orders).toBe(true);
    expect(config.engineUrl).toBeUndefined();
    expect(config.profile).toBeUndefined();
    expect(resolveRunnerOptions({ engine }).orders).toBe(false);
    expect(resolveRunnerOptions({ profile: { kind: 'sim', model: 'm', port: 8001 } }).orders).toBe(false);
  });

  it('returns the engine URL and kind from a profile', () => {
    const config = resolveRunnerOptions({ profile: { kind: 'sglang', model: 'm', port: 30000, host: '127.0.0.2' } });
    expect(config.engineUrl!.href).toBe('http://127.0.0.2:30000/');
    expect(config.engineKind).toBe('sglang');
    expect(configError({ profile: { kind: 'sim', model: 'm', port: 70000 } }).message).toBe(
      'profile.port must be at most 65535, got 70000',
    );
  });

  it('throws naming the valid kinds when engineKind is unknown', () => {
    expect(configError({ engine, engineKind: 'tpu' as never }).message).toBe(
      'engine kind must be one of vllm, sglang, llamacpp, tgi, ollama, openai, sim, got "tpu"',
    );
  });

  it.each<[unknown, string]>([
    ['', '""'],
    ['127.0.0.1:8000', '"127.0.0.1:8000"'],
    ['not a url', '"not a url"'],
    ['ftp://127.0.0.1:8000', '"ftp://127.0.0.1:8000"'],
    [8000, '8000'],
  ])('throws naming engine and the value when engine is %j', (value, shown) => {
    const error = configError({ engine: value as string });
    expect(error.code).toBe('RUNNER_INVALID_OPTION');
    expect(error.status).toBe(500);
    expect(error.message).toBe(`engine must be an http:// or https:// URL, got ${shown}`);
  });

  it.each<[unknown, string]>([
    ['', '""'],
    ['has space', '"has space"'],
    ['slash/id', '"slash/id"'],
    ['x'.repeat(129), JSON.stringify('x'.repeat(129))],
    [42, '42'],
  ])('throws naming id and the value when id is %j', (id, shown) => {
    expect(configError({ engine, id: id as string }).message).toBe(
      `id must be 1-128 letters, digits or ._:- characters, got ${shown}`,
    );
  });

  it('returns an id of 128 characters when it is exactly the limit', () => {
    expect(resolveRunnerOptions({ engine, id: 'x'.repeat(128) }).id).toHaveLength(128);
  });

  const positive = ['slots', 'engineConnectTimeout', 'defaultCallTimeout', 'engineProbeInterval'] as const;

  it.each(positive.flatMap((option) => [0, -1, 2.5, '4', null].map((value) => [option, value] as const)))(
    'throws naming %s and the value when it is %j',
    (option, value) => {
      expect(configError({ engine, [option]: value }).message).toBe(
        `${option} must be a positive integer, got ${JSON.stringify(value)}`,
      );
    },
  );

  it('throws naming slots and NaN when slots is NaN', () => {
    expect(configError({ engine, slots: Number.NaN }).message).toBe('slots must be a positive integer, got NaN');
  });

  it.each(['engineConnectTimeout', 'defaultCallTimeout', 'engineProbeInterval'])(
    'throws naming %s when it is above 2147483647 ms',
    (option) => {
      expect(configError({ engine, [option]: 2 ** 31 }).message).toBe(
        `${option} must be at most 2147483647 ms, got 2147483648`,
      );
    },
  );
});

describe('parseHttpUrl', () => {
  it('returns a URL when given an http or https URL', () => {
    expect(parseHttpUrl('engine', 'http://h:1').href).toBe('http://h:1/');
    expect(parseHttpUrl('engine', 'https://h/v1').pathname).toBe('/v1');
  });

  it('throws naming the option it was given when the value is bad', () => {
    expect(() => parseHttpUrl('gateway', 'mailto:x@y')).toThrow(
      new RunnerConfigError('gateway must be an http:// or https:// URL, got "mailto:x@y"'),
    );
  });
});

describe('the cache-truth options', () => {
  it('defaults the hash seed to "0", the feed interval to 50 ms and an engine’s block size to 16', () => {
    expect(resolveRunnerOptions({ engine: 'http://127.0.0.1:8000' })).toMatchObject({
      hashSeed: '0',
      cacheFeedInterval: 50,
      engineBlockSize: 16,
      engineKvEvents: undefined,
      kvBlockKeys: undefined,
      kvBlockSize: 16,
    });
  });

  it.each([
    [{ hashSeed: '' }, /hashSeed must be 1 to 64 printable ASCII characters/],
    [{ hashSeed: 'a b' }, /hashSeed must be/],
    [{ cacheFeedInterval: 0 }, /cacheFeedInterval/],
    [
      { engineKind: 'sim' as const, engineKvEvents: 'localhost:5557' },
      /engineKvEvents must be a tcp:\/\/ or ipc:\/\/ address/,
    ],
    [
      { engineKind: 'openai' as const, engineKvEvents: 'tcp://127.0.0.1:5557' },
      /engineKvEvents needs engineKind vllm, sglang or sim/,
    ],
    [{ kvBlockKeys: 'engine' as never }, /kvBlockKeys must be "native" or "tokens", got "engine"/],
    [{ kvBlockSize: 0 }, /kvBlockSize/],
  ])('refuses %o, naming the option', (options, message) => {
    expect(() => resolveRunnerOptions({ engine: 'http://127.0.0.1:8000', ...options })).toThrow(message);
  });

  it('returns the declared engineModels frozen, and undefined when none are declared', () => {
    const config = resolveRunnerOptions({ engine, engineModels: ['llama-8b', 'org/model-x'] });
    expect(config.engineModels).toEqual(['llama-8b', 'org/model-x']);
    expect(Object.isFrozen(config.engineModels)).toBe(true);
    expect(resolveRunnerOptions({ engine }).engineModels).toBeUndefined();
  });

  it.each<[unknown, RegExp]>([
    [[], /engineModels must be a non-empty list of model names, got \[\]/],
    ['llama-8b', /engineModels must be a non-empty list/],
    [['ok', 'has space'], /engineModels must hold model names .*, got "has space"/],
    [[''], /engineModels must hold model names/],
    [['a', 'b', 'a'], /engineModels names "a" twice/],
  ])('refuses engineModels %o, naming the option and the value', (engineModels, message) => {
    expect(() => resolveRunnerOptions({ engine, engineModels: engineModels as string[] })).toThrow(message);
  });

  it('refuses engineModels on a runner whose engines come with orders', () => {
    expect(() => resolveRunnerOptions({ engineModels: ['m'] })).toThrow(
      /engineModels is for a runner with an engine \(engine or profile\)/,
    );
  });

  it('takes engineKvEvents only for an engine behind a URL', () => {
    expect(() => resolveRunnerOptions({ engineKvEvents: 'tcp://127.0.0.1:5557' })).toThrow(
      /engineKvEvents is for an engine behind a URL/,
    );
    expect(
      resolveRunnerOptions({
        engine: 'http://127.0.0.1:8000',
        engineKind: 'sglang',
        engineKvEvents: 'tcp://127.0.0.1:5557',
      }).engineKvEvents,
    ).toBe('tcp://127.0.0.1:5557');
  });
});
