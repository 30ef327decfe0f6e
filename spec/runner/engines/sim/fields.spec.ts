/** runner/engines/sim/fields.ts: optional request fields read as vLLM's schema reads them. */
import { describe, expect, it } from 'vitest';
import { optionalBoolean, optionalChoice, optionalInteger } from '../../../../runner/engines/sim/fields.ts';

/** The pydantic error type a refusal names, or 'ok'. */
function verdict(result: { kind: 'ok' } | { kind: 'bad'; error: { message: string; param?: string } }): string {
  if (result.kind === 'ok') return 'ok';
  return /'type': '([a-z_]+)'/.exec(result.error.message)?.[1] ?? result.error.message;
}

describe('optionalInteger', () => {
  it.each([
    [undefined, 'ok'],
    [null, 'ok'],
    [3, 'ok'],
    [-2, 'ok'],
    [1.5, 'int_from_float'],
    ['3', 'int_type'],
    [true, 'int_type'],
    [Number.POSITIVE_INFINITY, 'int_type'],
  ])('reads %j as %s', (input, expected) => {
    expect(verdict(optionalInteger({ n: input }, 'n'))).toBe(expected);
  });

  it('returns the value, and undefined for null, and names the field in a refusal', () => {
    expect(optionalInteger({ n: 4 }, 'n')).toEqual({ kind: 'ok', value: 4 });
    expect(optionalInteger({ n: null }, 'n')).toEqual({ kind: 'ok', value: undefined });
    const refused = optionalInteger({ n: 'x' }, 'n');
    expect(refused.kind === 'bad' && refused.error).toMatchObject({ status: 400, param: 'body.n' });
  });
});

describe('optionalBoolean', () => {
  it.each([
    [undefined, 'ok'],
    [null, 'ok'],
    [false, 'ok'],
    [0, 'bool_type'],
    ['true', 'bool_type'],
  ])('reads %j as %s', (input, expected) => {
    expect(verdict(optionalBoolean({ b: input }, 'b'))).toBe(expected);
  });
});

describe('optionalChoice', () => {
  it("returns a listed choice and refuses any other value in pydantic's words", () => {
    expect(optionalChoice({ f: 'float' }, 'f', ['float', 'base64'])).toEqual({ kind: 'ok', value: 'float' });
    expect(optionalChoice({}, 'f', ['float', 'base64'])).toEqual({ kind: 'ok', value: undefined });
    const refused = optionalChoice({ f: 'hex' }, 'f', ['float', 'base64', 'int8']);
    expect(verdict(refused)).toBe('literal_error');
    expect(refused.kind === 'bad' && refused.error.message).toContain("Input should be 'float', 'base64' or 'int8'");
    const one = optionalChoice({ f: 1 }, 'f', ['float']);
    expect(one.kind === 'bad' && one.error.message).toContain("Input should be 'float'");
  });
});
