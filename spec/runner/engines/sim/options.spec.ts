import { describe, expect, it } from 'vitest';
import { resolveSimEngineOptions, SimOptionError } from '../../../../runner/engines/sim/index.ts';
import { H100_8B_PROFILE, SMALL_PROFILE } from '../../../../runner/engines/sim/index.ts';
import { SluiceError } from '../../../../placer/kernel/index.ts';
import { expectThrows } from '../../../support/throws.ts';

describe('resolveSimEngineOptions', () => {
  it('returns frozen defaults when given nothing', () => {
    const options = resolveSimEngineOptions({ random: () => 0.5 });
    // The small profile is the default: its timings, queue and cache sizes.
    expect(options).toMatchObject({
      profile: 'small',
      models: ['sim-small'],
      engineId: 'sim-800000',
      ...SMALL_PROFILE,
      outputTokens: 16,
      maxBodyBytes: 16 * 1024 * 1024,
      failureRate: { 429: 0, 503: 0, 500: 0 },
      startupDelayMs: 0,
      crashOnCall: undefined,
      onCrash: undefined,
    });
    expect(Object.isFrozen(options)).toBe(true);
    expect(Object.isFrozen(options.models)).toBe(true);
    expect(Object.isFrozen(options.failureRate)).toBe(true);
  });

  it('returns the h100-8b numbers when that profile is named', () => {
    expect(resolveSimEngineOptions({ profile: 'h100-8b' })).toMatchObject({ profile: 'h100-8b', ...H100_8B_PROFILE });
  });

  it('lets each field override its profile', () => {
    const options = resolveSimEngineOptions({ profile: 'h100-8b', maxNumSeqs: 4, itlMs: 8, loadFactor: 3 });
    expect(options).toMatchObject({
      maxNumSeqs: 4,
      itlMs: 8,
      loadFactor: 3,
      prefillOverheadMs: 30,
      prefillPerTokenMs: 0.25,
    });
  });

  it('takes ttftMs as the old name of prefillOverheadMs', () => {
    expect(resolveSimEngineOptions({ ttftMs: 7 }).prefillOverheadMs).toBe(7);
    expect(resolveSimEngineOptions({ ttftMs: 7, prefillOverheadMs: 7 }).prefillOverheadMs).toBe(7);
  });

  it('keeps the given fault knobs', () => {
    const onCrash = (): void => undefined;
    const options = resolveSimEngineOptions({
      failureRate: { 503: 0.25, 500: 0.75 },
      startupDelayMs: 1500,
      crashOnCall: 3,
      onCrash,
    });
    expect(options).toMatchObject({
      failureRate: { 429: 0, 503: 0.25, 500: 0.75 },
      startupDelayMs: 1500,
      crashOnCall: 3,
      onCrash,
    });
  });

  it('returns a random sim-<6 hex> engine id by default', () => {
    expect(resolveSimEngineOptions().engineId).toMatch(/^sim-[0-9a-f]{6}$/);
  });

  it('keeps given values and copies the models list', () => {
    const models = ['a', 'b'];
    const options = resolveSimEngineOptions({ models, engineId: 'e1', ttftMs: 0, itlMs: 0, maxQueue: 0 });
    models.push('c');
    expect(options).toMatchObject({ models: ['a', 'b'], engineId: 'e1', prefillOverheadMs: 0, itlMs: 0, maxQueue: 0 });
  });

  it.each([
    [{ maxNumSeqs: 0 }, 'maxNumSeqs', 'maxNumSeqs must be a positive integer, got 0'],
    [{ maxNumSeqs: 1.5 }, 'maxNumSeqs', 'maxNumSeqs must be a positive integer, got 1.5'],
    [{ outputTokens: -1 }, 'outputTokens', 'outputTokens must be a positive integer, got -1'],
    [{ maxQueue: Infinity }, 'maxQueue', 'maxQueue must be a non-negative integer, got Infinity'],
    [{ maxBodyBytes: 0 }, 'maxBodyBytes', 'maxBodyBytes must be a positive integer, got 0'],
    [{ ttftMs: -5 }, 'ttftMs', 'ttftMs must be at least 0, got -5'],
    [{ itlMs: Number.NaN }, 'itlMs', 'itlMs must be a finite number, got NaN'],
    [{ ttftMs: '20' as unknown as number }, 'ttftMs', 'ttftMs must be a finite number, got "20"'],
    [{ models: [] }, 'models', 'models must be a non-empty array of names, got []'],
    [{ models: ['a', ''] }, 'models', 'models must hold non-empty names without surrounding spaces, got ""'],
    [{ models: ['a', 'a'] }, 'models', 'models must not repeat a name, got ["a","a"]'],
    [{ engineId: 'has space' }, 'engineId', 'engineId must be a non-empty string of visible ASCII, got "has space"'],
    [{ clock: {} as { now(): number } }, 'clock', 'clock must be an object with a now() method, got {}'],
    [{ random: 3 as unknown as () => number }, 'random', 'random must be a function, got 3'],
    [{ profile: 'a100' as 'small' }, 'profile', 'profile must be one of small, h100-8b, got "a100"'],
    [
      { ttftMs: 5, prefillOverheadMs: 6 },
      'ttftMs',
      'ttftMs is the old name of prefillOverheadMs; give one, got ttftMs 5 and prefillOverheadMs 6',
    ],
    [{ prefillPerTokenMs: -0.1 }, 'prefillPerTokenMs', 'prefillPerTokenMs must be at least 0, got -0.1'],
    [{ itlJitterStdMs: Infinity }, 'itlJitterStdMs', 'itlJitterStdMs must be a finite number, got Infinity'],
    [{ loadFactor: 0.5 }, 'loadFactor', 'loadFactor must be at least 1, got 0.5'],
    [{ cacheBlocks: 0 }, 'cacheBlocks', 'cacheBlocks must be a positive integer, got 0'],
    [{ cacheBlocks: 2 ** 21 }, 'cacheBlocks', 'cacheBlocks must be at most 1048576 blocks (16M tokens), got 2097152'],
    [{ kvBlocks: 1.5 }, 'kvBlocks', 'kvBlocks must be a positive integer, got 1.5'],
    [
      { failureRate: 0.5 as unknown as object },
      'failureRate',
      'failureRate must be an object like { 429: 0.1 }, got 0.5',
    ],
    [{ failureRate: { 404: 0.1 } as object }, 'failureRate', 'failureRate keys must be 429, 503 or 500, got "404"'],
    [{ failureRate: { 429: 1.5 } }, 'failureRate.429', 'failureRate.429 must be at most 1, got 1.5'],
    [
      { failureRate: { 429: 0.6, 503: 0.6 } },
      'failureRate',
      'failureRate values must add up to at most 1, got {"429":0.6,"503":0.6}',
    ],
    [{ startupDelayMs: -1 }, 'startupDelayMs', 'startupDelayMs must be at least 0, got -1'],
    [{ crashOnCall: 0 }, 'crashOnCall', 'crashOnCall must be a positive integer, got 0'],
    [{ onCrash: 'exit' as unknown as () => void }, 'onCrash', 'onCrash must be a function, got "exit"'],
  ])('throws SIM_INVALID_OPTION for %j', (input, option, message) => {
    const error = expectThrows(() => resolveSimEngineOptions(input), SimOptionError, {
      code: 'SIM_INVALID_OPTION',
      status: 500,
      option,
      message,
    });
    expect(error).toBeInstanceOf(SluiceError);
  });
});

