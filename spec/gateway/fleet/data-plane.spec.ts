import { describe, expect, it } from 'vitest';
import { CallSigner, resolveDataPlane } from '../../../gateway/fleet/data-plane.ts';
import { GatewayConfigError } from '../../../gateway/errors.ts';
import { checkFrontListen, isLoopbackHost } from '../../../gateway/http/front-tls.ts';
import type { GatewayCall } from '../../../gateway/http/call.ts';
import {
  BODY_DIGEST_HEADER,
  DEADLINE_HEADER,
  SIGNATURE_HEADER,
  bodyDigest,
  readCallCredential,
  verifyCall,
} from '../../../runner/protocol/index.ts';
import { createRunner } from '../../../runner/server.ts';
import { RunnerConfigError } from '../../../runner/errors.ts';

const SECRET = 'gateway-spec-secret-0123456789abcdef012345';
const fail = (message: string) => new GatewayConfigError(message);

describe('resolveDataPlane', () => {
  it('takes nothing as the open default: unsigned calls, plain http, loopback only', () => {
    expect(resolveDataPlane({}, fail)).toEqual({
      callSecret: undefined,
      runnerTls: undefined,
      tls: undefined,
      allowPlainHttp: false,
    });
  });

  it.each([
    [
      { callSecret: 'short' },
      'callSecret must be a string of at least 32 printable ASCII characters without spaces or commas',
    ],
    [{ callSecret: `${SECRET},${SECRET}` }, 'callSecret must be'],
    [{ runnerTls: { cert: 'c', key: 'k' } }, 'runnerTls.ca must be PEM text; runnerTls needs cert, key, ca together'],
    [{ tls: { cert: '', key: 'k' } }, 'tls.cert must be PEM text'],
    [{ tls: 'cert.pem' }, 'tls must be an object with cert, key'],
    [{ allowPlainHttp: 'yes' }, 'allowPlainHttp must be true or false, got "yes"'],
  ])('refuses %j', (options, message) => {
    const resolve = () => resolveDataPlane(options as never, fail);
    expect(resolve).toThrow(GatewayConfigError);
    expect(resolve).toThrow(message);
  });

  it('refuses a plain http runner URL under mutual TLS', () => {
    const runnerTls = { cert: 'c', key: 'k', ca: 'a' };
    const resolve = (urls: string[]) => () =>
      resolveDataPlane(
        { runnerTls },
        fail,
        urls.map((u) => new URL(u)),
      );
    expect(resolve(['https://10.0.0.1:9000', 'http://10.0.0.2:9000'])).toThrow(
      'runners entries must be https:// URLs with runnerTls (mutual TLS), got "http://10.0.0.2:9000"',
    );
    expect(resolve(['https://10.0.0.1:9000'])).not.toThrow();
    expect(() => resolveDataPlane({}, fail, [new URL('http://10.0.0.2:9000')])).not.toThrow();
  });

  it('never quotes the secret it refuses', () => {
    const bad = `${SECRET} with a space`;
    expect(() => resolveDataPlane({ callSecret: bad }, fail)).toThrow(/callSecret/);
    expect(() => resolveDataPlane({ callSecret: bad }, fail)).not.toThrow(/with a space/);
  });
});

describe('checkFrontListen', () => {
  const open = resolveDataPlane({}, fail);
  it.each(['127.0.0.1', '127.1.2.3', '::1', 'localhost'])('lets plain http listen on %s', (host) => {
    expect(isLoopbackHost(host)).toBe(true);
    expect(() => checkFrontListen(open, host)).not.toThrow();
  });

  it.each(['0.0.0.0', '::', '', '10.0.0.5', '128.0.0.1'])(
    'refuses plain http on %j unless allowed or on TLS',
    (host) => {
      expect(() => checkFrontListen(open, host)).toThrow(GatewayConfigError);
      expect(() => checkFrontListen(resolveDataPlane({ allowPlainHttp: true }, fail), host)).not.toThrow();
      expect(() => checkFrontListen(resolveDataPlane({ tls: { cert: 'c', key: 'k' } }, fail), host)).not.toThrow();
    },
  );
});

