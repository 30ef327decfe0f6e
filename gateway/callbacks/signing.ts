/**
 * Standard Webhooks signing (https://www.standardwebhooks.com): the sender signs
 * `${id}.${timestamp}.${body}` with HMAC-SHA256 keyed by the secret's decoded bytes and sends
 * `webhook-signature: v1,<base64>`. Receivers check the signature and reject stale timestamps,
 * so a captured delivery cannot be replayed later. The id stays the same across retries so a
 * receiver can drop duplicates.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { CallbackSecretError } from './errors.ts';

/** The header names Standard Webhooks uses, lowercase as HTTP/2 and Node's parser give them. */
export const WEBHOOK_HEADERS = Object.freeze({
  id: 'webhook-id',
  timestamp: 'webhook-timestamp',
  signature: 'webhook-signature',
} as const);

const PREFIX = 'whsec_';
// Standard Webhooks asks for 24 to 64 random bytes: shorter keys are guessable, longer buy nothing.
const MIN_KEY_BYTES = 24;
const MAX_KEY_BYTES = 64;
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/**
 * Decodes a `whsec_<base64>` secret into its key bytes.
 * @throws {@link CallbackSecretError} (`CALLBACK_INVALID_SECRET`) naming what is wrong, never the secret.
 */
export function parseWebhookSecret(secret: string): Buffer {
  if (typeof secret !== 'string')
    throw new CallbackSecretError(`webhook secret must be a string, got ${typeof secret}`);
  if (!secret.startsWith(PREFIX)) throw new CallbackSecretError(`webhook secret must start with "${PREFIX}"`);
  const encoded = secret.slice(PREFIX.length);
  if (!BASE64.test(encoded))
    throw new CallbackSecretError(`webhook secret must be standard padded base64 after "${PREFIX}"`);
  const key = Buffer.from(encoded, 'base64');
  if (key.length < MIN_KEY_BYTES || key.length > MAX_KEY_BYTES) {
    throw new CallbackSecretError(
      `webhook secret must decode to ${MIN_KEY_BYTES} to ${MAX_KEY_BYTES} bytes, got ${key.length}`,
    );
  }
  return key;
}

/** A fresh secret: 32 random bytes, `whsec_`-prefixed base64, for config and tests. */
export function generateWebhookSecret(): string {
  return PREFIX + randomBytes(32).toString('base64');
}

/** What {@link signWebhook} signs. */
export interface WebhookSignInput {
  /** The message id sent as `webhook-id`; the same on every retry. */
  id: string;
  /** Seconds since the epoch, sent as `webhook-timestamp`. */
  timestamp: number;
  /** The exact bytes sent as the body: a re-serialised object would not match. */
  body: string | Buffer;
  /** `whsec_`-prefixed base64 secret. */
  secret: string;
}

/**
 * Signs one delivery attempt; returns the `webhook-signature` value `v1,<base64>`.
 * @throws TypeError for an empty id or a timestamp that is not a non-negative integer;
 *   {@link CallbackSecretError} for a malformed secret.
 */
export function signWebhook({ id, timestamp, body, secret }: WebhookSignInput): string {
  if (typeof id !== 'string' || id === '') throw new TypeError('webhook id must be a non-empty string');
  if (!Number.isSafeInteger(timestamp) || timestamp < 0) {
    throw new TypeError(`webhook timestamp must be a non-negative integer of seconds, got ${String(timestamp)}`);
  }
  return `v1,${digest(parseWebhookSecret(secret), id, timestamp, body).toString('base64')}`;
}

/** Headers as Node's `req.headers` or a fetch `Headers` give them. */
export type WebhookHeaders = Headers | Readonly<Record<string, string | readonly string[] | undefined>>;

/** What {@link verifyWebhook} checks. */
export interface WebhookVerifyInput {
  headers: WebhookHeaders;
  /** The raw body as received, before any JSON parsing. */
  body: string | Buffer;
  /** `whsec_`-prefixed base64 secret. */
  secret: string;
  /** Largest accepted distance between the timestamp and now, in seconds. @default 300 */
  toleranceSec?: number;
  /**
   * Now, in ms since the epoch. @default Date.now(): the timestamp a webhook carries is the
   * sender's wall clock, so the receiver's wall clock is what it is checked against.
   */
  now?: number;
}

/** Why a delivery failed verification. */
export type WebhookRejection = 'missing-header' | 'invalid-timestamp' | 'too-old' | 'too-new' | 'no-matching-signature';

/** The outcome of {@link verifyWebhook}. */
export type WebhookVerification =
  | { kind: 'verified'; id: string; timestamp: number }
  | { kind: 'rejected'; reason: WebhookRejection; message: string };

/**
 * Verifies a received delivery the way a Standard Webhooks receiver does: all three headers
 * present, the timestamp within `toleranceSec` of now in either direction, and one of the
 * space-separated `v1,` signatures matching (compared in constant time).
 * @throws {@link CallbackSecretError} for a malformed secret: that is the receiver's bug, not the sender's.
 */
export function verifyWebhook({
  headers,
  body,
  secret,
  toleranceSec = 300,
  now = Date.now(),
}: WebhookVerifyInput): WebhookVerification {
  const key = parseWebhookSecret(secret);
  const id = header(headers, WEBHOOK_HEADERS.id);
  const stamp = header(headers, WEBHOOK_HEADERS.timestamp);
  const signatures = header(headers, WEBHOOK_HEADERS.signature);
  if (!id || !stamp || !signatures)
    return reject('missing-header', 'webhook-id, webhook-timestamp and webhook-signature are required');
  if (!/^\d{1,15}$/.test(stamp)) return reject('invalid-timestamp', 'webhook-timestamp must be integer seconds');
  const timestamp = Number(stamp);
  const nowSec = Math.floor(now / 1000);
  if (timestamp < nowSec - toleranceSec)
    return reject('too-old', `webhook-timestamp is more than ${toleranceSec} s old`);
  if (timestamp > nowSec + toleranceSec)
    return reject('too-new', `webhook-timestamp is more than ${toleranceSec} s in the future`);
  const expected = digest(key, id, timestamp, body);
  for (const entry of signatures.split(' ')) {
    const comma = entry.indexOf(',');
    // Other versions (v1a is asymmetric) may sit beside v1; they are not ours to check.
    if (comma < 0 || entry.slice(0, comma) !== 'v1') continue;
    const given = Buffer.from(entry.slice(comma + 1), 'base64');
    // timingSafeEqual throws on a length mismatch; the length of an HMAC is no secret.
    if (given.length === expected.length && timingSafeEqual(given, expected))
      return { kind: 'verified', id, timestamp };
  }
  return reject('no-matching-signature', 'no v1 signature in webhook-signature matches');
}

function digest(key: Buffer, id: string, timestamp: number, body: string | Buffer): Buffer {
  // Fed in two parts so a binary body is signed as the bytes sent, never re-encoded as text.
  return createHmac('sha256', key).update(`${id}.${timestamp}.`).update(body).digest();
}

function header(headers: WebhookHeaders, name: string): string | undefined {
  if (typeof (headers as Headers).get === 'function') return (headers as Headers).get(name) ?? undefined;
  const record = headers as Readonly<Record<string, string | readonly string[] | undefined>>;
  let value = record[name];
  if (value === undefined) {
    const key = Object.keys(record).find((k) => k.toLowerCase() === name);
    value = key === undefined ? undefined : record[key];
  }
  return typeof value === 'string' ? value : value?.join(' ');
}

function reject(reason: WebhookRejection, message: string): WebhookVerification {
  return { kind: 'rejected', reason, message };
}
