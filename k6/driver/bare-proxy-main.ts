/**
 * Entry of a bare proxy process (see bare-proxy.ts): `node --import tsx bare-proxy-main.ts <upstream>`.
 * Listens on a 127.0.0.1 port of its own choosing and reports it over IPC as the sluice children
 * do; exits on SIGTERM or SIGINT, and when the parent's IPC channel closes.
 */
import type { AddressInfo } from 'node:net';
import { createBareProxy } from './bare-proxy.ts';

const upstream = process.argv[2];
if (!upstream) {
  process.stderr.write('usage: bare-proxy-main.ts <upstream origin>\n');
  process.exit(2);
}
const server = createBareProxy(upstream);
server.listen(0, '127.0.0.1', () => {
  const { port } = server.address() as AddressInfo;
  process.send?.({ type: 'listening', url: `http://127.0.0.1:${port}` });
});
const exit = (): never => process.exit(0);
process.on('SIGTERM', exit);
process.on('SIGINT', exit);
process.on('disconnect', exit);
