import { describe, expect, it } from 'vitest';
import { expectThrows, thrownBy } from './throws.ts';

class CodedError extends Error {
  readonly code = 'X_CODE';
}

describe('thrownBy', () => {
  it('returns what the call throws', () => {
    const error = new CodedError('bad');
    expect(
      thrownBy(() => {
        throw error;
      }),
    ).toBe(error);
  });

  it('fails the test when the call returns', () => {
    expect(() => thrownBy(() => 1)).toThrow('expected a throw, but the call returned');
  });
});

describe('expectThrows', () => {
  const run = (): never => {
    throw new CodedError('size must be a positive integer, got 0');
  };

  it('returns the error when its class and fields match', () => {
    expect(expectThrows(run, CodedError, { code: 'X_CODE', message: expect.stringContaining('got 0') })).toBeInstanceOf(
      CodedError,
    );
  });

  it('fails on another class, another field or another message', () => {
    expect(() => expectThrows(run, TypeError, {})).toThrow();
    expect(() => expectThrows(run, CodedError, { code: 'Y_CODE' })).toThrow();
    expect(() => expectThrows(run, CodedError, { message: 'size must be a positive integer' })).toThrow();
  });
});
