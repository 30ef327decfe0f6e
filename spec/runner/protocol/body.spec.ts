/**
 * runner/protocol/body.ts, the body reader and the body pump shared by the runner and the gateway, over
 * real sockets on 127.0.0.1. The gateway's bounds and errors on top of the reader are
 * spec/gateway/http/body.spec.ts; the runner's are spec/runner/server.spec.ts.
 */
import { createServer } from 'node:http';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { connect } from 'node:net';
import type { AddressInfo, Socket } from 'node:net';
import { Readable } from 'node:stream';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { pumpBody, readBody } from '../../../runner/protocol/body.ts';
import type { BodyRead } from '../../../runner/protocol/body.ts';
import { eventually } from '../../support/fleet.ts';

const cleanups: Array<() => Promise<unknown> | void> = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!();
});

/** A server on port 0 that hands every request to `handle`. */
async function serverFor(handle: (req: IncomingMessage, res: ServerResponse) => void): Promise<number> {
  const server: Server = createServer(handle);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return (server.address() as AddressInfo).port;
}

function socketTo(port: number): Socket {
  const socket = connect(port, '127.0.0.1');
  socket.on('error', () => {});
  cleanups.push(() => void socket.destroy());
  return socket;
}

/** Errors the caller builds, so a spec sees which one the reader raised and with what. */
class Refused extends Error {
  constructor(
    readonly why: string,
    readonly declared?: number,
  ) {
    super(why);
  }
}

const bounds = (extra: Partial<BodyRead> = {}): BodyRead => ({
  maxBytes: 16,
  tooLarge: (declared) => new Refused('too large', declared),
  closed: () => new Refused('closed'),
  ...extra,
});

/**
 * Starts a server that reads one body with `read` and reports how reading it ended; `started`
 * once the reader takes the body as it comes (the body is the reader's alone: nothing else
 * listens to it).
 */
async function reading(
  read: BodyRead,
): Promise<{ port: number; outcome: Promise<Buffer | Refused | Error>; started: () => Promise<void> }> {
  let settle!: (outcome: Buffer | Refused | Error) => void;
  const outcome = new Promise<Buffer | Refused | Error>((resolve) => (settle = resolve));
  let request: IncomingMessage | undefined;
  const port = await serverFor((req, res) => {
    request = req;
    readBody(req, read).then(settle, settle);
    res.on('error', () => {});
    void outcome.then(() => res.end());
  });
  return { port, outcome, started: () => eventually(() => request?.readableFlowing === true) };
}

const head = (headers: string): string => `POST / HTTP/1.1\r\nhost: 127.0.0.1\r\n${headers}\r\n`;

describe('readBody', () => {
  it('returns the whole body when it stays within maxBytes', async () => {
    const { port, outcome } = await reading(bounds());
    socketTo(port).write(`${head('content-length: 16\r\n')}0123456789abcdef`);
    expect(((await outcome) as Buffer).toString()).toBe('0123456789abcdef');
  });

  it("rejects with the caller's tooLarge, given the declared length, when content-length alone passes maxBytes", async () => {
    const { port, outcome } = await reading(bounds());
    socketTo(port).write(head('content-length: 17\r\n'));
    const error = await outcome;
    expect(error).toBeInstanceOf(Refused);
    expect(error).toMatchObject({ why: 'too large', declared: 17 });
  });

  it("rejects with the caller's tooLarge, given no length, once the bytes received pass maxBytes", async () => {
    const { port, outcome } = await reading(bounds());
    socketTo(port).write(`${head('transfer-encoding: chunked\r\n')}a\r\n0123456789\r\na\r\n0123456789\r\n`);
    const error = await outcome;
    expect(error).toBeInstanceOf(Refused);
    expect(error).toMatchObject({ why: 'too large', declared: undefined });
  });

  it("rejects with the stream's own error when the peer resets the connection mid-body", async () => {
    const { port, outcome, started } = await reading(bounds());
    const socket = socketTo(port);
    socket.write(`${head('content-length: 16\r\n')}0123`);
    await started();
    socket.resetAndDestroy();
    const error = await outcome;
    expect(error).not.toBeInstanceOf(Refused);
    expect(error).toMatchObject({ code: 'ECONNRESET' });
  });

  it("rejects with the idle bound's error when the body stalls between chunks", async () => {
    const { port, outcome } = await reading(bounds({ idle: { ms: 50, error: () => new Refused('idle') } }));
    socketTo(port).write(`${head('content-length: 16\r\n')}0123`);
    expect(await outcome).toMatchObject({ why: 'idle' });
  });

  it("rejects with the timeout's error when the whole body takes longer, though bytes keep coming", async () => {
    const { port, outcome } = await reading(
      bounds({
        maxBytes: 1024,
        timeout: { ms: 300, error: () => new Refused('timeout') },
        idle: { ms: 2_000, error: () => new Refused('idle') },
      }),
    );
    const socket = socketTo(port);
    socket.write(head('content-length: 1024\r\n'));
    // A byte every 20 ms keeps the idle bound quiet (it is long, so a busy machine's late drip
    // cannot trip it); only the whole-body bound can end this before the 1024 bytes are in.
    const drip = setInterval(() => socket.write('x'), 20);
    cleanups.push(() => clearInterval(drip));
    expect(await outcome).toMatchObject({ why: 'timeout' });
  });

  it('takes a body whose declared bytes are all here already as it is: no listener, no timer', async () => {
    const watched: { listened: string[]; body: Promise<Buffer> }[] = [];
    const port = await serverFor((req, res) => {
      const ready = (): void => {
        if (req.readableLength < 10) return void setImmediate(ready);
        const on = vi.spyOn(req, 'on');
        const once = vi.spyOn(req, 'once');
        const timeout = { ms: 0, error: () => new Refused('a timer was armed') };
        const body = readBody(req, bounds({ timeout, idle: timeout }));
        const listened = [...on.mock.calls, ...once.mock.calls].map(([event]) => String(event));
        watched.push({ listened, body });
        void body.then(
          () => res.end(),
          () => res.end(),
        );
      };
      ready();
    });
    socketTo(port).write(`${head('content-length: 10\r\n')}0123456789`);
    await eventually(() => watched.length === 1);
    expect((await watched[0]!.body).toString()).toBe('0123456789');
    expect(watched[0]!.listened).toEqual([]);
  });
});

