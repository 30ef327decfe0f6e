import { createServer, request as httpRequest } from 'node:http';
import type { IncomingHttpHeaders, IncomingMessage, Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { endToEndHeaders, startBareProxy } from '../../k6/driver/bare-proxy.ts';
import type { BareProxyProcess } from '../../k6/driver/bare-proxy.ts';

describe('endToEndHeaders', () => {
  it('drops the hop-by-hop headers and those the connection header names, and keeps the rest', () => {
    const headers = {
      connection: 'keep-alive, X-Hop',
      'keep-alive': 'timeout=5',
      'transfer-encoding': 'chunked',
      te: 'trailers',
      upgrade: 'h2c',
      'x-hop': '1',
      'content-type': 'application/json',
      'x-end': ['a', 'b'],
    };
    expect(endToEndHeaders(headers)).toEqual({ 'content-type': 'application/json', 'x-end': ['a', 'b'] });
  });

  it('drops the extra names asked for', () => {
    expect(endToEndHeaders({ host: 'a', 'content-length': '2', accept: '*/*' }, ['host', 'content-length'])).toEqual({
      accept: '*/*',
    });
  });
});

describe('startBareProxy', () => {
  let upstream: Server;
  let proxy: BareProxyProcess;
  let seen: { headers: IncomingHttpHeaders; body: string }[] = [];
  // The streaming route sends its second chunk only once the test has read the first.
  let releaseSecond: () => void = () => undefined;

  beforeAll(async () => {
    upstream = createServer((req, res) => {
      const parts: Buffer[] = [];
      req.on('data', (c: Buffer) => parts.push(c));
      req.on('end', () => {
        seen.push({ headers: req.headers, body: Buffer.concat(parts).toString('utf8') });
        if (req.url === '/stream') {
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          res.write('data: 1\n\n');
          releaseSecond = () => res.end('data: 2\n\n');
          return;
        }
        res.writeHead(201, {
          'content-type': 'application/json',
          connection: 'keep-alive, x-hop',
          'x-hop': 'secret',
          'x-end': 'kept',
        });
        res.end(JSON.stringify({ echoed: parts.length > 0 }));
      });
    });
    await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
    proxy = await startBareProxy(`http://127.0.0.1:${(upstream.address() as AddressInfo).port}`, process.env);
  });
  afterAll(async () => {
    await proxy?.stop();
    await new Promise<void>((resolve) => upstream.close(() => resolve()));
  });

  it('relays the call with its body and end-to-end headers, and the answer without hop-by-hop headers', async () => {
    seen = [];
    // node:http rather than undici, which sets the connection header itself.
    const res = await new Promise<IncomingMessage>((resolve, reject) => {
      const req = httpRequest(
        `${proxy.url}/v1/chat/completions?x=1`,
        {
          method: 'POST',
          agent: false,
          headers: {
            'content-type': 'application/json',
            connection: 'keep-alive, x-client-hop',
            'x-client-hop': '1',
            te: 'trailers',
            'x-trace': 't1',
          },
        },
        resolve,
      );
      req.on('error', reject);
      req.end('{"model":"m"}');
    });
    const parts: Buffer[] = [];
    for await (const chunk of res) parts.push(chunk as Buffer);
    expect(res.statusCode).toBe(201);
    expect(JSON.parse(Buffer.concat(parts).toString('utf8'))).toEqual({ echoed: true });
    expect(res.headers['x-end']).toBe('kept');
    expect(res.headers['x-hop']).toBeUndefined();
    expect(seen).toHaveLength(1);
    expect(seen[0]!.body).toBe('{"model":"m"}');
    expect(seen[0]!.headers).toMatchObject({
      'content-type': 'application/json',
      'x-trace': 't1',
      'content-length': '13',
    });
    expect(seen[0]!.headers['x-client-hop']).toBeUndefined();
    expect(seen[0]!.headers.te).toBeUndefined();
  });

  it('passes a streamed answer on chunk by chunk, not once it has ended', async () => {
    const res = await request(`${proxy.url}/stream`, { method: 'POST', body: '{}' });
    const chunks: string[] = [];
    for await (const chunk of res.body) {
      chunks.push(String(chunk));
      // The upstream has not ended: this first chunk reached the client while the answer was open.
      if (chunks.length === 1) releaseSecond();
    }
    expect(chunks.join('')).toBe('data: 1\n\ndata: 2\n\n');
    expect(chunks[0]).toBe('data: 1\n\n');
  });

  it('answers 502 when the upstream cannot be reached', async () => {
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const port = (closed.address() as AddressInfo).port;
    await new Promise<void>((resolve) => closed.close(() => resolve()));
    const orphan = await startBareProxy(`http://127.0.0.1:${port}`, process.env);
    try {
      const res = await request(`${orphan.url}/x`, { method: 'POST', body: '{}' });
      expect(res.statusCode).toBe(502);
      await res.body.dump();
    } finally {
      await orphan.stop();
    }
    expect(orphan.child.exitCode !== null || orphan.child.signalCode !== null).toBe(true);
  });
});