describe('the cache-truth options', () => {
  it("reads --kv-events-config as vLLM does, with vLLM's defaults", () => {
    const resolved = resolveSimEngineOptions({
      kvEventsConfig: '{"enable_kv_cache_events": true, "publisher": "zmq"}',
    });
    expect(resolved.kvEvents).toEqual({
      style: { kind: 'vllm' },
      endpoint: 'tcp://*:5557',
      topic: '',
      replayEndpoint: undefined,
      bufferSteps: 10_000,
    });
  });

  it('publishes nothing when the config turns events off or names the null publisher', () => {
    expect(
      resolveSimEngineOptions({ kvEventsConfig: { enable_kv_cache_events: false, publisher: 'zmq' } }).kvEvents,
    ).toBe(undefined);
    expect(resolveSimEngineOptions({ kvEventsConfig: { enable_kv_cache_events: true } }).kvEvents).toBe(undefined);
  });

  it.each([
    ['not JSON', '{', /kvEventsConfig must be a JSON object/],
    ['an unknown field', { enable_kv_cache_events: true, port: 1 }, /kvEventsConfig has no field "port"/],
    ['another publisher', { enable_kv_cache_events: true, publisher: 'nats' }, /publisher must be "zmq" or "null"/],
    [
      'an endpoint without a scheme',
      { enable_kv_cache_events: true, publisher: 'zmq', endpoint: '127.0.0.1:1' },
      /endpoint must be/,
    ],
  ])('refuses %s, naming kvEventsConfig', (_name, value, message) => {
    expect(() => resolveSimEngineOptions({ kvEventsConfig: value })).toThrow(message);
  });

  it('takes a block size of 1 to 256 tokens, 16 by default, and a hash seed as given', () => {
    expect(resolveSimEngineOptions({}).blockSize).toBe(16);
    expect(resolveSimEngineOptions({ blockSize: 32, hashSeed: '42' })).toMatchObject({ blockSize: 32, hashSeed: '42' });
    expect(() => resolveSimEngineOptions({ blockSize: 0 })).toThrow(/blockSize/);
    expect(() => resolveSimEngineOptions({ enablePromptTokensDetails: 'yes' as unknown as boolean })).toThrow(
      /enablePromptTokensDetails must be true or false/,
    );
  });
});
