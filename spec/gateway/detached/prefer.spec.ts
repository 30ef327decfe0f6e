/** gateway/detached/prefer.ts: how a client asks for a detached call, and what is refused. */
import { describe, expect, it } from 'vitest';
import { parsePreference } from '../../../gateway/detached/prefer.ts';
import { InvalidPreferError } from '../../../gateway/errors.ts';
import { expectThrows } from '../../support/throws.ts';

describe('parsePreference', () => {
  it.each([
    ['no header', undefined, undefined, { detached: false, waitSeconds: undefined }],
    ['respond-async', 'respond-async', undefined, { detached: true, waitSeconds: undefined }],
    [
      'respond-async with wait, any case and spacing',
      ' Respond-Async , WAIT=5 ',
      undefined,
      { detached: true, waitSeconds: 5 },
    ],
    ['a quoted wait', 'respond-async, wait="7"', undefined, { detached: true, waitSeconds: 7 }],
    ['a wait past the longest honoured', 'respond-async, wait=3600', undefined, { detached: true, waitSeconds: 600 }],
    ['wait alone', 'wait=3', undefined, { detached: false, waitSeconds: 3 }],
    [
      'unknown preferences and parameters',
      'return=minimal; x=1, handling=lenient, respond-async;foo',
      undefined,
      { detached: true, waitSeconds: undefined },
    ],
    ['a quoted comma', 'x="a,b", respond-async', undefined, { detached: true, waitSeconds: undefined }],
    ['empty items', ',, respond-async,', undefined, { detached: true, waitSeconds: undefined }],
    [
      'several Prefer lines',
      ['return=minimal', 'respond-async'],
      undefined,
      { detached: true, waitSeconds: undefined },
    ],
    ['the invoke type detached', undefined, 'Detached', { detached: true, waitSeconds: undefined }],
    ['the invoke type sync', undefined, ' sync ', { detached: false, waitSeconds: undefined }],
    ['the first of several invoke types', undefined, ['detached', 'sync'], { detached: true, waitSeconds: undefined }],
  ] as const)('returns the preference of %s', (_label, prefer, invokeType, preference) => {
    expect(
      parsePreference(prefer as string | string[] | undefined, invokeType as string | string[] | undefined),
    ).toEqual(preference);
  });

  it.each([
    ['a malformed name', 'respond async', undefined, 'Prefer header is malformed near "respond async"'],
    ['a wait without a value', 'wait', undefined, 'Prefer wait must be a whole number of seconds, got ""'],
    [
      'a wait that is not a whole number',
      'wait=1.5',
      undefined,
      'Prefer wait must be a whole number of seconds, got "1.5"',
    ],
    ['an unterminated quote', 'x="a, respond-async', undefined, 'Prefer header has an unterminated quoted string'],
    ['an unknown invoke type', undefined, 'later', 'sluice-invoke-type must be sync or detached, got "later"'],
  ] as const)('throws InvalidPreferError for %s', (_label, prefer, invokeType, message) => {
    expectThrows(() => parsePreference(prefer, invokeType), InvalidPreferError, { message });
  });
});
