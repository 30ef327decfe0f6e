/** gateway/fleet/transport-failure.ts: what a failed request to a runner says, from undici's errors. */
import { errors } from 'undici';
import { describe, expect, it } from 'vitest';
import { isSilence, transportFailure } from '../../../gateway/fleet/transport-failure.ts';
import type { TransportFailure } from '../../../gateway/fleet/transport-failure.ts';

/** An Error carrying a Node/undici style `code`. */
function coded(code: string, options?: { cause?: unknown }): Error {
  return Object.assign(new Error(`failed with ${code}`, options), { code });
}

describe('transportFailure', () => {
  it.each([
    ['undici refusing the request', new errors.InvalidArgumentError('invalid header'), 'unsendable'],
    ['a method undici does not support', new errors.NotSupportedError('upgrade'), 'unsendable'],
    ['a pool closed here', new errors.ClientClosedError(), 'closed-here'],
    ['a pool destroyed here', new errors.ClientDestroyedError(), 'closed-here'],
    ['a connect timeout', new errors.ConnectTimeoutError(), 'unconnected'],
    ['a refused connection', coded('ECONNREFUSED'), 'unconnected'],
    [
      'a refused connection wrapped by undici',
      coded('UND_ERR_SOCKET', { cause: coded('ECONNREFUSED') }),
      'unconnected',
    ],
    ['no status line within the bound', new errors.HeadersTimeoutError(), 'no-answer'],
    ['a body silent past its bound', new errors.BodyTimeoutError(), 'body-silent'],
    ['an aborted request', new errors.RequestAbortedError(), 'aborted'],
    ['an AbortError of the platform', new DOMException('stopped', 'AbortError'), 'aborted'],
    ['a reset mid-answer', new errors.SocketError('other side closed'), 'other'],
    ['a reset', coded('ECONNRESET'), 'other'],
    ['an error without a code', new Error('x'), 'other'],
    ['undefined', undefined, 'other'],
    ['null', null, 'other'],
  ] as const)('returns the failure of %s', (_label, error, failure) => {
    expect(transportFailure(error)).toBe(failure);
  });

  it('reads an error by its own code before looking into its cause', () => {
    expect(transportFailure(coded('UND_ERR_CLOSED', { cause: coded('ECONNREFUSED') }))).toBe('closed-here');
  });
});

describe('isSilence', () => {
  it.each([
    ['no-answer', true],
    ['body-silent', true],
    ['unsendable', false],
    ['closed-here', false],
    ['unconnected', false],
    ['aborted', false],
    ['other', false],
  ] as const)('returns for %s: %s', (failure: TransportFailure, silent) => {
    expect(isSilence(failure)).toBe(silent);
  });
});
