/** gateway/errors.ts: the headers an error carries, the body a client gets, and how a runner's reported code is translated. */
import type { ServerResponse } from 'node:http';
import { describe, expect, it } from 'vitest';
import {
  CallTimeoutError,
  DetachedStoreUnavailableError,
  InvalidJsonError,
  OverloadedError,
  RunnerFailedError,
  RunnerRefusedGatewayError,
  ShuttingDownError,
  TooManyConnectionsError,
  TooManyUploadsError,
  UploadsFullError,
  errorBody,
  runnerReported,
  sendError,
  storeFailure,
} from '../../gateway/errors.ts';
import { SluiceError } from '../../placer/kernel/index.ts';
import { EngineErrorCode, UNAUTHORIZED_CODE } from '../../runner/protocol/index.ts';

/** A response that records what is written to it; `h2` makes its request an HTTP/2 one. */
function recorded(given: { h2?: boolean; headersSent?: boolean } = {}) {
  const written: { status?: number; headers?: Record<string, string>; body?: string } = {};
  const out = {
    headersSent: given.headersSent ?? false,
    destroyed: false,
    req: { httpVersionMajor: given.h2 ? 2 : 1 },
    writeHead(status: number, headers: Record<string, string>) {
      written.status = status;
      written.headers = headers;
    },
    end(body: string) {
      written.body = body;
    },
  };
  return { out: out as unknown as ServerResponse, written };
}

describe('error headers', () => {
  it('returns Retry-After alone for an error whose body was read', () => {
    expect(new OverloadedError(100, 2).headers).toEqual({ 'retry-after': '2' });
    expect(new DetachedStoreUnavailableError('down', { retryAfter: 5 }).headers).toEqual({ 'retry-after': '5' });
    expect(new DetachedStoreUnavailableError('down').headers).toEqual({});
  });

  it('returns Retry-After and connection: close for an error answered without reading the body', () => {
    const close = { 'retry-after': '3', connection: 'close' };
    expect(new UploadsFullError(10, 3).headers).toEqual(close);
    expect(new TooManyUploadsError(2, 3).headers).toEqual(close);
    expect(new TooManyConnectionsError(4, 3).headers).toEqual(close);
    expect(new ShuttingDownError().headers).toEqual({ 'retry-after': '1', connection: 'close' });
  });
});

describe('storeFailure', () => {
  it('returns a SluiceError as it is, and anything else as GW_STORE_UNAVAILABLE without its message', () => {
    const own = new InvalidJsonError('x');
    expect(storeFailure(own)).toBe(own);
    const wrapped = storeFailure(new Error('password=hunter2'));
    expect(wrapped).toBeInstanceOf(DetachedStoreUnavailableError);
    expect(wrapped.message).not.toContain('hunter2');
    expect((wrapped as Error).cause).toBeInstanceOf(Error);
  });
});

describe('errorBody', () => {
  it("returns OpenAI's three fields and the details beside them", () => {
    expect(JSON.parse(errorBody(new InvalidJsonError('bad'), { param: 'model' }))).toEqual({
      error: { message: 'bad', type: 'invalid_request_error', code: 'GW_INVALID_JSON', param: 'model' },
    });
  });
});

describe('sendError', () => {
  it("writes the status, the error's own headers, the extra ones and the body", () => {
    const { out, written } = recorded();
    sendError(out, new UploadsFullError(10, 3), { 'x-request-id': 'r1' });
    expect(written.status).toBe(503);
    expect(written.headers).toEqual({
      'content-type': 'application/json',
      'retry-after': '3',
      connection: 'close',
      'x-request-id': 'r1',
    });
    expect(JSON.parse(written.body!).error.code).toBe('GW_UPLOADS_FULL');
  });

  it('leaves connection out on HTTP/2, and writes nothing once headers went', () => {
    const h2 = recorded({ h2: true });
    sendError(h2.out, new UploadsFullError(10, 3));
    expect(h2.written.headers).not.toHaveProperty('connection');
    const sent = recorded({ headersSent: true });
    sendError(sent.out, new InvalidJsonError('bad'));
    expect(sent.written).toEqual({});
  });

  it('writes a kernel error without headers of its own', () => {
    const { out, written } = recorded();
    sendError(out, new SluiceError('X_CODE', 500, 'server_error', 'boom'));
    expect(written.headers).toEqual({ 'content-type': 'application/json' });
  });
});

describe('runnerReported', () => {
  it('gives a sync client the gateway code and a detached record the runner code, for every engine code', () => {
    const timeout = runnerReported(EngineErrorCode.timeout, 'r1', 'late');
    expect(timeout.error).toBeInstanceOf(CallTimeoutError);
    expect(timeout.record).toEqual({
      code: 'RUNNER_ENGINE_TIMEOUT',
      message: 'runner r1 stopped the call at the end of its budget (RUNNER_ENGINE_TIMEOUT)',
    });
    const failed = runnerReported(EngineErrorCode.failed, 'r1', 'crash');
    expect(failed.error).toBeInstanceOf(RunnerFailedError);
    expect(failed.error.message).toContain('crash');
    expect(failed.record.code).toBe('RUNNER_ENGINE_FAILED');
    expect(failed.record.message).toContain('may have run');
    const busy = runnerReported(EngineErrorCode.busy, 'r1');
    expect(busy.record).toEqual({
      code: 'RUNNER_ENGINE_BUSY',
      message: 'runner r1 was refused by its engine after it had accepted the call; nothing ran (RUNNER_ENGINE_BUSY)',
    });
  });
});

describe('runnerReported on a refusal', () => {
  it("gives a sync client GW_RUNNER_UNAUTHORIZED, never a 401, and a detached record the runner's code", () => {
    const refused = runnerReported(UNAUTHORIZED_CODE, 'r1', 'no signature');
    expect(refused.error).toBeInstanceOf(RunnerRefusedGatewayError);
    expect(refused.error.status).toBe(502);
    expect(refused.error.message).toContain('no signature');
    expect(refused.record).toEqual({
      code: UNAUTHORIZED_CODE,
      message: `runner r1 refused the call as not from a gateway (${UNAUTHORIZED_CODE}); nothing ran`,
    });
  });
});
