/**
 * The bare Node proxy: the least a Node process can do to relay an HTTP call, as a yardstick for
 * what sluice's own hops cost. `http.createServer` in front, an undici Pool to one upstream
 * behind, the request body buffered, the response piped, hop-by-hop headers dropped both ways as
 * RFC 9110 asks of any proxy. No routing, placement, retries, telemetry, ids, timeouts or
 * validation: whatever the gateway or the runner spends above this is the price of their features
 * (and of how they are written), which is what the overhead bench puts side by side.
 *
 * {@link startBareProxy} runs it as its own process (bare-proxy-main.ts), so its CPU is read from
 * /proc like every other process the bench measures.
 */
import type { ChildProcess } from 'node:child_process';
import { createServer } from 'node:http';
import type { IncomingHttpHeaders, OutgoingHttpHeaders, Server } from 'node:http';
import { createRequire } from 'node:module';
import { pipeline } from 'node:stream';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Pool } from 'undici';

/**
 * Headers that describe one connection, not the message (RFC 9110 section 7.6.1), plus `host`
 * (the upstream's own is set by the client) and `content-length` (recomputed from the buffered
 * body on the way in; kept on the way out, where it is end-to-end).
 */
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);

/** Copies `headers` without the hop-by-hop ones, nor those the `connection` header names, nor `drop`. */
export function endToEndHeaders(
  headers: IncomingHttpHeaders | Record<string, string | string[] | undefined>,
  drop: readonly string[] = [],
): OutgoingHttpHeaders {
  const named = headers.connection;
  const listed =
    named === undefined
      ? []
      : (Array.isArray(named) ? named.join(',') : named).split(',').map((h) => h.trim().toLowerCase());
  const out: OutgoingHttpHeaders = {};
  for (const key in headers) {
    const value = headers[key];
    if (value === undefined || HOP_BY_HOP.has(key) || listed.includes(key) || drop.includes(key)) continue;
    out[key] = value;
  }
  return out;
}

/** The request headers the proxy does not pass on besides the hop-by-hop ones. */
const REQUEST_DROP = ['host', 'content-length'] as const;

/**
 * A server relaying every call to `upstream` (an origin, `http://host:port`) through one undici
 * Pool; 502 when the upstream cannot be reached before the answer started. `close()` on the
 * returned server also closes the pool.
 */
export function createBareProxy(upstream: string): Server {
  // As the gateway's runner pool: unbounded connections, kept alive, one call at a time on each.
  const pool = new Pool(upstream, { connections: null, pipelining: 1, keepAliveTimeout: 30_000 });
  const server = createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on('data', (chunk: Buffer) => parts.push(chunk));
    req.on('end', () => {
      const body = parts.length === 0 ? null : parts.length === 1 ? parts[0]! : Buffer.concat(parts);
      pool
        .request({
          method: req.method as 'POST',
          path: req.url ?? '/',
          headers: endToEndHeaders(req.headers, REQUEST_DROP) as Record<string, string>,
          body,
        })
        .then(
          (answer) => {
            res.writeHead(answer.statusCode, endToEndHeaders(answer.headers));
            // A client that hangs up destroys res, and pipeline then destroys the upstream body.
            pipeline(answer.body, res, () => undefined);
          },
          () => {
            if (!res.headersSent) res.writeHead(502, { 'content-type': 'text/plain' });
            res.end('bad gateway\n');
          },
        );
    });
  });
  server.keepAliveTimeout = 65_000;
  server.on('close', () => void pool.close().catch(() => undefined));
  return server;
}

/** True when this module runs from the TypeScript sources, false from the build in dist/. */
const SOURCES = import.meta.url.endsWith('.ts');
/** Path of the entry script a bare proxy process runs: the sources' or the build's, as this module. */
const MAIN = fileURLToPath(new URL(SOURCES ? './bare-proxy-main.ts' : './bare-proxy-main.js', import.meta.url));

/**
 * tsx's loader, resolved from here so the child finds it whatever its working directory. Only the
 * sources need it: the installed package runs its build and has no tsx.
 */
const tsxLoader = (): string => pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;

/** How long a bare proxy gets after SIGTERM before SIGKILL. */
const STOP_GRACE_MS = 5_000;

/** A bare proxy running as a child process. */
export interface BareProxyProcess {
  readonly url: string;
  readonly child: ChildProcess;
  /** The last lines the child printed (its errors). */
  output(): string;
  /** SIGTERM, then SIGKILL after 5 s; resolves once it has exited. Idempotent. */
  stop(): Promise<void>;
}

/**
 * Starts a bare proxy in front of `upstream` (an origin) as a child process on a 127.0.0.1 port
 * it picks, run by the same loader as the sluice processes, and resolves once it listens.
 * The child exits when its IPC channel closes, so a parent that dies leaves nothing behind.
 * @throws {Error} with the child's output when it exits or does not listen within `timeoutMs`.
 */
export async function startBareProxy(
  upstream: string,
  env: NodeJS.ProcessEnv,
  timeoutMs = 30_000,
): Promise<BareProxyProcess> {
  // Loaded here, not at the top: the proxy's own process imports this module for its server and
  // should load nothing more than a bare proxy needs.
  const { startChild } = await import('../../placer/index.ts');
  // Run as the bench runs: the sources through tsx, or the build as it is.
  const proxy = await startChild(
    { script: MAIN, nodeArgs: SOURCES ? ['--import', tsxLoader()] : [], name: 'bare proxy' },
    [upstream],
    { env, timeout: timeoutMs },
  );
  let stopping: Promise<void> | undefined;
  const stop = (): Promise<void> => (stopping ??= proxy.stop('SIGTERM', STOP_GRACE_MS).then(() => undefined));
  return { url: proxy.url, child: proxy.child, output: proxy.output, stop };
}
