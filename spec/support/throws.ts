/**
 * What a spec needs to look at an error closely: the "rejects a bad option" tables of several
 * specs check the class, the code, the option and the message of what a call throws, and each
 * wrote its own try/catch for it.
 */
import { expect } from 'vitest';

/** What `run` throws; the test fails when it returns instead. */
export function thrownBy(run: () => unknown): unknown {
  try {
    run();
  } catch (error) {
    return error;
  }
  return expect.unreachable('expected a throw, but the call returned');
}

/**
 * Asserts that `run` throws an `ErrorClass` whose fields match `fields` (as toMatchObject does:
 * `message` may be a string or an asymmetric matcher such as `expect.stringMatching(/got 0/)`),
 * and returns it for further checks.
 */
export function expectThrows<E>(
  run: () => unknown,
  ErrorClass: abstract new (...args: never[]) => E,
  fields: Record<string, unknown>,
): E {
  const error = thrownBy(run);
  expect(error).toBeInstanceOf(ErrorClass);
  expect(error).toMatchObject(fields);
  return error as E;
}
