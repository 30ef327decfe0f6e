/**
 * gateway/http/client-connections.ts: client addresses as the counts key them, the counts per
 * key, and connections counted per client address. The sockets and sessions of the last are
 * stand-ins carrying what the count reads and does; the real front is
 * spec/faults/h2-connection-limits.spec.ts's.
 */
import { EventEmitter } from 'node:events';
import type { IncomingMessage } from 'node:http';
import type { Http2Session } from 'node:http2';
import type { Socket } from 'node:net';
import { describe, expect, it } from 'vitest';
import { ClientConnections, ClientCounts, clientKey } from '../../../gateway/http/client-connections.ts';

describe('clientKey', () => {
  it.each([
    ['127.0.0.1', '127.0.0.1'],
    ['10.1.2.3', '10.1.2.3'],
    ['::ffff:127.0.0.1', '127.0.0.1'],
    ['::FFFF:10.1.2.3', '10.1.2.3'],
    ['::1', '0:0:0:0::/64'],
    ['2001:db8:1:2:aaaa:bbbb:cccc:dddd', '2001:db8:1:2::/64'],
    ['2001:0db8:0001:0002::1', '2001:db8:1:2::/64'],
    ['2001:db8::1', '2001:db8:0:0::/64'],
    ['fe80::1%eth0', 'fe80:0:0:0::/64'],
    ['64:ff9b::10.1.2.3', '64:ff9b:0:0::/64'],
  ])('returns %s as %s', (address, key) => {
    expect(clientKey(address)).toBe(key);
  });

  it('returns one key for every address of one IPv6 /64, and another for the next /64', () => {
    expect(clientKey('2001:db8:1:2::1')).toBe(clientKey('2001:db8:1:2:ffff:ffff:ffff:ffff'));
    expect(clientKey('2001:db8:1:2::1')).not.toBe(clientKey('2001:db8:1:3::1'));
  });

  it('returns "unknown" when the socket has no address, and an unparsable one as it is', () => {
    expect(clientKey(undefined)).toBe('unknown');
    expect(clientKey('')).toBe('unknown');
    expect(clientKey('not-an-ip')).toBe('not-an-ip');
  });
});

describe('ClientCounts', () => {
  it('admits up to the limit per client, each client on its own', () => {
    const counts = new ClientCounts(2);
    expect([counts.acquire('a'), counts.acquire('a'), counts.acquire('a')]).toEqual([true, true, false]);
    expect(counts.acquire('b')).toBe(true);
    expect([counts.count('a'), counts.count('b'), counts.count('c')]).toEqual([2, 1, 0]);
  });

  it('admits again after a release, and forgets a client that holds nothing', () => {
    const counts = new ClientCounts(1);
    counts.acquire('a');
    counts.acquire('b');
    expect(counts.clients).toBe(2);
    counts.release('a');
    expect(counts.clients).toBe(1);
    expect(counts.acquire('a')).toBe(true);
    counts.release('a');
    counts.release('b');
    expect(counts.clients).toBe(0);
  });

  it('ignores a release for a client that holds nothing', () => {
    const counts = new ClientCounts(1);
    counts.release('a');
    expect(counts.count('a')).toBe(0);
    expect(counts.acquire('a')).toBe(true);
    expect(counts.acquire('a')).toBe(false);
  });
});

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
  it("refuses the first request of a connection past its address's limit, and drops it after the grace if it sends none", () => {
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
