/**
 * A call's signature: how a runner knows a call came from a gateway that holds the call secret,
 * for this call only, and not after its deadline.
 *
 * The gateway sends {@link DEADLINE_HEADER} (the call's deadline, ms since the epoch on its own
 * clock), {@link BODY_DIGEST_HEADER} (the SHA-256 of the body) and {@link SIGNATURE_HEADER} (`v1=`
 * and the base64url HMAC-SHA256, under the call secret, of {@link canonicalCall}'s string: the
 * call id, method, path with query, deadline and the body's digest). Everything the MAC covers
 * is in the head, so the runner verifies it, in constant time, before it takes a slot or reads a
 * byte of the body; once the body is in, it checks the body against the signed digest. It refuses
 * a call whose deadline passed more than the allowed clock skew ago.
 * So a captured request cannot be spent again under another call id, with another body, on
 * another path, or once its deadline is past. Within its deadline the same request is the same
 * call: the runner refuses a call id it already ran (runner/seen-calls.ts).
 *
 * The call secret is not the runner token: the token lets a node register with a gateway; the
 * call secret lets its holder spend GPU time on every runner that knows it.
 */
import { createHash, createHmac, timingSafeEqual } from 'node:crypto';

/** Request header: the call's deadline, whole ms since the Unix epoch on the gateway's clock. */
export const DEADLINE_HEADER = 'sluice-deadline';
/** Request header: `v1=` and the call's signature in base64url. */
export const SIGNATURE_HEADER = 'sluice-signature';
/** Request header: the body's SHA-256 in lowercase hex ({@link bodyDigest}), which the signature covers. */
export const BODY_DIGEST_HEADER = 'sluice-body-digest';
/** The signature scheme's version prefix. */
const V1 = 'v1=';
/** Bytes of an HMAC-SHA256. */
const MAC_BYTES = 32;

/**
 * The code of a runner's refusal of a call without a gateway's credential: the error body's
 * `code`, and the value of the `sluice-error` header on that 401, so a gateway maps it to its
 * client's error (nothing ran) instead of passing a 401 on as if the client's key were wrong.
 */
export const UNAUTHORIZED_CODE = 'RUNNER_UNAUTHORIZED';

/** The shortest call secret a gateway or a runner accepts. */
export const CALL_SECRET_MIN_LENGTH = 32;
/** The rule a call secret passes, as messages state it (never with the value). */
export const CALL_SECRET_RULE = `a string of at least ${CALL_SECRET_MIN_LENGTH} printable ASCII characters without spaces or commas`;

/** True when `value` is a usable call secret (see {@link CALL_SECRET_RULE}); commas separate secrets in a list. */
export function isCallSecret(value: unknown): value is string {
  return typeof value === 'string' && value.length >= CALL_SECRET_MIN_LENGTH && /^[\x21-\x2b\x2d-\x7e]+$/.test(value);
}

/** What a signature covers. */
export interface SignedCall {
  /** The call id ({@link CALL_ID_HEADER}'s value). */
  callId: string;
  /** The HTTP method, as sent. */
  method: string;
  /** The request target: path and query, as sent. */
  path: string;
  /** The deadline, whole ms since the epoch. */
  deadline: number;
  /** The body's SHA-256, hex ({@link bodyDigest}). */
  bodyDigest: string;
}

/** The body's SHA-256 in hex: computed once per call, however many runners it is offered to. */
export function bodyDigest(body: Uint8Array): string {
  return createHash('sha256').update(body).digest('hex');
}

/** True when `value` is a digest in {@link bodyDigest}'s format: 64 lowercase hex digits. */
export function isBodyDigest(value: string): boolean {
  return /^[0-9a-f]{64}$/.test(value);
}

/** The string a signature is the MAC of: each part on its own line, after the scheme's name. */
export function canonicalCall(call: SignedCall): string {
  return `sluice-call-v1\n${call.callId}\n${call.method.toUpperCase()}\n${call.path}\n${call.deadline}\n${call.bodyDigest}`;
}

/** The {@link SIGNATURE_HEADER} value for `call` under `secret`. */
export function signCall(secret: string, call: SignedCall): string {
  return V1 + createHmac('sha256', secret).update(canonicalCall(call)).digest('base64url');
}

/** Why a runner refused a call's credential; each is counted and logged by name. */
export type CallRefusal =
  /** No signature, or no deadline, on the request. */
  | 'unsigned'
  /** A signature or deadline that is not in the wire's format. */
  | 'malformed'
  /** The deadline passed more than the allowed skew ago: a replay, or a call held too long. */
  | 'expired'
  /** The MAC does not match under any of the runner's secrets: another secret, or an altered call. */
  | 'mismatch'
  /** The head's signature verified, but the body that came is not the one whose digest it signed. */
  | 'altered-body';

/** A verification's outcome. */
export type CallVerdict = { kind: 'verified' } | { kind: 'refused'; reason: CallRefusal };

/** The headers-only half of a verification, before the body is read: the parsed values. */
export type CallCredential =
  | { kind: 'present'; mac: Buffer; deadline: number }
  | { kind: 'refused'; reason: CallRefusal };

/**
 * Reads a call's credential headers: both there, in the wire's format, and the deadline not past
 * by more than `skew` ms at `now` (ms since the epoch). The MAC is then checked by
 * {@link verifyCall}.
 */
export function readCallCredential(
  signature: string | undefined,
  deadline: string | undefined,
  now: number,
  skew: number,
): CallCredential {
  if (signature === undefined || deadline === undefined) return { kind: 'refused', reason: 'unsigned' };
  if (!signature.startsWith(V1) || !/^\d{1,16}$/.test(deadline)) return { kind: 'refused', reason: 'malformed' };
  const mac = Buffer.from(signature.slice(V1.length), 'base64url');
  // base64url decoding skips what it cannot read; a MAC of the wrong length is no MAC.
  if (mac.length !== MAC_BYTES) return { kind: 'refused', reason: 'malformed' };
  const at = Number(deadline);
  if (now > at + skew) return { kind: 'refused', reason: 'expired' };
  return { kind: 'present', mac, deadline: at };
}

/**
 * Verifies a credential read by {@link readCallCredential} against the call as received, under
 * any of `secrets` (several during a rotation: the new one and the old), comparing MACs in
 * constant time.
 */
export function verifyCall(
  secrets: readonly string[],
  credential: { mac: Buffer; deadline: number },
  call: Omit<SignedCall, 'deadline'>,
): CallVerdict {
  const text = canonicalCall({ ...call, deadline: credential.deadline });
  let match = false;
  // Every secret is tried, matched or not, so the time taken does not say which one matched.
  for (const secret of secrets) {
    const expected = createHmac('sha256', secret).update(text).digest();
    if (timingSafeEqual(expected, credential.mac)) match = true;
  }
  return match ? { kind: 'verified' } : { kind: 'refused', reason: 'mismatch' };
}