describe('CallSigner', () => {
  const call = (body: Buffer, id = '0190d2a8-0000-7000-8000-000000000001') =>
    ({ id, method: 'POST', path: '/v1/chat/completions', body, timeout: 60_000 }) as unknown as GatewayCall;

  it('appends a deadline and a signature a runner with the secret verifies', () => {
    const now = 1_800_000_000_000.4;
    const signer = new CallSigner(SECRET, () => now);
    const body = Buffer.from('{"model":"m"}');
    const flat = ['content-type', 'application/json'];
    signer.sign(call(body), flat);
    expect(flat.slice(0, 2)).toEqual(['content-type', 'application/json']);
    expect(flat[2]).toBe(DEADLINE_HEADER);
    expect(flat[3]).toBe(String(1_800_000_000_001 + 60_000));
    expect(flat[4]).toBe(SIGNATURE_HEADER);
    // The digest the signature covers rides in the head, so a runner verifies before reading the body.
    expect(flat.slice(6)).toEqual([BODY_DIGEST_HEADER, bodyDigest(body)]);
    const credential = readCallCredential(flat[5], flat[3], now, 0);
    expect(credential.kind).toBe('present');
    if (credential.kind !== 'present') return;
    const received = {
      callId: call(body).id,
      method: 'POST',
      path: '/v1/chat/completions',
      bodyDigest: bodyDigest(body),
    };
    expect(verifyCall([SECRET], credential, received)).toEqual({ kind: 'verified' });
  });

  it("hashes a call's body once however many runners it is offered to, and signs each offer with its own deadline", () => {
    let now = 1_800_000_000_000;
    const hashed: Buffer[] = [];
    const signer = new CallSigner(
      SECRET,
      () => now,
      (body) => (hashed.push(body), bodyDigest(body)),
    );
    const body = Buffer.from('{"model":"m","messages":[]}');
    const first: string[] = [];
    const second: string[] = [];
    signer.sign(call(body), first);
    now += 250;
    signer.sign(call(body), second);
    expect(hashed).toEqual([body]);
    expect(Number(second[1]) - Number(first[1])).toBe(250);
    expect(second[3]).not.toBe(first[3]);
    // Another call's body is hashed for itself.
    signer.sign(call(Buffer.from('{"model":"n"}'), '0190d2a8-0000-7000-8000-000000000002'), []);
    expect(hashed).toHaveLength(2);
  });
});

describe('runner call credentials', () => {
  it.each([
    [{ callSecret: 'short' }, 'callSecret must be a string of at least 32'],
    [{ callSecret: [SECRET, 'short'] }, 'callSecret[1] must be a string of at least 32'],
    [{ callSecret: [] }, 'callSecret must be a secret or a non-empty list'],
    [{ callClockSkew: -1 }, 'callClockSkew'],
    [{ allowUnsignedCalls: 'yes' }, 'allowUnsignedCalls must be true or false'],
    [{ tls: { cert: 'c', key: 'k' } }, 'tls.ca must be PEM text; mutual TLS needs cert, key and ca together'],
  ])('refuses %j', (options, message) => {
    const make = () => createRunner({ engine: 'http://127.0.0.1:1', ...(options as object) });
    expect(make).toThrow(RunnerConfigError);
    expect(make).toThrow(message);
  });

  it('takes one secret or several, for a rotation', () => {
    expect(createRunner({ engine: 'http://127.0.0.1:1', callSecret: SECRET }).config.callSecrets).toEqual([SECRET]);
    const other = SECRET.replace('gateway', 'rotated');
    expect(createRunner({ engine: 'http://127.0.0.1:1', callSecret: [SECRET, other] }).config.callSecrets).toEqual([
      SECRET,
      other,
    ]);
  });
});
