import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import {
  CALL_SECRET_MIN_LENGTH,
  bodyDigest,
  canonicalCall,
  isCallSecret,
  readCallCredential,
  signCall,
  verifyCall,
} from '../../../runner/protocol/index.ts';
import type { SignedCall } from '../../../runner/protocol/index.ts';

const SECRET = 'call-secret-0123456789abcdef-0123456789';
const OTHER = 'call-secret-fedcba9876543210-9876543210';
const NOW = 1_800_000_000_000;
const SKEW = 30_000;

const body = Buffer.from('{"model":"m","messages":[{"role":"user","content":"hi"}]}');
const call: SignedCall = {
  callId: '0190d2a8-0000-7000-8000-000000000001',
  method: 'POST',
  path: '/v1/chat/completions',
  deadline: NOW + 60_000,
  bodyDigest: bodyDigest(body),
};

/** Reads and verifies a signature as a runner does, at `now`. */
function check(
  signature: string | undefined,
  received: Omit<SignedCall, 'deadline'> & { deadline: string | undefined },
  now = NOW,
  secrets = [SECRET],
) {
  const credential = readCallCredential(signature, received.deadline, now, SKEW);
  if (credential.kind === 'refused') return credential;
  return verifyCall(secrets, credential, received);
}

const asReceived = (c: SignedCall) => ({ ...c, deadline: String(c.deadline) });

describe('call signatures', () => {
  it('verifies a call signed with the secret, as received', () => {
    expect(check(signCall(SECRET, call), asReceived(call))).toEqual({ kind: 'verified' });
  });

  it('digests the body with SHA-256, in hex', () => {
    expect(bodyDigest(body)).toBe(createHash('sha256').update(body).digest('hex'));
    expect(bodyDigest(Buffer.alloc(0))).toBe('e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855');
  });

  it('puts every covered part in the canonical string, each on its own line', () => {
    expect(canonicalCall({ ...call, method: 'post' }).split('\n')).toEqual([
      'sluice-call-v1',
      call.callId,
      'POST',
      call.path,
      String(call.deadline),
      call.bodyDigest,
    ]);
  });

  it.each([
    ['another call id', { callId: '0190d2a8-0000-7000-8000-000000000002' }],
    ['another body', { bodyDigest: bodyDigest(Buffer.from('{"model":"m","messages":[]}')) }],
    ['another path', { path: '/v1/completions' }],
    ['a query added to the path', { path: '/v1/chat/completions?x=1' }],
    ['another method', { method: 'PUT' }],
    ['a later deadline', { deadline: call.deadline + 1 }],
  ] as const)('refuses a signed call replayed with %s', (_name, change) => {
    const signature = signCall(SECRET, call);
    expect(check(signature, asReceived({ ...call, ...change }))).toEqual({ kind: 'refused', reason: 'mismatch' });
  });

  it('refuses a call signed with another secret', () => {
    expect(check(signCall(OTHER, call), asReceived(call))).toEqual({ kind: 'refused', reason: 'mismatch' });
  });

  it('verifies under any of several secrets, for a rotation', () => {
    expect(check(signCall(OTHER, call), asReceived(call), NOW, [SECRET, OTHER])).toEqual({ kind: 'verified' });
    expect(check(signCall(SECRET, call), asReceived(call), NOW, [OTHER, SECRET])).toEqual({ kind: 'verified' });
    expect(check(signCall(SECRET, call), asReceived(call), NOW, [OTHER])).toEqual({
      kind: 'refused',
      reason: 'mismatch',
    });
  });

  it('takes a call up to the allowed skew past its deadline, and refuses it after', () => {
    const signature = signCall(SECRET, call);
    expect(check(signature, asReceived(call), call.deadline + SKEW)).toEqual({ kind: 'verified' });
    expect(check(signature, asReceived(call), call.deadline + SKEW + 1)).toEqual({
      kind: 'refused',
      reason: 'expired',
    });
  });

  it('refuses a call without a signature or a deadline', () => {
    expect(check(undefined, asReceived(call))).toEqual({ kind: 'refused', reason: 'unsigned' });
    expect(check(signCall(SECRET, call), { ...call, deadline: undefined })).toEqual({
      kind: 'refused',
      reason: 'unsigned',
    });
  });

  it.each([
    ['another scheme', (s: string) => s.replace('v1=', 'v2=')],
    ['a truncated MAC', (s: string) => s.slice(0, -4)],
    ['a MAC with bytes added', (s: string) => `${s}AAAA`],
    ['no MAC', () => 'v1='],
  ])('refuses a signature with %s as malformed', (_name, change) => {
    expect(check(change(signCall(SECRET, call)), asReceived(call))).toEqual({ kind: 'refused', reason: 'malformed' });
  });

  it.each(['-1', '1.5', 'soon', '', '12345678901234567'])('refuses the deadline %j as malformed', (deadline) => {
    expect(check(signCall(SECRET, call), { ...call, deadline })).toEqual({ kind: 'refused', reason: 'malformed' });
  });

  it('accepts secrets of 32 or more printable characters without spaces or commas', () => {
    expect(CALL_SECRET_MIN_LENGTH).toBe(32);
    expect(isCallSecret('a'.repeat(32))).toBe(true);
    expect(isCallSecret(SECRET)).toBe(true);
    for (const bad of [
      'a'.repeat(31),
      `${'a'.repeat(32)} b`,
      `${'a'.repeat(32)},b`,
      `${'a'.repeat(32)}é`,
      42,
      undefined,
    ])
      expect(isCallSecret(bad)).toBe(false);
  });
});
