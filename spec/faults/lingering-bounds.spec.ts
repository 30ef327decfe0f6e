/**
 * The lingering close (placer/kernel/linger.ts) is bounded: a client cannot hold a connection
 * open by trickling bytes after an early answer (closed at `time`), by sending nothing (closed
 * at `idle`), or by sending a flood (closed past `maxBytes`). A body that ends within the bounds
 * closes cleanly, or keeps a keep-alive connection for its next request.
 *
 * The bounds on the fake clock, over real sockets on 127.0.0.1; then the gateway's own options,
 * on real time with bounds far apart so that load cannot make one pass for the other.
 */
import { createServer } from 'node:http';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { connect } from 'node:net';
import type { AddressInfo, Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { createGateway } from '../../gateway/server.ts';
import type { Gateway } from '../../gateway/server.ts';
import { lingerAfterAnswer } from '../../placer/kernel/index.ts';
import type { LingerOutcome, Lingering, LogFields, Logger } from '../../placer/kernel/index.ts';
import { FakeClock, T0 } from '../placer/fake.ts';
import { eventually } from '../support/fleet.ts';

/** A client connection: what it received, and how the server ended it. */
interface Client {
  socket: Socket;
  text(): string;
  /** True once the server ended its side (sent its FIN). */
  ended: boolean;
  /** The error the connection failed with (ECONNRESET, EPIPE), if any. */
  error: string | undefined;
  /** When the connection closed on this side (`performance.now()`); undefined while open. */
  closedAt: number | undefined;
}

/**
 * Connects and sends `head` (a request's head, without its body), keeping what comes back. The
 * connection stays open for writing after the server's end of it, as a client still sending its
 * body does.
 */
function open(url: string, head: string): Client {
  const { hostname, port } = new URL(url);
  const socket = connect({ port: Number(port), host: hostname, allowHalfOpen: true });
  const chunks: Buffer[] = [];
  const client: Client = {
    socket,
    text: () => Buffer.concat(chunks).toString('utf8'),
    ended: false,
    error: undefined,
    closedAt: undefined,
  };
  socket.on('data', (chunk: Buffer) => chunks.push(chunk));
  socket.on('end', () => (client.ended = true));
  socket.on('error', (error: NodeJS.ErrnoException) => (client.error = error.code ?? error.message));
  socket.on('close', () => (client.closedAt = performance.now()));
  socket.write(`${head}\r\n\r\n`);
  return client;
}

/** A POST head declaring `length` bytes of body. */
const postHead = (length: number, path = '/v1/chat/completions') =>
  `POST ${path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: ${length}`;

/** Lets the clock's woken sleepers run (a few turns of the event loop). */
async function settle(): Promise<void> {
  for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
}

const ANSWER = JSON.stringify({
  error: { message: 'too large', type: 'invalid_request_error', code: 'SPEC_TOO_LARGE' },
});
const BOUNDS = { time: 1000, idle: 300, maxBytes: 100 };

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!();
});

/** The test server: its URL, the lingerings and their outcomes, and its connections still open. */
interface EarlyServer {
  url: string;
  lingerings: Lingering[];
  outcomes: LingerOutcome[];
  open(): number;
}

/**
 * A server that answers every request 413 at once, before its body, with `connection: close`
 * or keeping the connection alive, lingering on `clock` within BOUNDS.
 */
async function earlyServer(clock: FakeClock, connection: 'close' | 'keep-alive'): Promise<EarlyServer> {
  const lingerings: Lingering[] = [];
  const outcomes: LingerOutcome[] = [];
  let connections = 0;
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    lingerings.push(lingerAfterAnswer(req, res, { ...BOUNDS, clock, onEnd: (o) => outcomes.push(o) }));
    res.writeHead(413, {
      'content-type': 'application/json',
      'content-length': Buffer.byteLength(ANSWER),
      ...(connection === 'close' ? { connection: 'close' } : {}),
    });
    res.end(ANSWER);
  });
  server.on('connection', (socket: Socket) => {
    connections++;
    socket.once('close', () => connections--);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  cleanups.push(
    () => new Promise((r) => server.close(r)),
    () => server.closeAllConnections(),
  );
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    lingerings,
    outcomes,
    open: () => connections,
  };
}

