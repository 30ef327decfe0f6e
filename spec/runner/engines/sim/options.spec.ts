import { describe, expect, it } from 'vitest';
import { resolveSimEngineOptions, SimOptionError } from '../../../../runner/engines/sim/index.ts';
import { SluiceError } from '../../../../placer/errors.ts';

describe('resolveSimEngineOptions', () => {
  it('returns frozen defaults when given nothing', () => {
    const options = resolveSimEngineOptions({ random: () => 0.5 });
    expect(options).toMatchObject({
      models: ['sim-small'],
      engineId: 'sim-800000',
      ttftMs: 20,
      itlMs: 5,
      outputTokens: 16,
      maxNumSeqs: 16,
      maxQueue: 256,
      maxBodyBytes: 16 * 1024 * 1024,
    });
    expect(Object.isFrozen(options)).toBe(true);
    expect(Object.isFrozen(options.models)).toBe(true);
  });

  it('returns a random sim-<6 hex> engine id by default', () => {
    expect(resolveSimEngineOptions().engineId).toMatch(/^sim-[0-9a-f]{6}$/);
  });

  it('keeps given values and copies the models list', () => {
    const models = ['a', 'b'];
    const options = resolveSimEngineOptions({ models, engineId: 'e1', ttftMs: 0, itlMs: 0, maxQueue: 0 });
    models.push('c');
    expect(options).toMatchObject({ models: ['a', 'b'], engineId: 'e1', ttftMs: 0, itlMs: 0, maxQueue: 0 });
  });

  it.each([
    [{ maxNumSeqs: 0 }, 'maxNumSeqs', 'maxNumSeqs must be a positive integer, got 0'],
    [{ maxNumSeqs: 1.5 }, 'maxNumSeqs', 'maxNumSeqs must be a positive integer, got 1.5'],
    [{ outputTokens: -1 }, 'outputTokens', 'outputTokens must be a positive integer, got -1'],
    [{ maxQueue: Infinity }, 'maxQueue', 'maxQueue must be a non-negative integer, got Infinity'],
    [{ maxBodyBytes: 0 }, 'maxBodyBytes', 'maxBodyBytes must be a positive integer, got 0'],
    [{ ttftMs: -5 }, 'ttftMs', 'ttftMs must be a non-negative finite number of ms, got -5'],
    [{ itlMs: Number.NaN }, 'itlMs', 'itlMs must be a non-negative finite number of ms, got NaN'],
    [{ ttftMs: '20' as unknown as number }, 'ttftMs', 'ttftMs must be a non-negative finite number of ms, got "20"'],
    [{ models: [] }, 'models', 'models must be a non-empty array of names, got []'],
    [{ models: ['a', ''] }, 'models', 'models must hold non-empty names without surrounding spaces, got ""'],
    [{ models: ['a', 'a'] }, 'models', 'models must not repeat a name, got ["a", "a"]'],
    [{ engineId: 'has space' }, 'engineId', 'engineId must be a non-empty string of visible ASCII, got "has space"'],
    [{ clock: {} as { now(): number } }, 'clock', 'clock must be an object with a now() method, got [object Object]'],
    [{ random: 3 as unknown as () => number }, 'random', 'random must be a function returning [0, 1), got 3'],
  ])('throws SIM_INVALID_OPTION for %j', (input, option, message) => {
    let caught: unknown;
    try {
      resolveSimEngineOptions(input);
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(SimOptionError);
    expect(caught).toBeInstanceOf(SluiceError);
    expect(caught).toMatchObject({ code: 'SIM_INVALID_OPTION', status: 500, option, message });
  });
});
