/** runner/protocol/call.ts: the execution-time trailer, hop-by-hop headers, and which transport errors mean nothing was sent. */
import { describe, expect, it } from 'vitest';
import {
  HOP_BY_HOP_HEADERS,
  formatExecTiming,
  isConnectError,
  parseExecTiming,
  withoutHopByHop,
} from '../../../runner/protocol/index.ts';
import { CONNECT_ERROR_CODES } from '../../../runner/protocol/call.ts';

/** An Error carrying a Node/undici style `code`. */
function coded(code: string, options?: { cause?: unknown }): Error {
  return Object.assign(new Error(`failed with ${code}`, options), { code });
}

describe('parseExecTiming', () => {
  it.each<[string | string[], number]>([
    ['exec;dur=12.5', 12.5],
    ['exec;dur=0', 0],
    ['exec;dur=250', 250],
    ['exec;desc="engine";dur=7', 7],
    ['db;dur=3, exec;dur=42.125, cache;desc=hit', 42.125],
    ['db;dur=3,exec;dur=9', 9],
    ['  exec ; dur=4 ', 4],
    [['db;dur=1', 'exec;dur=77'], 77],
    [['exec;dur=5', 'exec;dur=6'], 5],
    ['exec;dur=5;dur=6', 5],
  ])('returns the exec duration when the value is %j', (value, ms) => {
    expect(parseExecTiming(value)).toBe(ms);
  });

  it.each<[string | string[] | undefined]>([
    [undefined],
    [''],
    [[]],
    ['db;dur=3'],
    ['exec'],
    ['exec;desc=x'],
    ['exec;dur=abc'],
    ['exec;dur=-1'],
    ['exec;dur=-0.5'],
    ['exec;dur=Infinity'],
    ['exec;dur'],
    ['executor;dur=5'],
    ['xexec;dur=5'],
    [['db;dur=1', 'cache;dur=2']],
  ])('returns undefined when the value is %j', (value) => {
    expect(parseExecTiming(value)).toBeUndefined();
  });

  it('returns undefined when dur is empty ("exec;dur=")', () => {
    expect(parseExecTiming('exec;dur=')).toBeUndefined();
    expect(parseExecTiming('exec;dur= ')).toBeUndefined();
  });
});

describe('formatExecTiming', () => {
  it('returns exec;dur with three decimals when given ms', () => {
    expect(formatExecTiming(12)).toBe('exec;dur=12.000');
    expect(formatExecTiming(0.12345)).toBe('exec;dur=0.123');
    expect(formatExecTiming(1234.5678)).toBe('exec;dur=1234.568');
  });

  it.each([0, 1, 12.5, 0.001, 987.654, 3_600_000])('returns %d after a round trip through parseExecTiming', (ms) => {
    expect(parseExecTiming(formatExecTiming(ms))).toBe(ms);
  });

  it('returns the value rounded to µs after a round trip when ms has more decimals', () => {
    expect(parseExecTiming(formatExecTiming(1.23456))).toBe(1.235);
  });

  it('returns a value that survives being joined with other server-timing metrics', () => {
    expect(parseExecTiming(['total;dur=99', formatExecTiming(8.25)])).toBe(8.25);
  });
});

