import { createServer } from 'node:http';
import type { Server } from 'node:http';
import { connect } from 'node:net';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bodyReader } from '../../../gateway/http/body.ts';
import { BodyTimeoutError, BodyTooLargeError } from '../../../gateway/errors.ts';
import { SluiceError } from '../../../placer/kernel/index.ts';

/** What the test server saw: the body it read, or the error the body reader rejected with. */
interface Outcome {
  ok: boolean;
  body?: string;
  hex?: string;
  length?: number;
  name?: string;
  code?: string;
  message?: string;
  status?: number;
  sluice?: boolean;
  /** ms from calling the body reader to its settling, measured on the server. */
  elapsed: number;
  /** `req.readableFlowing` once settled: null means nothing ever read the stream. */
  flowing: boolean | null;
}

interface Reply {
  status: number;
  outcome: Outcome;
}

let server: Server;
let port: number;
let waiting: ((outcome: Outcome) => void) | undefined;

/** The next outcome the server reports, including for clients that are gone before the answer. */
function nextOutcome(): Promise<Outcome> {
  return new Promise((resolve) => {
    waiting = resolve;
  });
}

beforeAll(async () => {
  // Limits come from the query string so each case sets its own: /?max=16&timeout=100&idle=50.
  server = createServer((req, res) => {
    const query = new URL(req.url ?? '/', 'http://sluice.test').searchParams;
    const idle = query.get('idle');
    const limits = {
      maxBytes: Number(query.get('max') ?? 1024),
      timeout: Number(query.get('timeout') ?? 2000),
      ...(idle === null ? {} : { idleTimeout: Number(idle) }),
    };
    const started = performance.now();
    const answer = (status: number, outcome: Outcome): void => {
      waiting?.(outcome);
      waiting = undefined;
      if (res.destroyed) return;
      const json = JSON.stringify(outcome);
      res.writeHead(status, {
        'content-type': 'application/json',
        'content-length': Buffer.byteLength(json),
        connection: 'close',
      });
      res.end(json);
    };
    bodyReader(limits)(req).then(
      (body) =>
        answer(200, {
          ok: true,
          body: body.toString('utf8'),
          hex: body.toString('hex'),
          length: body.length,
          elapsed: performance.now() - started,
          flowing: req.readableFlowing,
        }),
      (error: Error) =>
        answer(error instanceof SluiceError ? error.status : 500, {
          ok: false,
          name: error.name,
          code: (error as { code?: string }).code,
          message: error.message,
          status: error instanceof SluiceError ? error.status : undefined,
          sluice: error instanceof SluiceError,
          elapsed: performance.now() - started,
          flowing: req.readableFlowing,
        }),
    );
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  port = (server.address() as AddressInfo).port;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

/**
 * Writes raw bytes on a fresh connection and reads the answer until the server closes it. The
 * client never ends its side, so a server waiting for more body bytes would keep waiting.
 */
function exchange(parts: readonly (string | Buffer)[]): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    const received: Buffer[] = [];
    socket.on('data', (chunk: Buffer) => received.push(chunk));
    socket.on('error', reject);
    socket.on('close', () => {
      const text = Buffer.concat(received).toString('utf8');
      const status = /^HTTP\/1\.1 (\d{3}) /.exec(text);
      const split = text.indexOf('\r\n\r\n');
      if (!status || split === -1) return reject(new Error(`no HTTP answer: ${JSON.stringify(text)}`));
      try {
        resolve({ status: Number(status[1]), outcome: JSON.parse(text.slice(split + 4)) as Outcome });
      } catch (error) {
        reject(error);
      }
    });
    for (const part of parts) socket.write(part);
  });
}

const head = (path: string, headers: Record<string, string | number>): string =>
  `POST ${path} HTTP/1.1\r\nhost: 127.0.0.1\r\n` +
  Object.entries(headers)
    .map(([k, v]) => `${k}: ${v}\r\n`)
    .join('') +
  '\r\n';

const chunk = (data: string): string => `${Buffer.byteLength(data).toString(16)}\r\n${data}\r\n`;

/** What the body reader's caller saw when the body was over maxBytes, and when a read bound ran out. */
const TOO_LARGE = { ok: false, name: 'BodyTooLargeError', code: 'GW_BODY_TOO_LARGE', status: 413 };
const TIMED_OUT = { ok: false, name: 'BodyTimeoutError', code: 'GW_BODY_TIMEOUT', status: 408 };

describe('bodyReader', () => {
  it('returns the whole body when it has a content-length within maxBytes', async () => {
    const body = '{"model":"m","messages":[]}';
    const reply = await exchange([head('/?max=1024', { 'content-length': body.length }), body]);
    expect(reply.status).toBe(200);
    expect(reply.outcome).toMatchObject({ ok: true, body, length: body.length });
  });

  it('returns the body when it is exactly maxBytes long', async () => {
    const body = 'x'.repeat(16);
    const declared = await exchange([head('/?max=16', { 'content-length': 16 }), body]);
    expect(declared.outcome).toMatchObject({ ok: true, length: 16 });
    const chunked = await exchange([head('/?max=16', { 'transfer-encoding': 'chunked' }), chunk(body), '0\r\n\r\n']);
    expect(chunked.outcome).toMatchObject({ ok: true, length: 16 });
  });

  it('returns the chunks joined in order when the body arrives in several chunks', async () => {
    const reply = await exchange([
      head('/?max=64', { 'transfer-encoding': 'chunked' }),
      chunk('alpha-'),
      chunk('beta-'),
      chunk('gamma'),
      '0\r\n\r\n',
    ]);
    expect(reply.outcome).toMatchObject({ ok: true, body: 'alpha-beta-gamma', length: 16 });
  });

  it('returns bytes unchanged when the body is not text', async () => {
    const bytes = Buffer.from([0x00, 0xff, 0x80, 0x0a, 0x0d]);
    const reply = await exchange([head('/?max=64', { 'content-length': bytes.length }), bytes]);
    expect(reply.outcome.hex).toBe(bytes.toString('hex'));
  });

  it('returns an empty buffer when the request has no body', async () => {
    const reply = await exchange([`GET /?max=16 HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n`]);
    expect(reply.status).toBe(200);
    expect(reply.outcome).toMatchObject({ ok: true, body: '', length: 0 });
  });

  it('returns an empty buffer when content-length is 0', async () => {
    const reply = await exchange([head('/?max=16', { 'content-length': 0 })]);
    expect(reply.outcome).toMatchObject({ ok: true, length: 0 });
  });

  it('rejects with BodyTooLargeError without reading when content-length exceeds maxBytes', async () => {
    // Only the headers are sent: an answer at all proves the server did not wait for the body.
    const reply = await exchange([head('/?max=100&timeout=10000', { 'content-length': 1_000_000 })]);
    expect(reply.status).toBe(413);
    expect(reply.outcome).toMatchObject(TOO_LARGE);
    expect(reply.outcome.flowing).toBeNull();
  });

  it('rejects with BodyTooLargeError before the end when a chunked body passes maxBytes', async () => {
    // No terminating chunk: the rejection must come from counting, not from the end of the body.
    const reply = await exchange([
      head('/?max=16&timeout=10000', { 'transfer-encoding': 'chunked' }),
      chunk('0123456789'),
      chunk('0123456789'),
    ]);
    expect(reply.status).toBe(413);
    expect(reply.outcome).toMatchObject(TOO_LARGE);
  });

  // Which bound ended the read is in the error's message, so no case bounds wall time from above.
  it.each([
    [
      'the timeout when the client stalls mid-body',
      '/?max=1024&timeout=100',
      100,
      ['only ten b'],
      'request body not received within bodyReadTimeout (100 ms)',
    ],
    [
      'the idle bound when the client stalls mid-body, long before the total timeout',
      '/?max=1024&timeout=10000&idle=100',
      10,
      ['x'],
      'request body stalled: no bytes for bodyIdleTimeout (100 ms)',
    ],
    [
      'the idle bound when no body byte ever comes',
      '/?max=1024&timeout=10000&idle=100',
      10,
      [],
      'request body stalled: no bytes for bodyIdleTimeout (100 ms)',
    ],
  ])('rejects with BodyTimeoutError after %s', async (_when, target, length, sent, message) => {
    const reply = await exchange([head(target, { 'content-length': length }), ...sent]);
    expect(reply.status).toBe(408);
    expect(reply.outcome).toMatchObject({ ...TIMED_OUT, message });
    expect(reply.outcome.elapsed).toBeGreaterThanOrEqual(90);
  });

  it('returns the body when every chunk comes within the idle bound, though the whole takes longer', async () => {
    // Five chunks 1 s apart: 4 s in all, past a 3 s idle bound, never that long silent. The
    // 2 s between gap and bound is room for a busy machine to run this client's timer late.
    const outcome = nextOutcome();
    const socket = connect(port, '127.0.0.1');
    socket.on('error', () => undefined);
    socket.write(head('/?max=1024&timeout=20000&idle=3000', { 'content-length': 5 }));
    let sent = 0;
    const tick = setInterval(() => {
      socket.write('x');
      if (++sent === 5) clearInterval(tick);
    }, 1000);
    const seen = await outcome;
    clearInterval(tick);
    socket.destroy();
    expect(seen).toMatchObject({ ok: true, body: 'xxxxx' });
    expect(seen.elapsed).toBeGreaterThanOrEqual(3000);
  });

  it('rejects with a non-sluice error when the client closes mid-body', async () => {
    const outcome = nextOutcome();
    const socket = connect(port, '127.0.0.1');
    socket.write(head('/?max=1024&timeout=10000', { 'content-length': 100 }));
    socket.write('partial', () => socket.destroy());
    const seen = await outcome;
    // Not a BodyTimeoutError: the close ended the read, not the 10 s timeout.
    expect(seen.ok).toBe(false);
    expect(seen.sluice).toBe(false);
  });
});

describe('body errors', () => {
  it('returns status 413 and code GW_BODY_TOO_LARGE when a BodyTooLargeError is built', () => {
    const error = new BodyTooLargeError('too big');
    expect(error).toBeInstanceOf(SluiceError);
    expect([error.status, error.code, error.type]).toEqual([413, 'GW_BODY_TOO_LARGE', 'invalid_request_error']);
  });

  it('returns status 408 and code GW_BODY_TIMEOUT when a BodyTimeoutError is built', () => {
    const error = new BodyTimeoutError('slow');
    expect([error.status, error.code, error.name]).toEqual([408, 'GW_BODY_TIMEOUT', 'BodyTimeoutError']);
  });
});
