/** A stand-in HTTP server on 127.0.0.1 that reads each request's whole body before answering it. */
import { createServer } from 'node:http';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** A listening {@link startTextServer}. */
export interface TextServer {
  readonly port: number;
  readonly url: string;
  /** Closes it, its open connections included. */
  close(): Promise<void>;
}

/** Answers a request whose body arrived whole as `text`. */
export type TextHandler = (req: IncomingMessage, res: ServerResponse, text: string) => void;

/** Listens on 127.0.0.1 and `port` (0: one the system picks), handing each request to `handle` once its body is in. */
export async function startTextServer(handle: TextHandler, port = 0): Promise<TextServer> {
  const server = createServer((req, res) => {
    let text = '';
    req.on('data', (chunk: Buffer) => (text += chunk.toString()));
    req.on('end', () => handle(req, res, text));
  });
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  const bound = (server.address() as AddressInfo).port;
  return {
    port: bound,
    url: `http://127.0.0.1:${bound}`,
    close() {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}
