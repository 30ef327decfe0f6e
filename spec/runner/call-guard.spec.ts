/**
 * runner/call-guard.ts: the runner's door for calls, on a fixed wall clock. The request and the
 * response are stand-ins carrying only what the door reads and writes.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { describe, expect, it } from 'vitest';
import type { LogFields } from '../../placer/kernel/index.ts';
import { CallGuard } from '../../runner/call-guard.ts';
import {
  BODY_DIGEST_HEADER,
  CALL_ID_HEADER,
  DEADLINE_HEADER,
  ERROR_TRAILER,
  RUNNER_ID_HEADER,
  SIGNATURE_HEADER,
  bodyDigest,
  signCall,
} from '../../runner/protocol/index.ts';
import { warningRecorder } from '../support/logger.ts';

const SECRET = 'call-secret-0123456789abcdef-0123456789';
const NOW = 1_800_000_000_000;
const SKEW = 30_000;
const BODY = Buffer.from('{"model":"m"}');

/** A response that records its status line, headers and body. */
class RecordedResponse {
  status: number | undefined;
  headers: Record<string, string> = {};
  body = '';
  readonly socket = { remoteAddress: '127.0.0.1' };
  writeHead(status: number, headers: Record<string, string>): this {
    this.status = status;
    this.headers = headers;
    return this;
  }
  end(body: string): void {
    this.body = body;
  }
}

/** A signed call's head as a gateway sends it; `change` alters the headers after signing. */
function signedRequest(callId: string, change: Record<string, string | undefined> = {}): IncomingMessage {
  const deadline = NOW + 10_000;
  const digest = bodyDigest(BODY);
  const signature = signCall(SECRET, {
    callId,
    method: 'POST',
    path: '/v1/chat/completions',
    deadline,
    bodyDigest: digest,
  });
  const headers: Record<string, string | undefined> = {
    [CALL_ID_HEADER]: callId,
    [DEADLINE_HEADER]: String(deadline),
    [BODY_DIGEST_HEADER]: digest,
    [SIGNATURE_HEADER]: signature,
    ...change,
  };
  return { method: 'POST', url: '/v1/chat/completions', headers } as unknown as IncomingMessage;
}

function guardOf(secrets: readonly string[] = [SECRET], now = (): number => NOW) {
  const refusals: string[] = [];
  const warnings: LogFields[] = [];
  const guard = new CallGuard({
    secrets,
    skew: SKEW,
    runnerId: 'r-1',
    now,
    log: warningRecorder(warnings),
    refused: (reason) => refusals.push(reason),
  });
  return { guard, refusals, warnings };
}

const response = (): RecordedResponse & ServerResponse => new RecordedResponse() as RecordedResponse & ServerResponse;

describe('CallGuard', () => {
  it('returns true for every call when it holds no secret', () => {
    const { guard } = guardOf([]);
    expect(guard.enabled).toBe(false);
    expect(guard.admit({ headers: {} } as IncomingMessage, response())).toBe(true);
    expect(guard.verify(response(), Buffer.from('anything'))).toBe(true);
  });

  it('returns true for a signed call and then for its body', () => {
    const { guard, refusals } = guardOf();
    const res = response();
    expect(guard.admit(signedRequest('c1'), res)).toBe(true);
    expect(guard.verify(res, BODY)).toBe(true);
    expect(refusals).toEqual([]);
    expect(res.status).toBeUndefined();
  });

  it.each([
    ['no signature', { [SIGNATURE_HEADER]: undefined }, 'unsigned'],
    ['no body digest', { [BODY_DIGEST_HEADER]: undefined }, 'unsigned'],
    ['no call id', { [CALL_ID_HEADER]: undefined }, 'unsigned'],
    ['a digest in another format', { [BODY_DIGEST_HEADER]: 'x'.repeat(64) }, 'malformed'],
    ['a deadline past the skew', { [DEADLINE_HEADER]: String(NOW - SKEW - 1) }, 'expired'],
    ['a signature of another call', { [CALL_ID_HEADER]: 'other' }, 'mismatch'],
  ] as const)('answers 401 for a call with %s, naming the code and the runner', (_label, change, reason) => {
    const { guard, refusals } = guardOf();
    const res = response();
    expect(guard.admit(signedRequest('c1', change), res)).toBe(false);
    expect(refusals).toEqual([reason]);
    expect(res.status).toBe(401);
    expect(res.headers).toMatchObject({
      connection: 'close',
      [ERROR_TRAILER]: 'RUNNER_UNAUTHORIZED',
      [RUNNER_ID_HEADER]: 'r-1',
    });
    expect(JSON.parse(res.body)).toMatchObject({ error: { code: 'RUNNER_UNAUTHORIZED' } });
  });

  it('answers 401 for a call id it took already, until the call is forgotten', () => {
    const { guard, refusals } = guardOf();
    const first = response();
    expect(guard.admit(signedRequest('c1'), first)).toBe(true);
    expect(guard.admit(signedRequest('c1'), response())).toBe(false);
    expect(refusals).toEqual(['replayed']);
    guard.forget(first);
    expect(guard.admit(signedRequest('c1'), response())).toBe(true);
  });

  it('answers 401 for a body that is not the one signed, and takes the call id again after', () => {
    const { guard, refusals } = guardOf();
    const res = response();
    expect(guard.admit(signedRequest('c1'), res)).toBe(true);
    expect(guard.verify(res, Buffer.from('{"model":"other"}'))).toBe(false);
    expect(refusals).toEqual(['altered-body']);
    expect(res.status).toBe(401);
    expect(guard.admit(signedRequest('c1'), response())).toBe(true);
  });

  it('answers 401 unsigned for a body whose call was never admitted', () => {
    const { guard, refusals } = guardOf();
    expect(guard.verify(response(), BODY)).toBe(false);
    expect(refusals).toEqual(['unsigned']);
  });

  it('warns once a minute at most, with how many were refused since', () => {
    let now = NOW;
    const { guard, warnings } = guardOf([SECRET], () => now);
    const unsigned = { [SIGNATURE_HEADER]: undefined };
    guard.admit(signedRequest('a', unsigned), response());
    guard.admit(signedRequest('b', unsigned), response());
    guard.admit(signedRequest('c', unsigned), response());
    now += 60_000;
    guard.admit(signedRequest('d', unsigned), response());
    expect(warnings.map((w) => [w.msg, w.call, w.refusedSinceLastWarning])).toEqual([
      ['call refused: no valid signature', 'a', 0],
      ['call refused: no valid signature', 'd', 2],
    ]);
  });
});
