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
 */
import type { IncomingMessage } from 'node:http';
import type { Http2Session } from 'node:http2';
import type { Socket } from 'node:net';
import { ClientCounts, clientKey } from '../calls/admission.ts';

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