describe('pumpBody', () => {
  it('pauses the source while the peer does not read and resumes it on drain, every byte in order', async () => {
    const chunkSize = 64 * 1024;
    const chunks = 256; // 16 MiB: far more than the socket buffers on both sides hold.
    let pulled = 0;
    let source!: Readable;
    const port = await serverFor((_req, res) => {
      source = new Readable({
        highWaterMark: chunkSize,
        read() {
          if (pulled === chunks) return void this.push(null);
          this.push(Buffer.alloc(chunkSize, pulled % 251));
          pulled++;
        },
      });
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': chunks * chunkSize });
      pumpBody(source, res, (chunk) => res.write(chunk));
      source.once('end', () => res.end());
    });
    const socket = socketTo(port);
    const received: Buffer[] = [];
    socket.on('data', (data: Buffer) => received.push(data));
    socket.write('GET / HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n');
    await eventually(() => received.length > 0);
    socket.pause();
    await eventually(() => source.isPaused(), 5000, 'the source paused');
    const whilePaused = pulled;
    expect(whilePaused).toBeLessThan(chunks);
    socket.resume();
    await new Promise((resolve) => socket.once('close', resolve));
    expect(pulled).toBe(chunks);
    const text = Buffer.concat(received);
    const body = text.subarray(text.indexOf('\r\n\r\n') + 4);
    expect(body.length).toBe(chunks * chunkSize);
    // Each chunk is filled with its own index (mod 251): every one arrived, whole and in order.
    const wrong = Array.from({ length: chunks }, (_, i) => i).filter((i) => {
      const part = body.subarray(i * chunkSize, (i + 1) * chunkSize);
      return part[0] !== i % 251 || part[chunkSize - 1] !== i % 251 || part.some((b) => b !== i % 251);
    });
    expect(wrong).toEqual([]);
  });

  it('passes each chunk to write and writes nothing itself: a write that holds a chunk back sends nothing', async () => {
    const port = await serverFor((_req, res) => {
      const source = Readable.from([Buffer.from('held'), Buffer.from('sent')], { objectMode: false });
      res.writeHead(200, { 'content-type': 'text/plain' });
      pumpBody(source, res, (chunk) => (chunk.toString() === 'held' ? true : res.write(chunk)));
      source.once('end', () => res.end());
    });
    const socket = socketTo(port);
    const received: Buffer[] = [];
    socket.on('data', (data: Buffer) => received.push(data));
    socket.write('GET / HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n');
    await new Promise((resolve) => socket.once('close', resolve));
    const text = Buffer.concat(received).toString();
    expect(text).toContain('sent');
    expect(text).not.toContain('held');
  });
});
