/**
 * Open connections per client address, counted against maxConnectionsPerClient: an HTTP/1.1
 * connection (plain or TLS) and an HTTP/2 session alike, since each holds a descriptor and a
 * share of the gateway whatever it speaks.
 *
 * One past the limit is not cut at accept: its first request is answered 429 and the connection
 * closed, so the client learns why. An HTTP/1.1 one is closed after that answer (its refusal
 * says `connection: close`); an HTTP/2 one is told to go away (GOAWAY), so the refusals of the
 * streams it already opened are its last answers. One that sends no request is dropped after a
 * grace period rather than hold a descriptor.
 *
 * The address a client is known by ({@link clientKey}) and the per-client count
 * ({@link ClientCounts}) live here too; the call path's upload budget counts with them.
 */
import type { IncomingMessage } from 'node:http';
import type { Http2Session } from 'node:http2';
import { isIPv4, isIPv6 } from 'node:net';
import type { Socket } from 'node:net';

/**
 * The address limits are kept by. IPv4 addresses (IPv4-mapped IPv6 ones included) as they are;
 * IPv6 ones by their /64, since one host is routinely handed a whole /64 and could otherwise
 * take a fresh address per connection. Anything unparsable stands for itself.
 */
export function clientKey(address: string | undefined): string {
  if (!address) return 'unknown';
  // IPv4, nearly always: no colon, nothing to normalise.
  if (!address.includes(':')) return address;
  const bare = address.replace(/%.*$/, '');
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(bare);
  if (mapped && isIPv4(mapped[1]!)) return mapped[1]!;
  if (!isIPv6(bare)) return bare;
  const [head = '', tail] = bare.split('::');
  const groups = (part: string | undefined) => (part ? part.split(':') : []);
  // A trailing dotted quad holds two groups; only the first four groups matter here.
  const width = (list: string[]) => list.reduce((n, g) => n + (g.includes('.') ? 2 : 1), 0);
  const left = groups(head);
  const right = groups(tail);
  const full =
    tail === undefined ? left : [...left, ...Array<string>(8 - width(left) - width(right)).fill('0'), ...right];
  return `${full
    .slice(0, 4)
    .map((g) => parseInt(g, 16).toString(16))
    .join(':')}::/64`;
}

/**
 * How many of something each client holds, against one limit per client. Clients holding
 * nothing are forgotten, so the map is as large as the set of clients active now.
 */
export class ClientCounts {
  readonly #limit: number;
  readonly #counts = new Map<string, number>();

  /** @param limit most held at once by one client */
  constructor(limit: number) {
    this.#limit = limit;
  }

  /** Counts one more for `client` and returns true, or returns false when it holds the limit. */
  acquire(client: string): boolean {
    const held = this.#counts.get(client) ?? 0;
    if (held >= this.#limit) return false;
    this.#counts.set(client, held + 1);
    return true;
  }

  /** Counts one fewer for `client`; a release without an acquire is ignored. */
  release(client: string): void {
    const held = this.#counts.get(client);
    if (held === undefined) return;
    if (held <= 1) this.#counts.delete(client);
    else this.#counts.set(client, held - 1);
  }

  /** Most held at once by one client. */
  get limit(): number {
    return this.#limit;
  }

  /** What `client` holds now. */
  count(client: string): number {
    return this.#counts.get(client) ?? 0;
  }

  /** Clients holding something now. */
  get clients(): number {
    return this.#counts.size;
  }
}

/** Options of {@link ClientConnections}. */
export interface ClientConnectionsOptions {
  /** Most connections one client address may hold open (maxConnectionsPerClient). */
  limit: number;
  /** How long a connection past the limit may take to send the request its refusal answers, in ms. */
  grace: number;
}

/** The connections of the gateway's front, counted per client address. */
export class ClientConnections {
  readonly #counts: ClientCounts;
  readonly #grace: number;
  /** HTTP/1.1 sockets and HTTP/2 sessions past their client's limit. */
  readonly #over = new WeakSet<Socket | Http2Session>();

  constructor(options: ClientConnectionsOptions) {
    this.#counts = new ClientCounts(options.limit);
    this.#grace = options.grace;
  }

  /** Most connections one client address may hold open. */
  get limit(): number {
    return this.#counts.limit;
  }

  /**
   * Counts a new HTTP/1.1 connection: under TLS, once its handshake is done. A TLS socket that
   * negotiated HTTP/2 is counted as its session ({@link admitSession}).
   */
  admitSocket(socket: Socket): void {
    if ((socket as Socket & { alpnProtocol?: string | false }).alpnProtocol === 'h2') return;
    this.#admit(socket, socket.remoteAddress);
  }

  /** Counts a new HTTP/2 session. */
  admitSession(session: Http2Session): void {
    // A session's `socket` is a proxy of its TLS socket: it has the peer's address.
    this.#admit(session, session.socket?.remoteAddress);
  }

  #admit(connection: Socket | Http2Session, address: string | undefined): void {
    const client = clientKey(address);
    if (this.#counts.acquire(client)) {
      connection.once('close', () => this.#counts.release(client));
      return;
    }
    this.#over.add(connection);
    connection.setTimeout(this.#grace, () => connection.destroy());
  }

  /**
   * True when `incoming` arrived on a connection past its client's limit: the caller answers it
   * 429. Such an HTTP/2 session is told to go away now, so it opens no new stream.
   */
  refuses(incoming: IncomingMessage): boolean {
    // An HTTP/2 request (Node's compatibility API) carries its stream; its `socket` is a proxy.
    const session = (incoming as IncomingMessage & { stream?: { session?: Http2Session } }).stream?.session;
    if (session === undefined) return this.#over.has(incoming.socket);
    if (!this.#over.has(session)) return false;
    if (!session.closed) session.close();
    return true;
  }
}
