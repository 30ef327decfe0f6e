import { describe, expect, it } from 'vitest';
import { SluiceError, errorClass } from '../../../placer/kernel/index.ts';
import type { ErrorType, SluiceErrorOptions } from '../../../placer/kernel/index.ts';

class NotFound extends errorClass('TEST_NOT_FOUND', 404, 'not_found_error') {}
class Gone extends errorClass('TEST_GONE', 410, 'invalid_request_error') {}

class Counted extends errorClass('TEST_COUNTED', 503, 'service_unavailable_error') {
  readonly attempts: number;
  constructor(attempts: number) {
    super(`gave up after ${attempts} attempts`);
    this.attempts = attempts;
  }
}

/** An area's own base, as GatewayError is: SluiceError's constructor plus a field of its own. */
class AreaError extends SluiceError {
  readonly hint: string;
  constructor(
    code: string,
    status: number,
    type: ErrorType,
    message: string,
    options?: SluiceErrorOptions & { hint?: string },
  ) {
    super(code, status, type, message, options);
    this.hint = options?.hint ?? 'none';
  }
}
class AreaRefused extends errorClass('AREA_REFUSED', 400, 'invalid_request_error', AreaError) {}

describe('errorClass', () => {
  it('makes a class whose instances carry its code, status, type, message and name', () => {
    const error = new NotFound('no such thing');
    expect(error).toMatchObject({
      code: 'TEST_NOT_FOUND',
      status: 404,
      type: 'not_found_error',
      message: 'no such thing',
      name: 'NotFound',
    });
    expect(error.stack).toContain('NotFound: no such thing');
  });

  it('keeps instanceof per class: each its own, all SluiceErrors and Errors', () => {
    const error = new NotFound('x');
    expect(error).toBeInstanceOf(NotFound);
    expect(error).toBeInstanceOf(SluiceError);
    expect(error).toBeInstanceOf(Error);
    expect(error).not.toBeInstanceOf(Gone);
    expect(new Gone('x')).not.toBeInstanceOf(NotFound);
  });

  it('passes the cause on, and sets none when none is given', () => {
    const cause = new RangeError('too far');
    expect(new NotFound('wrapped', { cause }).cause).toBe(cause);
    expect(Object.hasOwn(new NotFound('plain'), 'cause')).toBe(false);
  });

  it('lets a class add fields and build its own message', () => {
    const error = new Counted(3);
    expect(error).toMatchObject({
      code: 'TEST_COUNTED',
      status: 503,
      attempts: 3,
      message: 'gave up after 3 attempts',
      name: 'Counted',
    });
  });

  it("extends an area's base, with that base's options and fields", () => {
    const error = new AreaRefused('refused', { hint: 'try later' });
    expect(error).toBeInstanceOf(AreaError);
    expect(error).toMatchObject({ code: 'AREA_REFUSED', status: 400, hint: 'try later', name: 'AreaRefused' });
    expect(new AreaRefused('refused').hint).toBe('none');
  });
});
