/**
 * Sender options: defaults are validated up front, each message names the option and the bad
 * value, and the secret is checked at startup rather than at the first finished call.
 */
import { describe, expect, it } from 'vitest';
import { createCallbackPolicy, createCallbackSender, generateWebhookSecret } from '../../../gateway/callbacks/index.ts';
import type { CallbackSenderOptions } from '../../../gateway/callbacks/index.ts';
import { resolveSenderOptions } from '../../../gateway/callbacks/options.ts';

const SECRET = generateWebhookSecret();

describe('createCallbackSender options', () => {
  const policy = createCallbackPolicy({ allow: [] });
  it.each([
    ['attempts 0', { attempts: 0 }, /attempts must be a positive integer, got 0/],
    ['attempts 2.5', { attempts: 2.5 }, /attempts must be a positive integer, got 2.5/],
    ['attempts 21', { attempts: 21 }, /attempts must be at most 20, got 21/],
    ['a negative backoffBase', { backoffBase: -1 }, /backoffBase must be a non-negative integer/],
    [
      'backoffCap below backoffBase',
      { backoffBase: 5000, backoffCap: 1000 },
      /backoffCap must be at least backoffBase \(5000 ms\), got 1000/,
    ],
    ['timeout 0', { timeout: 0 }, /timeout must be a positive integer/],
    ['no policy', { policy: undefined }, /policy must be a CallbackPolicy/],
  ])('refuses %s with CALLBACK_INVALID_OPTION', (_, over, message) => {
    expect(() => createCallbackSender({ secret: SECRET, policy, ...over } as CallbackSenderOptions)).toThrow(message);
    expect(() => createCallbackSender({ secret: SECRET, policy, ...over } as CallbackSenderOptions)).toThrow(
      expect.objectContaining({ code: 'CALLBACK_INVALID_OPTION' }),
    );
  });

  it('refuses a malformed secret with CALLBACK_INVALID_SECRET', () => {
    expect(() => createCallbackSender({ secret: 'secret', policy })).toThrow(
      expect.objectContaining({ code: 'CALLBACK_INVALID_SECRET' }),
    );
  });
});

describe('resolveSenderOptions', () => {
  it('applies the documented defaults and freezes the result', () => {
    const config = resolveSenderOptions({ secret: SECRET, policy: createCallbackPolicy({ allow: [] }) });
    expect(config).toMatchObject({ attempts: 5, backoffBase: 1000, backoffCap: 60_000, timeout: 10_000 });
    expect(Object.isFrozen(config)).toBe(true);
  });
});
