/**
 * A fleet on the gateway's TLS front for HTTP/2 specs, in-process on 127.0.0.1: a simulated
 * engine, a runner with one slot, and a gateway on https whose client key holds concurrent-call
 * leases, with what a spec reads to see every count the gateway, runner and engine keep.
 */
import { connect } from 'node:http2';
import type { ClientHttp2Session, ClientHttp2Stream, IncomingHttpHeaders, OutgoingHttpHeaders } from 'node:http2';
import { Agent, request } from 'undici';
import { createMemoryLimiter } from '../../gateway/access/limits.ts';
import type { Limiter } from '../../gateway/access/limits.ts';
import type { ClientKey } from '../../gateway/access/scopes.ts';
import type { GatewayOptions } from '../../gateway/options.ts';
import { createGateway } from '../../gateway/server.ts';
import { createSimEngine } from '../../runner/engines/sim/server.ts';
import type { SimEngineOptions } from '../../runner/engines/sim/options.ts';
import { createRunner } from '../../runner/server.ts';
import type { TestCa } from './certs.ts';
import { asOperator, OPERATOR_TOKEN, metricValue } from './fleet.ts';

/** The client key's bearer token. */
export const CLIENT_TOKEN = 'spec-client-token-0123456789abcdef';

/** Every count a reset must bring back, read at once. */
export interface FleetCounts {
  /** The gateway's calls placed or relayed (`/readyz` inFlight). */
  inFlight: number;
  /** The gateway's bodies being received. */
  uploads: number;
  /** Calls waiting in the gateway's queue for a runner. */
  queued: number;
  /** The client key's concurrent-call leases held. */
  leases: number;
  /** The runner's slots in use. */
  slots: number;
  /** Calls running on the engine (`vllm:num_requests_running`). */
  engineRunning: number;
  /** Calls the engine was offered in all (`sluice_sim_requests_total`). */
  engineCalls: number;
  /** Calls the engine saw abandoned (`sluice_sim_requests_aborted_total`). */
  engineAborted: number;
}

/** A started fleet. */
export interface H2Fleet {
  /** The gateway's https URL. */
  url: string;
  counts(): Promise<FleetCounts>;
  /** A new HTTP/2 session to the gateway, trusting the suite's CA; closed by {@link stop}. */
  session(): Promise<ClientHttp2Session>;
  stop(): Promise<void>;
}

/** A limiter that counts the concurrent-call leases it holds. */
function countingLimiter(): { limiter: Limiter; held: Set<string> } {
  const inner = createMemoryLimiter();
  const held = new Set<string>();
  const limiter: Limiter = {
    ...inner,
    admitTokens: (...args) => inner.admitTokens(...args),
    settle: (...args) => inner.settle(...args),
    reserveStored: (...args) => inner.reserveStored(...args),
    settleStored: (...args) => inner.settleStored(...args),
    releaseStored: (...args) => inner.releaseStored(...args),
    close: () => inner.close(),
    async admitCall(keyId, limits, lease) {
      const admission = await inner.admitCall(keyId, limits, lease);
      if (admission.kind === 'admitted') held.add(lease);
      return admission;
    },
    async release(keyId, lease) {
      held.delete(lease);
      await inner.release(keyId, lease);
    },
  };
  return { limiter, held };
}

/**
 * Starts an engine whose calls run for minutes unless abandoned (20 ms a token, 100,000 tokens),
 * a runner with one slot, and a gateway on https with a certificate from `ca`.
 */
