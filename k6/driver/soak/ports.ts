/**
 * Free ports, for the two processes of the soak that cannot take port 0: a runner's supervised
 * engine (its profile names a port) and the redis-server that must come back on the port the
 * gateway knows.
 */
import { createServer } from 'node:net';

/** A port on 127.0.0.1 nothing listens on at the moment of asking. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}
