/**
 * A batch line's call, made in-process through the gateway's own call path: an HTTP/1.1 request
 * written by Node's client onto an in-memory connection that a private Node server (never
 * listening) reads and hands to the agent, as the gateway's front hands it a client's. So a line
 * goes through everything a client's call does (the key's limits, the wait queue in the `batch`
 * class, placement, the relay) and no network or credential is involved: the caller is the
 * connection's, set here, never read from a header.
 */
import { createServer, request } from 'node:http';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { Duplex } from 'node:stream';
import type { Caller } from '../access/index.ts';
import { callRouteOf } from '../http/index.ts';
import type { CallRoute } from '../http/index.ts';

/** Hands one call to the agent: LbAgent.serve, with no /invoke function. */
export type ServeCall = (
  route: CallRoute,
  incoming: IncomingMessage,
  out: ServerResponse,
  caller: Caller,
) => Promise<void>;

/** How a line's call was answered. */
export interface LineAnswer {
  readonly status: number;
  /** The answer's `x-request-id`. */
  readonly requestId: string | undefined;
  readonly contentType: string;
  readonly body: Buffer;
  /** True when the answer was cut at maxBytes. */
  readonly truncated: boolean;
  /** The answer's Retry-After, in ms, when it names one in seconds. */
  readonly retryAfter?: number;
}

/** What a line's call is made of. */
export interface LineRequest {
  readonly path: string;
  readonly body: Buffer;
  readonly headers: Readonly<Record<string, string>>;
  readonly caller: Caller;
  /** The most of the answer kept. */
  readonly maxBytes: number;
}

/** Makes calls for batch lines; a test double implements `post` alone. */
export interface LineCalls {
  post(line: LineRequest): Promise<LineAnswer>;
}

/** The gateway's in-process caller (see the file comment). */
export class InProcessCalls implements LineCalls {
  readonly #server: Server;
  readonly #callers = new WeakMap<object, Caller>();

  constructor(serve: ServeCall) {
    this.#server = createServer((incoming, out) => {
      const route = callRouteOf(incoming.url ?? '')?.route;
      const caller = this.#callers.get(incoming.socket);
      // Only this class writes on these connections, always to a call route with a caller.
      if (route === undefined || route === 'invoke' || caller === undefined) {
        out.writeHead(500).end();
        return;
      }
      void serve(route, incoming, out, caller);
    });
    // A line's request arrives at once; its answer may take as long as a generation does.
    this.#server.requestTimeout = 0;
  }

  async post(line: LineRequest): Promise<LineAnswer> {
    const [near, far] = connectionPair();
    this.#callers.set(far, line.caller);
    this.#server.emit('connection', far);
    try {
      return await new Promise<LineAnswer>((resolve, reject) => {
        const sent = request(
          {
            method: 'POST',
            path: line.path,
            headers: {
              ...line.headers,
              host: 'batch.internal',
              'content-type': 'application/json',
              'content-length': String(line.body.length),
            },
            createConnection: () => near,
          },
          (answer) => void readAnswer(answer, line.maxBytes).then(resolve, reject),
        );
        sent.on('error', reject);
        sent.end(line.body);
      });
    } finally {
      near.destroy();
    }
  }
}

/** Reads an answer whole, keeping at most `maxBytes` of its body. */
async function readAnswer(answer: IncomingMessage, maxBytes: number): Promise<LineAnswer> {
  const chunks: Buffer[] = [];
  let size = 0;
  let truncated = false;
  for await (const chunk of answer as AsyncIterable<Buffer>) {
    if (truncated) continue;
    if (size + chunk.length > maxBytes) {
      truncated = true;
      continue;
    }
    chunks.push(chunk);
    size += chunk.length;
  }
  const id = answer.headers['x-request-id'];
  const retryAfter = Number(answer.headers['retry-after']);
  return {
    ...(answer.headers['retry-after'] !== undefined && Number.isFinite(retryAfter) && retryAfter >= 0
      ? { retryAfter: retryAfter * 1000 }
      : {}),
    status: answer.statusCode ?? 0,
    requestId: typeof id === 'string' ? id : undefined,
    contentType: String(answer.headers['content-type'] ?? ''),
    body: Buffer.concat(chunks, size),
    truncated,
  };
}

/** Two ends of an in-memory connection: what one end writes, the other reads. */
function connectionPair(): [Duplex, Duplex] {
  const ends: Duplex[] = [];
  const end = (other: () => Duplex): Duplex =>
    new Duplex({
      read() {},
      write(chunk, _encoding, done) {
        other().push(chunk);
        done();
      },
      final(done) {
        other().push(null);
        done();
      },
      destroy(error, done) {
        const peer = other();
        if (!peer.destroyed) peer.destroy();
        done(error);
      },
    });
  ends.push(
    end(() => ends[1]!),
    end(() => ends[0]!),
  );
  return [ends[0]!, ends[1]!];
}
