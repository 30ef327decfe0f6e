/**
 * The front door's pure parts: which request targets are refused, which client request ids are
 * kept, and how a parser error is answered on its socket.
 */
import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import {
  answerClientError,
  clientErrorRefusal,
  clientRequestId,
  requestTargetProblem,
} from '../../../gateway/http/front.ts';

describe('requestTargetProblem', () => {
  it.each([
    '/v1/chat/completions',
    '/v1/completions?prompt=../../etc&x=%2e%2e',
    '/invoke/org%2Fmodel',
    '/invoke/a.b',
    '/invoke/...',
    '/invoke/.hidden',
    '/v1/models/meta-llama/Llama-3.1-8B',
    '/',
    '//double',
  ])('returns undefined when the target is a plain path: %s', (target) => {
    expect(requestTargetProblem(target)).toBeUndefined();
  });

  it.each([
    ['http://169.254.169.254/v1/completions', /absolute-form/],
    ['https://gateway/v1/completions', /absolute-form/],
    ['*', /absolute-form/],
    ['v1/completions', /starting with "\/"/],
    ['/v1/completions#frag', /fragment/],
    ['/invoke/%zz', /percent-encoding/],
    ['/invoke/%E0%A4%A', /percent-encoding/],
    ['/v1/./completions', /segment/],
    ['/invoke/x/../../v1/completions', /segment/],
    ['/v1/chat/..', /segment/],
    ['/v1/%2e%2e/completions', /segment/],
    ['/v1/%2E/completions', /segment/],
    ['/v1/.%2e/completions', /segment/],
    ['/invoke/x%2F..%2Fv1', /segment/],
    ['/invoke/x%5C..%5Cv1', /segment/],
    ['/v1\\chat\\completions', /backslash/],
    ['/invoke/..%2f', /segment/],
  ])('returns why when the target is %s', (target, why) => {
    expect(requestTargetProblem(target)).toMatch(why);
  });
});

describe('clientRequestId', () => {
  it.each([
    ['abc-123', 'abc-123'],
    ['x'.repeat(200), 'x'.repeat(200)],
    [['first', 'second'], 'first'],
  ])('returns the id when it is sane: %j', (value, id) => {
    expect(clientRequestId(value)).toBe(id);
  });

  it.each([undefined, '', 'x'.repeat(201), 'has space', 'tab\there', 'ünï', 'new\nline'])(
    'returns undefined when the id is %j',
    (value) => {
      expect(clientRequestId(value)).toBeUndefined();
    },
  );
});

describe('clientErrorRefusal', () => {
  const error = (code: string, reason = 'why') => Object.assign(new Error(`Parse Error: ${reason}`), { code, reason });

  it.each([
    ['HPE_INVALID_CHUNK_SIZE', 400, 'GW_BAD_REQUEST_SYNTAX'],
    ['HPE_UNEXPECTED_CONTENT_LENGTH', 400, 'GW_BAD_REQUEST_SYNTAX'],
    ['HPE_INVALID_METHOD', 400, 'GW_BAD_REQUEST_SYNTAX'],
    ['HPE_HEADER_OVERFLOW', 431, 'GW_HEADERS_TOO_LARGE'],
    ['ERR_HTTP_REQUEST_TIMEOUT', 408, 'GW_HEADERS_TIMEOUT'],
  ])('returns the refusal for %s', (code, status, refusal) => {
    expect(clientErrorRefusal(error(code))).toMatchObject({ status, code: refusal, type: 'invalid_request_error' });
  });

  it("returns a message naming the parser's code and reason when it is a parse error", () => {
    expect(clientErrorRefusal(error('HPE_INVALID_CHUNK_SIZE', 'Invalid character in chunk size')).message).toContain(
      'HPE_INVALID_CHUNK_SIZE: Invalid character in chunk size',
    );
  });
});

/** A socket stand-in that records what is written and whether it was destroyed. */
function fakeSocket(pending?: { headersSent: boolean; getHeader(name: string): unknown }) {
  const socket = new PassThrough() as PassThrough & { _httpMessage?: unknown };
  if (pending) socket._httpMessage = pending;
  let written = '';
  socket.on('data', (chunk: Buffer) => (written += chunk.toString()));
  return { socket, written: () => written };
}

describe('answerClientError', () => {
  const answer = answerClientError(() => 'fresh-id');
  const parseError = Object.assign(new Error('Parse Error'), {
    code: 'HPE_INVALID_CHUNK_SIZE',
    reason: 'Invalid character in chunk size',
  });

  it('writes an OpenAI-shaped 400 with connection: close and a fresh id, then destroys the socket', async () => {
    const { socket, written } = fakeSocket();
    answer(parseError, socket);
    await new Promise((r) => setImmediate(r));
    const text = written();
    expect(text).toMatch(/^HTTP\/1\.1 400 Bad Request\r\n/);
    expect(text).toContain('\r\nconnection: close\r\n');
    expect(text).toContain('\r\nx-request-id: fresh-id\r\n');
    const body = text.slice(text.indexOf('\r\n\r\n') + 4);
    expect(text).toContain(`\r\ncontent-length: ${Buffer.byteLength(body)}\r\n`);
    expect(JSON.parse(body).error).toMatchObject({ code: 'GW_BAD_REQUEST_SYNTAX', type: 'invalid_request_error' });
    expect(socket.destroyed).toBe(true);
  });

  it('writes 408 when the headers timed out', async () => {
    const { socket, written } = fakeSocket();
    answer(Object.assign(new Error('timeout'), { code: 'ERR_HTTP_REQUEST_TIMEOUT' }), socket);
    await new Promise((r) => setImmediate(r));
    expect(written()).toMatch(/^HTTP\/1\.1 408 Request Timeout\r\n/);
    expect(written()).toContain('"code":"GW_HEADERS_TIMEOUT"');
  });

  it('reuses the id of the response in flight when its headers were read', async () => {
    const { socket, written } = fakeSocket({
      headersSent: false,
      getHeader: (name) => (name === 'x-request-id' ? 'call-7' : undefined),
    });
    answer(parseError, socket);
    await new Promise((r) => setImmediate(r));
    expect(written()).toContain('\r\nx-request-id: call-7\r\n');
  });

  it.each([
    ['the client reset the connection', Object.assign(new Error('reset'), { code: 'ECONNRESET' }), undefined],
    ['a response on the socket has begun', parseError, { headersSent: true, getHeader: () => undefined }],
  ])('writes nothing and destroys the socket when %s', async (_why, error, pending) => {
    const { socket, written } = fakeSocket(pending);
    answer(error, socket);
    await new Promise((r) => setImmediate(r));
    expect(written()).toBe('');
    expect(socket.destroyed).toBe(true);
  });

  it('writes nothing when the socket no longer takes writes', () => {
    const { socket, written } = fakeSocket();
    socket.end();
    answer(parseError, socket);
    expect(written()).toBe('');
    expect(socket.destroyed).toBe(true);
  });
});