/**
 * A fresh early server on a fake clock, and a client that sent it a head declaring `length`
 * bytes of body, once the client has its 413.
 */
async function answered(
  length: number,
  connection: 'close' | 'keep-alive' = 'close',
): Promise<EarlyServer & { clock: FakeClock; client: Client }> {
  const clock = new FakeClock();
  const early = await earlyServer(clock, connection);
  const client = open(early.url, postHead(length));
  cleanups.push(() => client.socket.destroy());
  await eventually(() => client.text().includes('SPEC_TOO_LARGE'), 5000, 'the answer');
  return { ...early, clock, client };
}

/** Checks, once the woken sleepers ran, that `early` still lingers: no outcome yet, the socket open. */
async function stillLingering(early: EarlyServer): Promise<void> {
  await settle();
  expect(early.outcomes).toEqual([]);
  expect(early.open()).toBe(1);
}

/** Waits for the one lingering of `early` to end; its outcome. */
async function endOf(early: EarlyServer): Promise<LingerOutcome> {
  await eventually(() => early.outcomes.length === 1, 5000, 'the lingering to end');
  return early.outcomes[0]!;
}

describe('lingering close: its bounds, on the fake clock', () => {
  it('closes a client that keeps trickling bytes at `time`, though it never went quiet for `idle`', async () => {
    const early = await answered(1_000_000);
    const { clock, client, lingerings, outcomes } = early;
    await clock.untilSleeping();
    // A byte every 250 ms of fake time, under the 300 ms idle bound, up to the 1000 ms bound.
    for (let sent = 1; sent <= 4; sent++) {
      expect(outcomes).toEqual([]);
      client.socket.write('a');
      await eventually(() => lingerings[0]!.bytes === sent, 5000, `byte ${sent} read`);
      clock.advance(250);
      await settle();
    }
    expect(clock.now()).toBe(T0 + 1000);
    expect(await endOf(early)).toEqual({ end: 'time', bytes: 4, ms: 1000, closed: true });
    await eventually(() => early.open() === 0, 5000, "the server's socket closed");
  });

  it('closes a client that sends nothing after the answer at `idle`, not before', async () => {
    const early = await answered(1_000_000);
    const { clock } = early;
    await clock.untilSleeping();
    clock.advance(299);
    await stillLingering(early);
    clock.advance(1);
    expect(await endOf(early)).toEqual({ end: 'idle', bytes: 0, ms: 300, closed: true });
    await eventually(() => early.open() === 0, 5000, "the server's socket closed");
  });

  it('reads what arrived while the process was stalled before it judges `idle` passed', async () => {
    const early = await answered(1_000_000);
    const { clock, client, lingerings } = early;
    await clock.untilSleeping();
    // The client's byte reaches the server's socket, and in the same turn the idle bound passes,
    // as for a server stalled that long: its timers run before it reads the byte.
    await new Promise<void>((resolve) => client.socket.write('a', () => resolve()));
    clock.advance(300);
    await eventually(() => lingerings[0]!.bytes === 1, 5000, 'the byte read');
    await stillLingering(early);
    // Silence from that byte on: idle passes 300 ms after it.
    clock.advance(300);
    expect(await endOf(early)).toEqual({ end: 'idle', bytes: 1, ms: 600, closed: true });
  });

  it('closes a client at once when it sends more than `maxBytes` after the answer', async () => {
    const early = await answered(1_000_000);
    const { client, outcomes } = early;
    client.socket.write(Buffer.alloc(101, 'a'));
    expect(await endOf(early)).toMatchObject({ end: 'bytes', ms: 0, closed: true });
    expect(outcomes[0]!.bytes).toBeGreaterThan(100);
    await eventually(() => early.open() === 0, 5000, "the server's socket closed");
  });

  it('closes cleanly, without a reset, once the body ends within the bounds', async () => {
    const early = await answered(50);
    const { client } = early;
    client.socket.write(Buffer.alloc(50, 'a'));
    expect(await endOf(early)).toEqual({ end: 'ended', bytes: 50, ms: 0, closed: true });
    await eventually(() => early.open() === 0, 5000, "the server's socket closed");
    // The answer, then the end of the connection: no reset.
    await eventually(() => client.ended, 5000, "the server's end");
    expect(client.error).toBeUndefined();
  });

  it('keeps a keep-alive connection for its next request once the body ends within the bounds, and closes it at a bound', async () => {
    const early = await answered(50, 'keep-alive');
    const { clock, client, outcomes } = early;
    client.socket.write(Buffer.alloc(50, 'a'));
    await eventually(() => outcomes.length === 1, 5000, 'the first lingering to end');
    expect(outcomes[0]).toEqual({ end: 'ended', bytes: 50, ms: 0, closed: false });
    // The same connection takes the next request; its body never comes.
    client.socket.write(`${postHead(50)}\r\n\r\n`);
    await eventually(() => client.text().split('SPEC_TOO_LARGE').length === 3, 5000, 'the second answer');
    expect(client.ended).toBe(false);
    await clock.untilSleeping();
    clock.advance(300);
    await eventually(() => outcomes.length === 2, 5000, 'the second lingering to end');
    expect(outcomes[1]).toEqual({ end: 'idle', bytes: 0, ms: 300, closed: true });
    await eventually(() => early.open() === 0, 5000, "the server's socket closed");
  });
});