describe('withoutHopByHop', () => {
  it.each([
    [
      'hop-by-hop ones when given request headers',
      {
        connection: 'keep-alive',
        'keep-alive': 'timeout=5',
        'proxy-connection': 'keep-alive',
        'transfer-encoding': 'chunked',
        te: 'trailers',
        trailer: 'server-timing',
        upgrade: 'h2c',
        expect: '100-continue',
        'proxy-authorization': 'Basic eA==',
        host: 'gateway:8080',
        'content-length': '123',
        'content-type': 'application/json',
        authorization: 'Bearer x',
        'sluice-session': 's1',
      },
      { 'content-type': 'application/json', authorization: 'Bearer x', 'sluice-session': 's1' },
    ],
    [
      'any header the Connection header names when given a request',
      { connection: 'keep-alive, X-Hop-Secret ,x-debug', 'x-hop-secret': 's', 'x-debug': '1', 'x-kept': 'k' },
      { 'x-kept': 'k' },
    ],
    [
      'any header named by any of several Connection lines when given response headers',
      { connection: ['close', 'x-engine-hop'], 'x-engine-hop': 'h', close: 'odd', 'content-type': 'text/plain' },
      { 'content-type': 'text/plain' },
    ],
  ])('returns the headers without %s', (_name, headers, expected) => {
    expect(withoutHopByHop(headers)).toEqual(expected);
  });

  it('returns array values unchanged when a header is repeated', () => {
    const cookies = ['a=1', 'b=2'];
    const out = withoutHopByHop({ 'set-cookie': cookies, connection: 'close' });
    expect(out).toEqual({ 'set-cookie': ['a=1', 'b=2'] });
    expect(out['set-cookie']).toBe(cookies);
  });

  it('returns the end-to-end headers when Connection names none of them', () => {
    const out = withoutHopByHop({ connection: ' , ', 'x-request-id': 'r1' });
    expect(out).toEqual({ 'x-request-id': 'r1' });
  });

  it('returns no entry for a header whose value is undefined', () => {
    const out = withoutHopByHop({ 'x-a': undefined, 'x-b': '' });
    expect(out).toEqual({ 'x-b': '' });
    expect(Object.hasOwn(out, 'x-a')).toBe(false);
  });

  it('returns a new object and leaves the input as it was', () => {
    const input = { host: 'h', 'x-a': '1' };
    const out = withoutHopByHop(input);
    expect(out).not.toBe(input);
    expect(input).toEqual({ host: 'h', 'x-a': '1' });
  });

  it('returns the documented set when HOP_BY_HOP_HEADERS is read', () => {
    expect([...HOP_BY_HOP_HEADERS].sort()).toEqual(
      [
        'connection',
        'content-length',
        'expect',
        'host',
        'keep-alive',
        'proxy-authenticate',
        'proxy-authorization',
        'proxy-connection',
        'te',
        'trailer',
        'transfer-encoding',
        'upgrade',
      ].sort(),
    );
  });
});

describe('isConnectError', () => {
  it.each([...CONNECT_ERROR_CODES])('returns true when the error code is %s', (code) => {
    expect(isConnectError(coded(code))).toBe(true);
  });

  it('returns true when the connect error is the cause of a wrapper', () => {
    expect(isConnectError(new TypeError('fetch failed', { cause: coded('ECONNREFUSED') }))).toBe(true);
    expect(isConnectError(coded('UND_ERR_SOCKET', { cause: coded('UND_ERR_CONNECT_TIMEOUT') }))).toBe(true);
  });

  it('returns true when the connect error is two wrappers down', () => {
    expect(isConnectError(new Error('outer', { cause: new Error('middle', { cause: coded('ECONNREFUSED') }) }))).toBe(
      true,
    );
  });

  it('returns true when the error is an AggregateError with a connect code (Node happy eyeballs)', () => {
    const aggregate = Object.assign(new AggregateError([coded('ECONNREFUSED'), coded('ECONNREFUSED')]), {
      code: 'ECONNREFUSED',
    });
    expect(isConnectError(aggregate)).toBe(true);
  });

  it.each(['UND_ERR_SOCKET', 'ECONNRESET', 'EPIPE', 'UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT', 'ETIMEDOUT'])(
    'returns false when the error code is %s, after which the request may have been sent',
    (code) => {
      expect(isConnectError(coded(code))).toBe(false);
    },
  );

  it('returns false when the cause is a reset', () => {
    expect(isConnectError(new TypeError('fetch failed', { cause: coded('ECONNRESET') }))).toBe(false);
  });

  it.each<[string, unknown]>([
    ['undefined', undefined],
    ['null', null],
    ['a string', 'ECONNREFUSED'],
    ['a plain object with a code', { code: 'ECONNREFUSED' }],
    ['an error without a code', new Error('x')],
    ['an error with a numeric code', Object.assign(new Error('x'), { code: 111 })],
  ])('returns false when given %s', (_label, value) => {
    expect(isConnectError(value)).toBe(false);
  });
});
