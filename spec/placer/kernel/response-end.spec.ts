/**
 * cutShort and onCutShort on real servers on 127.0.0.1: an HTTP/1.1 server and an HTTP/2 one
 * (TLS, Node's compatibility API, as the gateway's front), each with a whole answer, a stream
 * reset or a connection dropped by the client, and a response that already closed before the
 * listener was added.
 */
import { createServer, request } from 'node:http';
import type { Server, ServerResponse } from 'node:http';
import { connect, constants, createSecureServer } from 'node:http2';
import type { Http2SecureServer, Http2ServerResponse } from 'node:http2';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { cutShort, onCutShort } from '../../../placer/kernel/index.ts';
import type { AnyServerResponse } from '../../../placer/kernel/index.ts';
import { makeCa } from '../../support/certs.ts';
import type { TestCa } from '../../support/certs.ts';

/** What the server saw of one response: its judgement at 'close', and whether onCutShort ran. */
interface Seen {
  atClose: boolean;
  gone: boolean;
  /** onCutShort added once the response had closed already. */
  lateGone: boolean;
}

let ca: TestCa;
beforeAll(() => {
  ca = makeCa('response-end');
});
afterAll(() => ca.remove());

const servers: Array<Server | Http2SecureServer> = [];
afterEach(async () => {
  for (const s of servers.splice(0)) await new Promise((resolve) => s.close(resolve));
});

/**
 * Starts a server whose handler `answer` writes (or not) the response; resolves the first
 * request's {@link Seen} once its response closed.
 */
async function serve(
  kind: 'http1' | 'http2',
  answer: (res: AnyServerResponse) => void,
): Promise<{ port: number; seen: Promise<Seen> }> {
  let report!: (seen: Seen) => void;
  const seen = new Promise<Seen>((resolve) => (report = resolve));
  const handler = (_req: unknown, res: ServerResponse | Http2ServerResponse): void => {
    let gone = false;
    onCutShort(res, () => (gone = true));
    res.once('close', () => {
      const atClose = cutShort(res);
      setImmediate(() => {
        let lateGone = false;
        onCutShort(res, () => (lateGone = true));
        report({ atClose, gone, lateGone });
      });
    });
    answer(res);
  };
  const server = kind === 'http1' ? createServer(handler) : createSecureServer(ca.issue('srv'), handler);
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { port: (server.address() as AddressInfo).port, seen };
}

const whole = (res: AnyServerResponse): void => {
  res.writeHead(200);
  res.end('done');
};
const endless = (res: AnyServerResponse): void => {
  res.writeHead(200);
  // Either protocol's write takes a string; TypeScript cannot call the union.
  (res as ServerResponse).write('first');
};

describe('cutShort on HTTP/2', () => {
  async function call(answer: (res: AnyServerResponse) => void, leave: 'read' | 'reset' | 'drop'): Promise<Seen> {
    const { port, seen } = await serve('http2', answer);
    const session = connect(`https://127.0.0.1:${port}`, { ca: ca.cert });
    session.on('error', () => undefined);
    const stream = session.request({ ':method': 'POST', ':path': '/' });
    stream.on('error', () => undefined);
    stream.end('body');
    stream.once('data', () => {
      if (leave === 'reset') stream.close(constants.NGHTTP2_CANCEL);
      if (leave === 'drop') session.destroy();
    });
    stream.resume();
    const result = await seen;
    session.destroy();
    return result;
  }

  it('returns false when the answer ended whole', async () => {
    expect(await call(whole, 'read')).toEqual({ atClose: false, gone: false, lateGone: false });
  });

  it('returns true when the client reset the stream mid-answer', async () => {
    expect(await call(endless, 'reset')).toEqual({ atClose: true, gone: true, lateGone: true });
  });

  it('returns true when the client dropped the connection mid-answer', async () => {
    expect(await call(endless, 'drop')).toEqual({ atClose: true, gone: true, lateGone: true });
  });
});

describe('cutShort on HTTP/1.1', () => {
  async function call(answer: (res: AnyServerResponse) => void, leave: 'read' | 'drop'): Promise<Seen> {
    const { port, seen } = await serve('http1', answer);
    const req = request({ host: '127.0.0.1', port, method: 'POST', path: '/', agent: false }, (res) => {
      res.once('data', () => {
        if (leave === 'drop') req.destroy();
      });
      res.resume();
    });
    req.on('error', () => undefined);
    req.end('body');
    return seen;
  }

  it('returns false when the answer ended whole', async () => {
    expect(await call(whole, 'read')).toEqual({ atClose: false, gone: false, lateGone: false });
  });

  it('returns true when the client dropped the connection mid-answer', async () => {
    expect(await call(endless, 'drop')).toEqual({ atClose: true, gone: true, lateGone: true });
  });
});
