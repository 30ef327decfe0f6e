/**
 * Standard Webhooks signing: a vector computed here with node:crypto directly (not through the
 * module), the published example from the Standard Webhooks spec, and every tampering a
 * receiver must catch.
 */
import { createHmac } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import {
  CallbackSecretError,
  generateWebhookSecret,
  parseWebhookSecret,
  signWebhook,
  verifyWebhook,
} from '../../../gateway/callbacks/index.ts';
import { expectThrows } from '../../support/throws.ts';

const KEY = Buffer.from('0123456789abcdef0123456789abcdef'); // 32 bytes
const SECRET = `whsec_${KEY.toString('base64')}`;
const ID = 'call_2kq9f';
const TS = 1_790_000_000;
const BODY = '{"id":"call_2kq9f","status":"succeeded"}';
const NOW = TS * 1000 + 1500;

/** The signature computed from the spec's recipe, independently of the module. */
function expected(key: Buffer, id: string, ts: number, body: string): string {
  return `v1,${createHmac('sha256', key).update(`${id}.${ts}.${body}`).digest('base64')}`;
}

function headersFor(signature: string, id = ID, ts = TS): Record<string, string> {
  return { 'webhook-id': id, 'webhook-timestamp': String(ts), 'webhook-signature': signature };
}

describe('signWebhook', () => {
  it('returns v1,<base64 HMAC-SHA256 of id.timestamp.body> keyed with the decoded secret', () => {
    expect(signWebhook({ id: ID, timestamp: TS, body: BODY, secret: SECRET })).toBe(expected(KEY, ID, TS, BODY));
  });

  it('returns the same signature for a Buffer body as for its text', () => {
    expect(signWebhook({ id: ID, timestamp: TS, body: Buffer.from(BODY), secret: SECRET })).toBe(
      expected(KEY, ID, TS, BODY),
    );
  });

  it('matches the example published with the Standard Webhooks spec', () => {
    const signature = signWebhook({
      id: 'msg_p5jXN8AQM9LWM0D4loKWxJek',
      timestamp: 1614265330,
      body: '{"test": 2432232314}',
      secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
    });
    expect(signature).toBe('v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=');
  });

  it('throws a TypeError when the timestamp is not integer seconds or the id is empty', () => {
    expect(() => signWebhook({ id: ID, timestamp: 1.5, body: BODY, secret: SECRET })).toThrow(TypeError);
    expect(() => signWebhook({ id: '', timestamp: TS, body: BODY, secret: SECRET })).toThrow(TypeError);
  });
});

describe('parseWebhookSecret', () => {
  it('returns the decoded key bytes', () => {
    expect(parseWebhookSecret(SECRET).equals(KEY)).toBe(true);
  });

  it.each([
    ['without the whsec_ prefix', KEY.toString('base64'), /start with "whsec_"/],
    ['with non-base64 text', 'whsec_not base64!!', /base64/],
    ['with unpadded base64', `whsec_${KEY.toString('base64').replace(/=+$/, '')}`, /padded base64/],
    ['with a key under 24 bytes', `whsec_${Buffer.alloc(16, 1).toString('base64')}`, /24 to 64 bytes, got 16/],
    ['with a key over 64 bytes', `whsec_${Buffer.alloc(65, 1).toString('base64')}`, /got 65/],
    ['that is empty after the prefix', 'whsec_', /got 0/],
  ])('throws CALLBACK_INVALID_SECRET for a secret %s, without echoing it', (_, secret, message) => {
    const error = expectThrows(() => parseWebhookSecret(secret), CallbackSecretError, {
      code: 'CALLBACK_INVALID_SECRET',
      message: expect.stringMatching(message),
    });
    if (secret.length > 6) expect(error.message).not.toContain(secret.slice(6));
  });
});

describe('generateWebhookSecret', () => {
  it('returns a fresh whsec_ secret of 32 bytes that signs and verifies', () => {
    const a = generateWebhookSecret();
    const b = generateWebhookSecret();
    expect(a).not.toBe(b);
    expect(parseWebhookSecret(a)).toHaveLength(32);
    const signature = signWebhook({ id: ID, timestamp: TS, body: BODY, secret: a });
    expect(verifyWebhook({ headers: headersFor(signature), body: BODY, secret: a, now: NOW }).kind).toBe('verified');
  });
});

describe('verifyWebhook', () => {
  const good = expected(KEY, ID, TS, BODY);
  const verify = (over: Partial<Parameters<typeof verifyWebhook>[0]> = {}) =>
    verifyWebhook({ headers: headersFor(good), body: BODY, secret: SECRET, now: NOW, ...over });

  it('returns verified with the id and timestamp for an untouched delivery', () => {
    expect(verify()).toEqual({ kind: 'verified', id: ID, timestamp: TS });
  });

  it('accepts fetch Headers, mixed-case keys and a matching signature among several', () => {
    const several = `v1a,c29tZXRoaW5nIGVsc2U= v1,${Buffer.alloc(32).toString('base64')} ${good}`;
    expect(verify({ headers: new Headers(headersFor(several)) }).kind).toBe('verified');
    expect(
      verify({ headers: { 'Webhook-Id': ID, 'Webhook-Timestamp': String(TS), 'Webhook-Signature': good } }).kind,
    ).toBe('verified');
  });

  it.each([
    ['the body changed', { body: BODY.replace('succeeded', 'failed') }, 'no-matching-signature'],
    ['the body gained a byte', { body: `${BODY} ` }, 'no-matching-signature'],
    ['the id changed', { headers: headersFor(good, 'call_other') }, 'no-matching-signature'],
    ['the timestamp changed', { headers: headersFor(good, ID, TS + 1) }, 'no-matching-signature'],
    ['the secret differs', { secret: `whsec_${Buffer.alloc(32, 7).toString('base64')}` }, 'no-matching-signature'],
    ['the signature is truncated', { headers: headersFor(good.slice(0, -4)) }, 'no-matching-signature'],
    ['the signature has another version', { headers: headersFor(good.replace('v1,', 'v2,')) }, 'no-matching-signature'],
    ['the timestamp is 301 s old', { now: (TS + 301) * 1000 }, 'too-old'],
    ['the timestamp is 301 s ahead', { now: (TS - 301) * 1000 }, 'too-new'],
    ['the timestamp is 61 s old with a 60 s tolerance', { now: (TS + 61) * 1000, toleranceSec: 60 }, 'too-old'],
    [
      'the timestamp is not a number',
      { headers: { ...headersFor(good), 'webhook-timestamp': '17e8' } },
      'invalid-timestamp',
    ],
    [
      'the signature header is missing',
      { headers: { 'webhook-id': ID, 'webhook-timestamp': String(TS) } },
      'missing-header',
    ],
    ['the id header is empty', { headers: headersFor(good, '') }, 'missing-header'],
  ])('rejects when %s', (_, over, reason) => {
    const result = verify(over);
    expect(result).toMatchObject({ kind: 'rejected', reason });
  });

  it('accepts a timestamp exactly at the tolerance edge', () => {
    expect(verify({ now: (TS + 300) * 1000 }).kind).toBe('verified');
    expect(verify({ now: (TS - 300) * 1000 }).kind).toBe('verified');
  });

  it('throws CALLBACK_INVALID_SECRET when the receiver is configured with a malformed secret', () => {
    expect(() => verify({ secret: 'nope' })).toThrow(CallbackSecretError);
  });
});
