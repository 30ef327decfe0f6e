/**
 * runner/reply.ts: what a committed call's answer looks like on the wire, for a sync and a
 * detached call. Each case drives a Reply on a real Node response (a server on 127.0.0.1 port
 * 0) and reads what a client receives: status, headers, body and trailers. The order in which
 * call.ts uses a Reply is spec/runner/call.spec.ts.
 */
import { createServer } from 'node:http';
import type { Server, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { request } from 'undici';
import { SluiceError } from '../../placer/kernel/index.ts';
import {
  ERROR_TRAILER,
  EXEC_TRAILER,
  RESULT_STATUS_TRAILER,
  RESULT_TYPE_TRAILER,
  RUNNER_ID_HEADER,
} from '../../runner/protocol/index.ts';
import { detachedReply, syncReply } from '../../runner/reply.ts';

let server: Server;
let url: string;
/** What the next request's handler does with its response. */
let handle: (res: ServerResponse) => void | Promise<void> = () => {};

beforeAll(async () => {
  server = createServer((req, res) => {
    req.resume();
    void handle(res);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

/** Runs `script` on the next response and returns what the client read. */
async function answer(script: (res: ServerResponse) => void | Promise<void>) {
  handle = script;
  const res = await request(url, { method: 'POST', body: '{}' });
  const body = await res.body.text();
  return { status: res.statusCode, headers: res.headers, body, trailers: res.trailers };
}

const failure = (): SluiceError =>
  new SluiceError('RUNNER_ENGINE_FAILED', 502, 'server_error', 'engine at http://e failed before answering');
/** The OpenAI-shaped body of {@link failure}. */
const FAILURE_BODY = {
  error: { message: 'engine at http://e failed before answering', type: 'server_error', code: 'RUNNER_ENGINE_FAILED' },
};

/** The trailers of a detached call's result: its status and type, and `others`. */
const resultTrailers = (status: string, type: string, others: Record<string, string> = {}) => ({
  ...others,
  [RESULT_STATUS_TRAILER]: status,
  [RESULT_TYPE_TRAILER]: type,
});

// x-hop is hop-by-hop because the engine's Connection header names it.
const engineHeaders = { 'content-type': 'text/event-stream', 'x-engine': 'vllm', 'x-hop': 'one', connection: 'x-hop' };

describe('syncReply', () => {
  it("returns the engine's status and headers minus hop-by-hop ones, its body, and the trailers given at the end", async () => {
    const got = await answer((res) => {
      const reply = syncReply(res, 'r-1');
      reply.head(201, engineHeaders);
      reply.write(Buffer.from('data: a\n\n'));
      reply.write(Buffer.from('data: b\n\n'));
      reply.end({ [EXEC_TRAILER]: 'exec;dur=12.5' });
    });
    expect(got.status).toBe(201);
    expect(got.headers['content-type']).toBe('text/event-stream');
    expect(got.headers['x-engine']).toBe('vllm');
    expect(got.headers['x-hop']).toBeUndefined();
    expect(got.headers[RUNNER_ID_HEADER]).toBe('r-1');
    expect(got.headers.trailer).toBe(`${EXEC_TRAILER}, ${ERROR_TRAILER}`);
    expect(got.body).toBe('data: a\n\ndata: b\n\n');
    expect(got.trailers).toEqual({ [EXEC_TRAILER]: 'exec;dur=12.5' });
  });

  it('holds the status line back from head() until the first body byte, and sends nothing on commit()', async () => {
    const seen: boolean[] = [];
    const got = await answer((res) => {
      const reply = syncReply(res, 'r-1');
      reply.commit();
      seen.push(res.headersSent);
      reply.head(200, { 'content-type': 'application/json' });
      seen.push(res.headersSent);
      reply.write(Buffer.from('{"ok":true}'));
      seen.push(res.headersSent);
      reply.end({});
    });
    expect(seen).toEqual([false, false, true]);
    expect(got.status).toBe(200);
    expect(got.body).toBe('{"ok":true}');
  });

  it("returns the engine's head and the trailers when the body ends without a byte", async () => {
    const got = await answer((res) => {
      const reply = syncReply(res, 'r-1');
      reply.head(200, { 'content-type': 'application/json' });
      reply.end({ [EXEC_TRAILER]: 'exec;dur=1' });
    });
    expect(got.status).toBe(200);
    expect(got.headers[RUNNER_ID_HEADER]).toBe('r-1');
    expect(got.body).toBe('');
    expect(got.trailers).toEqual({ [EXEC_TRAILER]: 'exec;dur=1' });
  });

  it('returns the error code in a trailer when the engine fails mid-body', async () => {
    const got = await answer((res) => {
      const reply = syncReply(res, 'r-1');
      reply.head(200, { 'content-type': 'text/event-stream' });
      reply.write(Buffer.from('data: a\n\n'));
      reply.end({ [EXEC_TRAILER]: 'exec;dur=3', [ERROR_TRAILER]: 'RUNNER_ENGINE_TIMEOUT' });
    });
    expect(got.status).toBe(200);
    expect(got.body).toBe('data: a\n\n');
    expect(got.trailers).toEqual({ [EXEC_TRAILER]: 'exec;dur=3', [ERROR_TRAILER]: 'RUNNER_ENGINE_TIMEOUT' });
  });

  it("returns the error's status, its code in a header and an OpenAI-shaped body when the engine failed before answering", async () => {
    const got = await answer((res) => syncReply(res, 'r-1').fail(failure(), { [EXEC_TRAILER]: 'exec;dur=2' }));
    expect(got.status).toBe(502);
    expect(got.headers['content-type']).toBe('application/json');
    expect(got.headers[ERROR_TRAILER]).toBe('RUNNER_ENGINE_FAILED');
    expect(got.headers[RUNNER_ID_HEADER]).toBe('r-1');
    expect(JSON.parse(got.body)).toEqual(FAILURE_BODY);
    expect(got.trailers).toEqual({});
  });
});

describe('detachedReply', () => {
  it('returns 202 at commit(), before the body ends, declaring the result trailers', async () => {
    let finish!: () => void;
    const finished = new Promise<void>((resolve) => (finish = resolve));
    handle = (res) => {
      const reply = detachedReply(res, 'r-2');
      reply.commit();
      reply.commit();
      void finished.then(() => reply.end({}));
    };
    // The client has the status line while the server still holds the body open.
    const res = await request(url, { method: 'POST', body: '{}' });
    expect(res.statusCode).toBe(202);
    expect(res.headers[RUNNER_ID_HEADER]).toBe('r-2');
    expect(res.headers.trailer).toBe(
      `${EXEC_TRAILER}, ${ERROR_TRAILER}, ${RESULT_STATUS_TRAILER}, ${RESULT_TYPE_TRAILER}`,
    );
    finish();
    await res.body.text();
  });

  it("returns the engine's body under 202, with the engine's status and content type as trailers", async () => {
    const got = await answer((res) => {
      const reply = detachedReply(res, 'r-2');
      reply.head(200, { 'content-type': ['application/json', 'text/plain'], 'x-engine': 'vllm' });
      reply.write(Buffer.from('{"id":"c1"}'));
      reply.end({ [EXEC_TRAILER]: 'exec;dur=40' });
    });
    expect(got.status).toBe(202);
    // The engine's own headers are not the detached call's: its result carries the type alone.
    expect(got.headers['x-engine']).toBeUndefined();
    expect(got.body).toBe('{"id":"c1"}');
    expect(got.trailers).toEqual(resultTrailers('200', 'application/json', { [EXEC_TRAILER]: 'exec;dur=40' }));
  });

  it('returns application/octet-stream as the result type when the engine sent none', async () => {
    const got = await answer((res) => {
      const reply = detachedReply(res, 'r-2');
      reply.head(500, {});
      reply.end({});
    });
    expect(got.trailers).toEqual(resultTrailers('500', 'application/octet-stream'));
  });

  it("returns the error as the call's result after 202: its body, code, status and JSON type in trailers", async () => {
    const got = await answer((res) => detachedReply(res, 'r-2').fail(failure(), { [EXEC_TRAILER]: 'exec;dur=5' }));
    expect(got.status).toBe(202);
    expect(JSON.parse(got.body)).toEqual(FAILURE_BODY);
    expect(got.trailers).toEqual(
      resultTrailers('502', 'application/json', {
        [EXEC_TRAILER]: 'exec;dur=5',
        [ERROR_TRAILER]: 'RUNNER_ENGINE_FAILED',
      }),
    );
  });

  it('returns the same 202 when the engine fails after commit(), not a second status line', async () => {
    const got = await answer((res) => {
      const reply = detachedReply(res, 'r-2');
      reply.commit();
      reply.fail(failure(), {});
    });
    expect(got.status).toBe(202);
    expect(got.trailers[RESULT_STATUS_TRAILER]).toBe('502');
  });
});
