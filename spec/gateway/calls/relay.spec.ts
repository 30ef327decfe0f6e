/**
 * gateway/calls/relay.ts: a committed runner's response relayed to a real client over a socket on
 * port 0, the runner's side played by a hand-fed stream so each chunk and failure lands exactly
 * where the test puts it.
 */
import { createServer } from 'node:http';
import type { Server, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { PassThrough } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { request } from 'undici';
import type { RunnerResponse } from '../../../gateway/fleet/http-runner.ts';
import { answerType, lastEventEnd, relay } from '../../../gateway/calls/relay.ts';
import type { RelayResult } from '../../../gateway/calls/relay.ts';
import { ERROR_TRAILER, EXEC_TRAILER, EngineErrorCode } from '../../../runner/protocol/index.ts';
import { eventually } from '../../support/fleet.ts';

/** A runner's response whose body the test writes; `trailers` may be filled before `end`. */
function fakeResponse(statusCode: number, headers: Record<string, string>, text = '') {
  const body = Object.assign(new PassThrough(), { text: async () => text });
  const trailers: Record<string, string> = {};
  const response = { statusCode, headers, trailers, body, opaque: null, context: {} } as unknown as RunnerResponse;
  return { response, body, trailers };
}

let server: Server | undefined;
afterEach(async () => {
  server?.closeAllConnections();
  await new Promise((resolve) => (server ? server.close(resolve) : resolve(undefined)));
  server = undefined;
});

/**
 * Serves one request by relaying `response`; resolves with the client's view and the relay's
 * result. `during` runs once the client's request arrived (to feed the body).
 */
async function relayed(response: RunnerResponse, during: () => void = () => {}) {
  let result: Promise<RelayResult> | undefined;
  server = createServer((_req, out: ServerResponse) => {
    result = relay(response, out, { 'sluice-call-id': 'c1' }, { id: 'r1' }, new AbortController().signal, {
      type: answerType(response.headers),
    });
    during();
  });
  await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  const res = await request(`http://127.0.0.1:${port}/`);
  const text = await res.body.text().catch(() => '(cut)');
  await eventually(() => result !== undefined, 10_000, 'the relay');
  return { status: res.statusCode, headers: res.headers, text, result: await result! };
}

describe('relay', () => {
  it('relays a response with the runner status, its headers and ours, and the reported execution time', async () => {
    const { response, body, trailers } = fakeResponse(201, { 'content-type': 'application/json', 'x-engine': 'e1' });
    const got = await relayed(response, () => {
      body.write('{"a":');
      trailers[EXEC_TRAILER] = 'exec;dur=12.5';
      body.end('1}');
    });
    expect(got.status).toBe(201);
    expect(got.headers['x-engine']).toBe('e1');
    expect(got.headers['sluice-call-id']).toBe('c1');
    expect(got.text).toBe('{"a":1}');
    expect(got.result).toMatchObject({ outcome: 'completed', status: 201, execMs: 12.5 });
  });

  it('holds back an SSE event begun but not finished, and ends a stream cut there with the error event alone', async () => {
    const { response, body } = fakeResponse(200, { 'content-type': 'text/event-stream' });
    const got = await relayed(response, () => {
      body.write('data: one\n\ndata: tw');
      setImmediate(() => body.destroy(new Error('socket hang up')));
    });
    expect(got.status).toBe(200);
    const events = got.text.split('\n\n').filter(Boolean);
    expect(events[0]).toBe('data: one');
    expect(got.text).not.toContain('data: tw');
    expect(events).toHaveLength(2);
    const error = JSON.parse(events[1]!.slice('data: '.length)).error;
    expect(error.code).toBe('GW_RUNNER_FAILED_AFTER_COMMIT');
    expect(error.message).toContain('runner r1');
    expect(got.result.outcome).toBe('errors');
  });

  it('maps RUNNER_ENGINE_TIMEOUT in the header of a runner 504 to 504 GW_CALL_TIMEOUT with the runner message', async () => {
    const { response, body } = fakeResponse(
      504,
      { 'content-type': 'application/json', [ERROR_TRAILER]: EngineErrorCode.timeout },
      '{"error":{"message":"ran past its budget"}}',
    );
    const got = await relayed(response, () => body.end());
    expect(got.status).toBe(504);
    const error = JSON.parse(got.text).error;
    expect(error).toMatchObject({ code: 'GW_CALL_TIMEOUT', type: 'timeout_error' });
    expect(error.message).toBe('runner r1 stopped the call at its deadline: ran past its budget');
    expect(got.result.outcome).toBe('timeouts');
  });

  it('maps RUNNER_ENGINE_FAILED in the header of a runner 502 to 502 GW_RUNNER_FAILED_AFTER_COMMIT', async () => {
    const { response, body } = fakeResponse(502, { [ERROR_TRAILER]: EngineErrorCode.failed }, 'engine gone');
    const got = await relayed(response, () => body.end());
    expect(got.status).toBe(502);
    const error = JSON.parse(got.text).error;
    expect(error.code).toBe('GW_RUNNER_FAILED_AFTER_COMMIT');
    expect(error.message).toContain('RUNNER_ENGINE_FAILED');
    expect(error.message).toContain('engine gone');
    expect(got.result.outcome).toBe('errors');
  });

  it('ends an SSE stream whose trailer says RUNNER_ENGINE_TIMEOUT with a GW_CALL_TIMEOUT event', async () => {
    const { response, body, trailers } = fakeResponse(200, { 'content-type': 'text/event-stream' });
    const got = await relayed(response, () => {
      body.write('data: one\n\n');
      trailers[ERROR_TRAILER] = EngineErrorCode.timeout;
      setImmediate(() => body.end());
    });
    const events = got.text.split('\n\n').filter(Boolean);
    expect(events[0]).toBe('data: one');
    const error = JSON.parse(events[1]!.slice('data: '.length)).error;
    expect(error.code).toBe('GW_CALL_TIMEOUT');
    expect(error.message).toContain('the response was cut short');
    expect(got.result).toMatchObject({ outcome: 'timeouts', status: 200 });
  });

  it('ends as cancelled, not failed, when the call signal aborted (the client left)', async () => {
    const { response, body } = fakeResponse(200, { 'content-type': 'text/plain' });
    const controller = new AbortController();
    let result: Promise<RelayResult> | undefined;
    server = createServer((_req, out) => {
      result = relay(response, out, {}, { id: 'r1' }, controller.signal, { type: answerType(response.headers) });
      body.write('partial');
      setImmediate(() => {
        controller.abort(new Error('client closed the connection'));
        body.destroy(new Error('aborted'));
      });
    });
    await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;
    // The client's headers came with the first chunk; the rest never comes, as for a client gone.
    const res = await request(`http://127.0.0.1:${port}/`);
    await eventually(() => result !== undefined, 10_000, 'the relay');
    expect(await result!).toMatchObject({ outcome: 'cancelled', status: 200 });
    res.body.destroy();
  });
});

describe('lastEventEnd', () => {
  it('finds the end of the last whole event, whichever line ending it uses, and 0 when there is none', () => {
    expect(lastEventEnd(Buffer.from('data: a\n\ndata: b'))).toBe(9);
    expect(lastEventEnd(Buffer.from('data: a\r\n\r\ndata: b\r\n\r\n'))).toBe(22);
    expect(lastEventEnd(Buffer.from('data: a\r\rdata'))).toBe(9);
    expect(lastEventEnd(Buffer.from('data: a\ndata: b\n'))).toBe(0);
    expect(lastEventEnd(Buffer.from(''))).toBe(0);
  });
});
