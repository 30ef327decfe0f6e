/**
 * Fault: the gateway routed on one path and forwarded another. A target with dot segments
 * (`/invoke/x/../../v1/completions`, or the same percent-encoded) was routed after the URL
 * parser resolved the dots, then forwarded raw; an absolute-form target
 * (`POST http://169.254.169.254/v1/completions`) reached the engine verbatim; headers a
 * `Connection` header named crossed hops both ways. Now such targets are refused with 400
 * GW_INVALID_PATH before anything else, the runner gets exactly the path that was routed (with
 * the query), and connection-nominated headers stop at each hop.
 *
 * The engine here records what reached it, so the spec sees the far end of the wire.
 */
import type { IncomingHttpHeaders } from 'node:http';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { rawRequest } from '../support/raw.ts';
import { startInProcessFront, startScriptedEngine } from '../support/scripted-engine.ts';
import type { InProcessFront } from '../support/scripted-engine.ts';

/** What reached the engine. */
interface Seen {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
}

/** An OpenAI-ish engine that serves `sim-small`, records every call, and answers each with JSON. */
const recordingEngine = (seen: Seen[]) =>
  startScriptedEngine(['sim-small'], (req, res) => {
    seen.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers });
    req.resume();
    req.once('end', () => {
      // A header of the engine's own, marked by its Connection header as meant for this hop only.
      res.writeHead(200, {
        'content-type': 'application/json',
        connection: 'keep-alive, x-engine-hop',
        'x-engine-hop': 'engine-private',
        'x-engine-kept': 'yes',
      });
      res.end(JSON.stringify({ object: 'text_completion', path: req.url }));
    });
  });

const BODY = JSON.stringify({ model: 'sim-small', prompt: 'hi' });
const head = (target: string, extra: string[] = []) =>
  [
    `POST ${target} HTTP/1.1`,
    'host: gateway.test',
    'content-type: application/json',
    `content-length: ${Buffer.byteLength(BODY)}`,
    'connection: close',
    ...extra,
  ].join('\r\n');

describe('fault: routing one path and forwarding another', () => {
  const seen: Seen[] = [];
  let front: InProcessFront;
  let gw: string;

  beforeAll(async () => {
    front = await startInProcessFront(await recordingEngine(seen));
    gw = front.url;
  });
  afterAll(() => front?.close());
  beforeEach(() => {
    seen.length = 0;
  });

  it.each([
    ['dot segments', '/invoke/x/../../v1/completions'],
    ['a single dot segment', '/v1/./completions'],
    ['percent-encoded dots', '/v1/chat/%2e%2e/completions'],
    ['upper-case percent-encoded dots', '/v1/chat/%2E%2E/completions'],
    ['dots behind encoded slashes', '/invoke/x%2F..%2F..%2Fv1%2Fcompletions'],
    ['encoded dots behind encoded slashes', '/invoke/x%2f%2e%2e%2f%2e%2e%2fv1%2fcompletions'],
    ['an absolute-form target', 'http://169.254.169.254/v1/completions'],
    ['an absolute-form target naming the gateway itself', 'http://gateway.test/v1/completions'],
    ['an asterisk-form target', '*'],
    ['a backslash in the path', '/invoke/x\\..\\..\\v1\\completions'],
  ])('refuses %s with 400 GW_INVALID_PATH and sends nothing on', async (_what, target) => {
    const answer = await rawRequest(gw, head(target), BODY);
    expect(answer.status, answer.raw).toBe(400);
    expect(answer.headers['content-type']).toMatch(/^application\/json/);
    const error = JSON.parse(answer.body).error;
    expect(error).toMatchObject({ code: 'GW_INVALID_PATH', type: 'invalid_request_error' });
    expect(error.message).toContain(JSON.stringify(target));
    expect(seen).toEqual([]);
  });

  it('refuses a dot segment on a route that is not a call', async () => {
    const answer = await rawRequest(
      gw,
      ['GET /v1/calls/x/../../healthz HTTP/1.1', 'host: gateway.test', 'connection: close'].join('\r\n'),
    );
    expect(answer.status, answer.raw).toBe(400);
    expect(JSON.parse(answer.body).error.code).toBe('GW_INVALID_PATH');
  });

  it('forwards the path it routed, not the bytes the client spelled it with, and keeps the query', async () => {
    const answer = await rawRequest(gw, head('/v1/%63ompletions?api-version=2024-10-21&x=%2e%2e'), BODY);
    expect(answer.status, answer.raw).toBe(200);
    expect(seen.map((s) => s.url)).toEqual(['/v1/completions?api-version=2024-10-21&x=%2e%2e']);
  });

  it('forwards an /invoke function name holding an encoded slash as one segment, once', async () => {
    const answer = await rawRequest(gw, head('/invoke/org%2Fmodel'), BODY);
    expect(answer.status, answer.raw).toBe(200);
    expect(seen.map((s) => s.url)).toEqual(['/invoke/org%2Fmodel']);
  });

  it('drops headers the Connection header names, toward the engine and back to the client', async () => {
    const answer = await rawRequest(
      gw,
      head('/v1/completions', ['connection: x-client-hop', 'x-client-hop: client-private', 'x-client-kept: yes']),
      BODY,
    );
    expect(answer.status, answer.raw).toBe(200);
    expect(seen).toHaveLength(1);
    expect(seen[0]!.headers['x-client-hop']).toBeUndefined();
    expect(seen[0]!.headers['x-client-kept']).toBe('yes');
    expect(answer.headers['x-engine-hop']).toBeUndefined();
    expect(answer.headers['x-engine-kept']).toBe('yes');
  });
});