export async function startH2Fleet(
  ca: TestCa,
  gateway: Partial<GatewayOptions> = {},
  engineOptions: SimEngineOptions = {},
): Promise<H2Fleet> {
  const stops: Array<() => Promise<unknown>> = [];
  const stop = async (): Promise<void> => {
    while (stops.length > 0) await stops.pop()!().catch(() => undefined);
  };
  try {
    const engine = createSimEngine({ ttftMs: 0, itlMs: 20, outputTokens: 100_000, ...engineOptions });
    const { url: engineUrl } = await engine.listen();
    stops.push(() => engine.close());
    const runner = createRunner({ engine: engineUrl, engineKind: 'sim', id: 'r-h2', slots: 1 });
    const { url: runnerUrl } = await runner.listen(0, '127.0.0.1');
    stops.push(() => runner.close({ drainTimeout: 0 }));
    const { limiter, held } = countingLimiter();
    const key: ClientKey = { id: 'key-h2', name: 'h2', limits: { concurrentCalls: 4 } };
    const issued = ca.issue('gateway');
    const gw = createGateway({
      runners: [runnerUrl],
      statusInterval: 50,
      placerTimeout: 120_000,
      detachedPlacerTimeout: 120_000,
      drainTimeout: 0,
      operatorTokens: [OPERATOR_TOKEN],
      clientKeys: { lookup: (token) => (token === CLIENT_TOKEN ? key : undefined), size: 1 },
      limiter,
      tls: { cert: issued.cert, key: issued.key },
      ...gateway,
    });
    const { url } = await gw.listen(0, '127.0.0.1');
    stops.push(() => gw.close());
    const agent = new Agent({ connect: { ca: ca.cert } });
    stops.push(() => agent.close());
    const getJson = async (path: string, headers: Record<string, string> = {}): Promise<any> => {
      const res = await request(`${url}${path}`, { dispatcher: agent, headers });
      return res.body.json();
    };
    const engineMetrics = async (): Promise<string> => (await request(`${engineUrl}/metrics`)).body.text();
    const sessions = new Set<ClientHttp2Session>();
    stops.push(async () => {
      for (const s of sessions) s.destroy();
    });
    return {
      url,
      async counts() {
        const [ready, queue, page] = await Promise.all([
          getJson('/readyz'),
          getJson('/v1/queue', asOperator),
          engineMetrics(),
        ]);
        return {
          inFlight: ready.inFlight,
          uploads: ready.uploads,
          queued: queue.waiting,
          leases: held.size,
          slots: runner.status().slots.inUse,
          engineRunning: metricValue(page, 'vllm:num_requests_running'),
          engineCalls: metricValue(page, 'sluice_sim_requests_total'),
          engineAborted: metricValue(page, 'sluice_sim_requests_aborted_total'),
        };
      },
      async session() {
        const session = connect(url, { ca: ca.cert });
        sessions.add(session);
        session.on('error', () => undefined);
        await new Promise<void>((resolve, reject) => {
          session.once('connect', () => resolve());
          session.once('error', reject);
        });
        return session;
      },
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}

/** One HTTP/2 call: its stream, and its answer's head and body as they arrive. */
export interface H2Call {
  stream: ClientHttp2Stream;
  /** Resolves with the answer's headers; never rejects (undefined when the stream ended first). */
  head: Promise<IncomingHttpHeaders | undefined>;
  /** The body's bytes so far. */
  received(): string;
  /** Resolves when the stream closed, whoever closed it. */
  closed: Promise<void>;
}

/**
 * Opens a POST on `session` with the client key. `body` is sent and the stream ended, unless
 * `open` is set: then only `body` is sent, and the stream stays open.
 */
export function h2Call(
  session: ClientHttp2Session,
  path: string,
  body: string,
  options: { headers?: OutgoingHttpHeaders; open?: boolean } = {},
): H2Call {
  const stream = session.request({
    ':method': 'POST',
    ':path': path,
    'content-type': 'application/json',
    authorization: `Bearer ${CLIENT_TOKEN}`,
    ...options.headers,
  });
  stream.on('error', () => undefined);
  const chunks: Buffer[] = [];
  stream.on('data', (chunk: Buffer) => chunks.push(chunk));
  const closed = new Promise<void>((resolve) => stream.once('close', () => resolve()));
  const head = new Promise<IncomingHttpHeaders | undefined>((resolve) => {
    stream.once('response', (headers) => resolve(headers));
    stream.once('close', () => resolve(undefined));
  });
  if (options.open) stream.write(body);
  else stream.end(body);
  return { stream, head, closed, received: () => Buffer.concat(chunks).toString('utf8') };
}
