/**
 * A small OTLP/HTTP sink for the overhead scenario's traced gateway and runner: it accepts every
 * POST /v1/traces with 200 and counts the exports and their bytes. It decodes nothing: the bench
 * measures what exporting costs the sluice processes, not a collector.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

/** A running sink: its endpoint (for OTEL_EXPORTER_OTLP_ENDPOINT), what it received, and its stop. */
export interface OtlpSink {
  readonly endpoint: string;
  /** Export requests received, and their body bytes. */
  readonly received: { exports: number; bytes: number };
  close(): Promise<void>;
}

/** Starts a sink on 127.0.0.1 and a free port. */
export async function startOtlpSink(): Promise<OtlpSink> {
  const received = { exports: 0, bytes: 0 };
  const server = createServer((req, res) => {
    let bytes = 0;
    req.on('data', (chunk: Buffer) => (bytes += chunk.length));
    req.on('end', () => {
      if (req.method === 'POST' && req.url === '/v1/traces') {
        received.exports++;
        received.bytes += bytes;
        res.writeHead(200, { 'content-type': String(req.headers['content-type'] ?? 'application/x-protobuf') });
        return res.end();
      }
      res.writeHead(404);
      res.end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    endpoint: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    received,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
