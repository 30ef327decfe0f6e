/** A callback receiver for the specs: a real HTTP server on 127.0.0.1 port 0 that keeps every delivery. */
import { createServer } from 'node:http';
import type { IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';

/** One delivery as it arrived. */
export interface Delivery {
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
}

/** A running receiver. */
export interface CallbackReceiver {
  /** Where it listens, `http://127.0.0.1:<port>`; any path is accepted. */
  readonly url: string;
  /** Every delivery so far, in order of arrival. */
  readonly got: Delivery[];
  /** Stops listening and drops the connections still open. */
  close(): Promise<void>;
}

/** Starts a receiver that answers every delivery 200 once its body has arrived. */
export async function startCallbackReceiver(): Promise<CallbackReceiver> {
  const got: Delivery[] = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      got.push({ headers: req.headers, body });
      res.end();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    got,
    close: () =>
      new Promise((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
