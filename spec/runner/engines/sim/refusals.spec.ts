/** runner/engines/sim/refusals.ts: the simulator's error answers, named and worded as vLLM's. */
import { describe, expect, it } from 'vitest';
import {
  badRequest,
  internalError,
  invalidBody,
  notFound,
  refusal,
  schemaError,
} from '../../../../runner/engines/sim/refusals.ts';

/** The `input` a schema error echoes for `value`. */
const echoed = (value: unknown): string =>
  /'input': (.*)\}$/s.exec(schemaError({ field: 'x', kind: 'k', msg: 'm', input: value }).message)![1]!;

describe('vLLM error classes', () => {
  it.each([
    [
      'badRequest with a param',
      badRequest('n must be at least 1', 'n'),
      400,
      'BadRequestError',
      'n must be at least 1',
      'n',
    ],
    ['badRequest without one', badRequest('no'), 400, 'BadRequestError', 'no', undefined],
    ['notFound with a param', notFound('no such model', 'model'), 404, 'NotFoundError', 'no such model', 'model'],
    ['internalError', internalError('boom'), 500, 'InternalServerError', 'boom', undefined],
  ])('returns %s with its status and type, and param only when given', (_name, error, status, type, message, param) => {
    expect(error).toEqual({ status, type, message, ...(param === undefined ? {} : { param }) });
  });

  it('returns other statuses typed by their HTTP phrase', () => {
    expect(refusal(503, 'loading').type).toBe('Service Unavailable');
    expect(refusal(429, 'full').type).toBe('Too Many Requests');
    expect(refusal(418, 'teapot').type).toBe('HTTP 418');
  });
});

describe('schemaError', () => {
  it("returns pydantic's wording, the dotted location as param", () => {
    expect(
      schemaError({
        field: 'stream_options.include_usage',
        kind: 'bool_type',
        msg: 'Input should be a valid boolean',
        input: 'yes',
      }),
    ).toEqual({
      status: 400,
      type: 'Bad Request',
      message:
        "1 validation error:\n  {'type': 'bool_type', 'loc': ('body', 'stream_options', 'include_usage'), 'msg': 'Input should be a valid boolean', 'input': 'yes'}",
      param: 'body.stream_options.include_usage',
    });
  });

  it('returns the body as the location and param for the body as a whole, or the param it is given', () => {
    const whole = invalidBody('json_invalid', 'JSON decode error', '{');
    expect(whole.message).toContain("'loc': ('body',)");
    expect(whole.param).toBe('body');
    expect(schemaError({ field: 'n', kind: 'k', msg: 'm', input: 1, param: 'best_of' }).param).toBe('best_of');
  });

  it.each([
    [null, 'None'],
    [undefined, 'None'],
    [true, 'True'],
    [false, 'False'],
    [1.5, '1.5'],
    [Number.POSITIVE_INFINITY, 'inf'],
    [Number.NEGATIVE_INFINITY, '-inf'],
    [Number.NaN, 'nan'],
    [[1, 2, 3], '<list of 3 items>'],
    [{ a: 1, b: 2 }, '<dict of 2 items>'],
    ["it's", '"it\'s"'],
    ['say "it\'s"', "'say \"it\\'s\"'"],
    ['a\nb\tc\\d\x01', "'a\\nb\\tc\\\\d\\x01'"],
  ])("echoes %j as Python's repr would: %s", (value, repr) => {
    expect(echoed(value)).toBe(repr);
  });

  it('echoes at most 200 characters of a long string', () => {
    expect(echoed('x'.repeat(500))).toBe(`'${'x'.repeat(200)}...[truncated]'`);
  });
});
