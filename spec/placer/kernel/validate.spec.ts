import { describe, expect, it } from 'vitest';
import {
  RUNNER_TOKEN_MIN_LENGTH,
  checkLogger,
  checkRunnerToken,
  checksFor,
  checksWith,
  resolveOptions,
  rule,
  silentLogger,
} from '../../../placer/kernel/index.ts';

class AreaError extends Error {
  readonly code = 'AREA_INVALID_OPTION';
}
const fail = (message: string) => new AreaError(message);

describe('checkRunnerToken', () => {
  const message = `runnerToken must be a string of at least ${RUNNER_TOKEN_MIN_LENGTH} printable ASCII characters without spaces`;

  it('returns a token of 16 or more printable ASCII characters', () => {
    expect(checkRunnerToken('runnerToken', 'x'.repeat(16), fail)).toBe('x'.repeat(16));
    expect(checkRunnerToken('runnerToken', '!~0123456789abcdef', fail)).toBe('!~0123456789abcdef');
  });

  it.each([
    ['a short one', 'x'.repeat(15)],
    ['one with a space', 'long enough but spaced'],
    ['one with a non-ASCII character', 'long-enough-tökén-value'],
    ['one with a control character', 'long-enough-token\n'],
    ['a number', 1234567890123456789],
    ['an empty string', ''],
  ])('throws the area error without the value for %s', (_what, token) => {
    const error = (() => {
      try {
        checkRunnerToken('runnerToken', token, fail);
      } catch (e) {
        return e as Error;
      }
      return undefined;
    })();
    expect(error).toBeInstanceOf(AreaError);
    expect(error!.message).toBe(message);
  });
});

describe('checkLogger', () => {
  it('returns a logger with the four methods', () => {
    expect(checkLogger('logger', silentLogger, fail)).toBe(silentLogger);
  });

  it('throws naming the option when a method is missing or the value is not an object', () => {
    const partial = { debug() {}, info() {}, warn() {} };
    expect(() => checkLogger('logger', partial, fail)).toThrow(
      new AreaError('logger must have debug, info, warn and error methods, got {}'),
    );
    expect(() => checkLogger('logger', null, fail)).toThrow(
      'logger must have debug, info, warn and error methods, got null',
    );
    expect(() => checkLogger('logger', 'console', fail)).toThrow(
      'logger must have debug, info, warn and error methods, got "console"',
    );
  });
});

describe('checksFor', () => {
  const check = checksFor(AreaError);

  it('throws the given error class from every check', () => {
    expect(() => check.integer('n', 0, { min: 1 })).toThrow(AreaError);
    expect(() => check.ms('t', 2 ** 31, 0)).toThrow('t must be at most 2147483647 ms, got 2147483648');
    expect(() => check.number('f', Number.NaN, { min: 1 })).toThrow('f must be a finite number, got NaN');
    expect(() => check.fn('random', 1)).toThrow('random must be a function, got 1');
    expect(check.fail('custom')).toBeInstanceOf(AreaError);
  });
});

describe('checksWith', () => {
  class NamedError extends Error {
    constructor(
      readonly option: string,
      message: string,
    ) {
      super(message);
    }
  }
  const check = checksWith((message, option) => new NamedError(option ?? '', message));

  it("hands every check's option name to the error it makes", () => {
    const cases: Array<[() => unknown, string]> = [
      [() => check.integer('slots', 0, { min: 1 }), 'slots'],
      [() => check.ms('timeout', 2 ** 31, 0), 'timeout'],
      [() => check.number('ratio', 2, { max: 1 }), 'ratio'],
      [() => check.fn('random', 1), 'random'],
      [() => check.logger('logger', {}), 'logger'],
      [() => check.runnerToken('runnerToken', 'short'), 'runnerToken'],
      [() => check.resolve({ size: 4 }, { size: rule.integer({ min: 1 }) }, { size: -1 }), 'size'],
    ];
    for (const [run, option] of cases) {
      expect(run).toThrow(NamedError);
      expect(run).toThrow(expect.objectContaining({ option }));
    }
  });
});

describe('resolveOptions', () => {
  const defaults = Object.freeze({ timeout: 1000, size: 4, name: 'a', logger: silentLogger });
  const rules = { size: rule.integer({ min: 1 }), timeout: rule.ms(1), logger: rule.logger() };

  it('returns the defaults for options not given, and frozen', () => {
    const resolved = resolveOptions(defaults, rules, {}, fail);
    expect(resolved).toEqual(defaults);
    expect(Object.isFrozen(resolved)).toBe(true);
  });

  it('returns given options over the defaults, undefined counting as not given', () => {
    expect(resolveOptions(defaults, rules, { timeout: 5, size: undefined, name: 'b' }, fail)).toEqual({
      ...defaults,
      timeout: 5,
      name: 'b',
    });
  });

  it('throws for the first bad option in the order of the rules, null counting as given', () => {
    expect(() => resolveOptions(defaults, rules, { timeout: 0, size: 0 }, fail)).toThrow(
      new AreaError('size must be a positive integer, got 0'),
    );
    expect(() => resolveOptions(defaults, rules, { timeout: null }, fail)).toThrow(
      'timeout must be a positive integer, got null',
    );
    expect(() => resolveOptions(defaults, rules, { logger: {} }, fail)).toThrow(AreaError);
  });

  it('is what checksFor(...).resolve runs, with the area error', () => {
    expect(() => checksFor(AreaError).resolve(defaults, rules, { size: 1.5 })).toThrow(
      new AreaError('size must be a positive integer, got 1.5'),
    );
  });
});
