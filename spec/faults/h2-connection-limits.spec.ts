/**
 * Fault: HTTP/2 escaped the front's per-client bounds. A client past --max-connections-per-client
 * was refused only on HTTP/1.1: an HTTP/2 session past it was counted but served. And an HTTP/2
 * session could open any number of streams at once (Node's default SETTINGS_MAX_CONCURRENT_STREAMS
 * is 2^32 - 1), each one a request the gateway buffers and places.
 *
 * Real sockets on 127.0.0.1, Node's own HTTP/2 client and undici's HTTP/1.1 one, against a
 * gateway on its TLS front (in-process, with a runner and a simulated engine).
 */
import type { ClientHttp2Session, IncomingHttpHeaders } from 'node:http2';
import { Agent, request } from 'undici';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { makeCa } from '../support/certs.ts';
import type { TestCa } from '../support/certs.ts';
import { chatBody, eventually } from '../support/fleet.ts';
import { h2Call, startH2Fleet } from '../support/h2-fleet.ts';
import type { H2Fleet } from '../support/h2-fleet.ts';

let ca: TestCa;
beforeAll(() => {
  ca = makeCa('h2-limits');
});
afterAll(() => ca.remove());

let fleet: H2Fleet;
const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!().catch(() => undefined);
  await fleet?.stop();
});

/** GET `path` on `session`: the answer's status, and its body parsed. */
function get(session: ClientHttp2Session, path: string): Promise<{ headers: IncomingHttpHeaders; json: any }> {
  return new Promise((resolve, reject) => {
    const stream = session.request({ ':method': 'GET', ':path': path });
    const chunks: Buffer[] = [];
    let headers: IncomingHttpHeaders = {};
    stream.on('response', (h) => (headers = h));
    stream.on('data', (chunk: Buffer) => chunks.push(chunk));
    stream.on('error', reject);
    stream.on('end', () => resolve({ headers, json: JSON.parse(Buffer.concat(chunks).toString('utf8')) }));
  });
}

/** Resolves once every frame sent on `session` before it has been read by the gateway. */
function pinged(session: ClientHttp2Session): Promise<void> {
  return new Promise((resolve, reject) => session.ping((error) => (error ? reject(error) : resolve())));
}

describe('HTTP/2 sessions against --max-connections-per-client', () => {
  it('refuses a request on a session past the limit with 429 and tells the session to go away', async () => {
    fleet = await startH2Fleet(ca, { maxConnectionsPerClient: 1 });
    const first = await fleet.session();
    expect((await get(first, '/healthz')).headers[':status']).toBe(200);

    const second = await fleet.session();
    const goaway = new Promise<void>((resolve) => second.once('goaway', () => resolve()));
    const refused = await get(second, '/healthz');
    expect(refused.headers[':status']).toBe(429);
    expect(refused.json.error.code).toBe('GW_TOO_MANY_CONNECTIONS');
    expect(refused.headers['retry-after']).toBeDefined();
    await goaway;

    // The first session's close gives its place back.
    first.close();
    await eventually(
      async () => {
        const third = await fleet.session();
        const answer = await get(third, '/healthz').catch(() => undefined);
        third.destroy();
        return Number(answer?.headers[':status']) === 200;
      },
      5000,
      'a new session to be served once the first closed',
    );
  });

  it('counts HTTP/1.1 connections and HTTP/2 sessions of one client together', async () => {
    fleet = await startH2Fleet(ca, { maxConnectionsPerClient: 1 });
    // undici without allowH2 offers only http/1.1 in ALPN: one kept-alive HTTP/1.1 connection.
    const http1 = new Agent({ connect: { ca: ca.cert } });
    cleanups.push(() => http1.close());
    const kept = await request(`${fleet.url}/healthz`, { dispatcher: http1 });
    expect(kept.statusCode).toBe(200);
    await kept.body.text();

    const session = await fleet.session();
    const refused = await get(session, '/healthz');
    expect(refused.headers[':status']).toBe(429);
    expect(refused.json.error.code).toBe('GW_TOO_MANY_CONNECTIONS');
  });

  it('refuses a call on a session past the limit before reading its body', async () => {
    fleet = await startH2Fleet(ca, { maxConnectionsPerClient: 1 });
    const first = await fleet.session();
    expect((await get(first, '/healthz')).headers[':status']).toBe(200);
    const call = h2Call(await fleet.session(), '/v1/chat/completions', chatBody());
    expect((await call.head)?.[':status']).toBe(429);
    await call.closed;
    expect((await fleet.counts()).engineCalls).toBe(0);
  });
});

describe('streams per HTTP/2 session', () => {
  it("advertises --max-streams-per-connection and never has more of one session's requests at once", async () => {
    fleet = await startH2Fleet(ca, { maxStreamsPerConnection: 2 });
    const session = await fleet.session();
    await new Promise<void>((resolve) =>
      session.remoteSettings.maxConcurrentStreams === 2 ? resolve() : session.once('remoteSettings', () => resolve()),
    );
    expect(session.remoteSettings.maxConcurrentStreams).toBe(2);

    // Two uploads that stall after their first bytes, each holding its stream open, then a
    // whole call: it may start only once one of them ends.
    const open = { open: true, headers: { 'content-length': '200' } } as const;
    const stalled = [0, 1].map(() => h2Call(session, '/v1/chat/completions', '{"model": "sim-small"', open));
    const whole = h2Call(session, '/v1/chat/completions', chatBody());
    await eventually(async () => (await fleet.counts()).uploads === 2, 5000, 'two uploads');
    // Every frame the client sent is in by now: the whole call's stream was not among them.
    await pinged(session);
    expect(await fleet.counts()).toMatchObject({ uploads: 2, inFlight: 0, engineCalls: 0 });

    // One stream ends: the whole call is let in, and runs.
    stalled[0]!.stream.close();
    await eventually(async () => (await fleet.counts()).engineRunning === 1, 5000, 'the whole call to run');
    expect(await fleet.counts()).toMatchObject({ uploads: 1, inFlight: 1 });
    whole.stream.close();
  });

  it('refuses a maxStreamsPerConnection that is not a positive integer', async () => {
    const { resolveGatewayOptions } = await import('../../gateway/options.ts');
    expect(() => resolveGatewayOptions({ runners: ['http://127.0.0.1:9'], maxStreamsPerConnection: 0 })).toThrow(
      /maxStreamsPerConnection must be a positive integer, got 0/,
    );
    expect(() => resolveGatewayOptions({ runners: ['http://127.0.0.1:9'], maxStreamsPerConnection: 2 ** 32 })).toThrow(
      /maxStreamsPerConnection must be at most 4294967295/,
    );
  });
});