describe("lingering close: the gateway's bounds", () => {
  let gateway: Gateway | undefined;
  afterEach(async () => {
    await gateway?.close();
    gateway = undefined;
  });

  /**
   * A gateway with the given linger options (its runner a port nothing answers on: no call gets
   * that far), and the outcomes it logs.
   */
  async function gatewayWith(options: {
    lingerTime: number;
    lingerIdleTimeout: number;
  }): Promise<{ url: string; ended: LogFields[] }> {
    const ended: LogFields[] = [];
    const logger: Logger = {
      debug: (msg, fields) => (msg === 'lingering close ended' ? ended.push({ ...fields }) : undefined),
      info: () => {},
      warn: () => {},
      error: () => {},
      child: () => logger,
    };
    gateway = createGateway({ runners: ['http://127.0.0.1:1'], logger, ...options });
    return { url: (await gateway.listen()).url, ended };
  }

  it('closes a client that sends nothing after its 413 at lingerIdleTimeout', async () => {
    const { url, ended } = await gatewayWith({ lingerTime: 60_000, lingerIdleTimeout: 500 });
    const client = open(url, postHead(64 * 1024 * 1024));
    cleanups.push(() => client.socket.destroy());
    await eventually(() => client.text().includes('GW_BODY_TOO_LARGE'), 5000, 'the 413');
    expect(client.text()).toMatch(/^HTTP\/1\.1 413 /);
    await eventually(() => ended.length === 1, 15_000, 'the lingering to end');
    expect(ended[0]).toMatchObject({ end: 'idle', bytes: 0, closed: true });
    expect(ended[0]!.ms).toBeGreaterThanOrEqual(500);
    // The socket is gone: what the client sends now is refused (the first write draws the
    // reset, a later one fails on it).
    await eventually(
      () => client.closedAt !== undefined || (client.socket.write('a'), false),
      5000,
      "the client's writes refused",
    );
  }, 30_000);

  it('closes a client that keeps trickling bytes after its 413 at lingerTime', async () => {
    // The idle bound is ten times the total: only lingerTime can end this one first.
    const { url, ended } = await gatewayWith({ lingerTime: 1000, lingerIdleTimeout: 10_000 });
    const client = open(url, postHead(64 * 1024 * 1024));
    cleanups.push(() => client.socket.destroy());
    const trickle = setInterval(() => client.socket.writable && client.socket.write('a'), 50);
    cleanups.push(() => clearInterval(trickle));
    await eventually(() => client.text().includes('GW_BODY_TOO_LARGE'), 5000, 'the 413');
    await eventually(() => ended.length === 1, 15_000, 'the lingering to end');
    expect(ended[0]).toMatchObject({ end: 'time', closed: true });
    expect(ended[0]!.ms).toBeGreaterThanOrEqual(1000);
    expect(ended[0]!.bytes).toBeGreaterThan(0);
    await eventually(() => client.closedAt !== undefined, 5000, "the client's writes refused");
  }, 30_000);
});
