/**
 * gateway/http/client-connections.ts: connections counted per client address. The sockets and
 * sessions are stand-ins carrying what the count reads and does; the real front is
 * spec/faults/h2-connection-limits.spec.ts's.
 */
import { EventEmitter } from 'node:events';
import type { IncomingMessage } from 'node:http';
import type { Http2Session } from 'node:http2';
import type { Socket } from 'node:net';
import { describe, expect, it } from 'vitest';
import { ClientConnections } from '../../../gateway/http/client-connections.ts';

/** A socket from `address` that records its grace timer and whether it was destroyed. */
class FakeSocket extends EventEmitter {
  grace: number | undefined;
  expire: (() => void) | undefined;
  destroyed = false;
  constructor(
    readonly remoteAddress: string,
    readonly alpnProtocol: string | false = false,
  ) {
    super();
  }
  setTimeout(ms: number, onTimeout: () => void): this {
    this.grace = ms;
    this.expire = onTimeout;
    return this;
  }
  destroy(): void {
    this.destroyed = true;
  }
}

/** An HTTP/2 session from `address` that records whether it was told to go away. */
class FakeSession extends FakeSocket {
  closed = false;
  readonly socket: { remoteAddress: string };
  constructor(address: string) {
    super(address);
    this.socket = { remoteAddress: address };
  }
  close(): void {
    this.closed = true;
  }
}

const asSocket = (s: FakeSocket) => s as unknown as Socket;
const asSession = (s: FakeSession) => s as unknown as Http2Session;
const requestOn = (socket: FakeSocket) => ({ socket }) as unknown as IncomingMessage;
const h2RequestOn = (session: FakeSession) => ({ socket: {}, stream: { session } }) as unknown as IncomingMessage;

describe('ClientConnections', () => {
  it('refuses the first request of a connection past its address\'s limit, and drops it after the grace if it sends none', () => {
    const connections = new ClientConnections({ limit: 2, grace: 500 });
    const [a, b, c] = [new FakeSocket('10.0.0.1'), new FakeSocket('10.0.0.1'), new FakeSocket('10.0.0.1')];
    for (const s of [a, b, c]) connections.admitSocket(asSocket(s));
    expect(connections.refuses(requestOn(a))).toBe(false);
    expect(connections.refuses(requestOn(b))).toBe(false);
    expect(connections.refuses(requestOn(c))).toBe(true);
    expect(c.grace).toBe(500);
    expect(a.grace).toBeUndefined();
    c.expire!();
    expect(c.destroyed).toBe(true);
  });

  it('counts each address on its own, and frees a place when a connection closes', () => {
    const connections = new ClientConnections({ limit: 1, grace: 500 });
    const first = new FakeSocket('10.0.0.1');
    connections.admitSocket(asSocket(first));
    const other = new FakeSocket('10.0.0.2');
    connections.admitSocket(asSocket(other));
    expect(connections.refuses(requestOn(other))).toBe(false);
    first.emit('close');
    const next = new FakeSocket('10.0.0.1');
    connections.admitSocket(asSocket(next));
    expect(connections.refuses(requestOn(next))).toBe(false);
  });

  it('leaves a TLS socket that negotiated HTTP/2 to its session, and tells a session past the limit to go away', () => {
    const connections = new ClientConnections({ limit: 1, grace: 500 });
    connections.admitSocket(asSocket(new FakeSocket('10.0.0.1', 'h2')));
    const session = new FakeSession('10.0.0.1');
    connections.admitSession(asSession(session));
    expect(connections.refuses(h2RequestOn(session))).toBe(false);
    const over = new FakeSession('10.0.0.1');
    connections.admitSession(asSession(over));
    expect(connections.refuses(h2RequestOn(over))).toBe(true);
    expect(over.closed).toBe(true);
    expect(session.closed).toBe(false);
  });
});
