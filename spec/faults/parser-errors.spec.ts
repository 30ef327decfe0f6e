/**
 * Fault: requests Node's HTTP parser refuses (bad chunked encoding, Content-Length beside
 * Transfer-Encoding, oversized headers, a broken request line) got a bare `400 Bad Request` with
 * no body, unlike every other refusal. Now each gets an OpenAI-shaped error with a stable code,
 * `connection: close` and an `x-request-id`, the connection closes, nothing reaches a runner,
 * and the gateway keeps serving.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chatBody, metrics, metricValue, postJson, startFleet } from '../support/fleet.ts';
import type { Fleet } from '../support/fleet.ts';
import { rawRequest } from '../support/raw.ts';

const BODY = chatBody({ max_tokens: 2 });
const post = (extra: string[]) =>
  ['POST /v1/chat/completions HTTP/1.1', 'host: gateway.test', 'content-type: application/json', ...extra].join('\r\n');

describe('fault: errors raised by the HTTP parser', () => {
  let fleet: Fleet;
  let gw: string;

  beforeAll(async () => {
    fleet = await startFleet({ nodes: 1, engineArgs: ['--ttft-ms', '0', '--itl-ms', '0', '--output-tokens', '2'] });
    gw = fleet.gateway.url;
  });
  afterAll(() => fleet?.stop());

  const engineCalls = async () => metricValue(await metrics(fleet.nodes[0]!.engine), 'sluice_sim_requests_total');

  it.each<[string, string, string, number, string]>([
    [
      'bad chunked encoding',
      post(['transfer-encoding: chunked']),
      `zz\r\n${BODY}\r\n0\r\n\r\n`,
      400,
      'GW_BAD_REQUEST_SYNTAX',
    ],
    [
      'Content-Length together with Transfer-Encoding',
      post([`content-length: ${Buffer.byteLength(BODY)}`, 'transfer-encoding: chunked']),
      `${Buffer.byteLength(BODY).toString(16)}\r\n${BODY}\r\n0\r\n\r\n`,
      400,
      'GW_BAD_REQUEST_SYNTAX',
    ],
    [
      'a malformed request line',
      'POST /v1/chat/completions HTTP/1.1 extra\r\nhost: gateway.test',
      '',
      400,
      'GW_BAD_REQUEST_SYNTAX',
    ],
    ['a header line without a colon', post(['this is not a header']), '', 400, 'GW_BAD_REQUEST_SYNTAX'],
    [
      'headers over 16 KiB',
      post([`x-padding: ${'p'.repeat(20 * 1024)}`, 'content-length: 0']),
      '',
      431,
      'GW_HEADERS_TOO_LARGE',
    ],
  ])('answers %s with an OpenAI-shaped error, then closes', async (_what, head, body, status, code) => {
    const before = await engineCalls();
    const answer = await rawRequest(gw, head, body);
    expect(answer.status, answer.raw).toBe(status);
    expect(answer.headers['content-type']).toBe('application/json');
    expect(answer.headers.connection).toBe('close');
    expect(answer.headers['x-request-id']).toMatch(/^[\x21-\x7e]{1,200}$/);
    const parsed = JSON.parse(answer.body) as { error: { code: string; type: string; message: string } };
    expect(parsed.error).toMatchObject({ code, type: 'invalid_request_error' });
    expect(parsed.error.message.length).toBeGreaterThan(0);
    expect(answer.closed).toBe(true);
    // Refused before a runner was asked: the engine saw nothing.
    expect(await engineCalls()).toBe(before);
  });

  it("names the request with the client's own x-request-id when its headers were read before the framing broke", async () => {
    const answer = await rawRequest(
      gw,
      post(['transfer-encoding: chunked', 'x-request-id: client-chosen-42']),
      `zz\r\n${BODY}\r\n0\r\n\r\n`,
    );
    expect(answer.status, answer.raw).toBe(400);
    expect(answer.headers['x-request-id']).toBe('client-chosen-42');
    expect(JSON.parse(answer.body).error.code).toBe('GW_BAD_REQUEST_SYNTAX');
  });

  it('keeps serving after refusing a request it could not parse', async () => {
    const before = await engineCalls();
    await rawRequest(gw, post(['transfer-encoding: chunked']), 'not-a-chunk-size\r\n\r\n');
    const ok = await postJson(`${gw}/v1/chat/completions`, BODY);
    expect(ok.status).toBe(200);
    expect(ok.json.object).toBe('chat.completion');
    expect(await engineCalls()).toBe(before + 1);
  });
});
