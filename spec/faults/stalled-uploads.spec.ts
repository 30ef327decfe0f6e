/**
 * Fault: stalled uploads lock every client out. Connections that send a call's headers and one
 * byte of its body, then nothing, each held a maxInFlight slot for the whole body timeout, so a
 * few of them made every other call a 503 GW_OVERLOADED while /readyz stayed green.
 *
 * Real processes on 127.0.0.1 with small limits, so a test opens a hundred sockets rather than
 * ten thousand. The staller connects from 127.0.0.2 (all of 127/8 is loopback on Linux), so the
 * gateway tells it apart from the well-behaved client on 127.0.0.1.
 */
import { connect } from 'node:net';
import type { Socket } from 'node:net';
import { request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { chatBody, eventually, metricValue, metrics, postJson, startFleet } from '../support/fleet.ts';
import type { Fleet } from '../support/fleet.ts';

const STALLER = '127.0.0.2';

/** What one raw connection got: nothing yet, or the status and error code of its answer. */
interface RawReply {
  status?: number;
  code?: string;
  retryAfter?: string;
  /** ms from sending to the connection's close. */
  elapsedMs: number;
}

/** Raw connections from one address, each sending a request of its own. */
class RawClient {
  readonly #url: URL;
  readonly #localAddress: string;
  readonly #sockets = new Set<Socket>();
  /** Connections the gateway answered (or closed). */
  closed = 0;

  constructor(gatewayUrl: string, localAddress: string) {
    this.#url = new URL(gatewayUrl);
    this.#localAddress = localAddress;
  }

  /**
   * Sends `data` on a new connection and resolves once the gateway closes it (or we do),
   * with what it answered.
   */
  send(data: string): Promise<RawReply> {
    const started = performance.now();
    const socket = connect({
      host: this.#url.hostname,
      port: Number(this.#url.port),
      localAddress: this.#localAddress,
    });
    this.#sockets.add(socket);
    const received: Buffer[] = [];
    socket.on('data', (chunk: Buffer) => received.push(chunk));
    // A reset after the answer is the gateway closing with our body unread: the answer counts.
    socket.on('error', () => undefined);
    socket.write(data);
    return new Promise((resolve) => {
      socket.once('close', () => {
        this.#sockets.delete(socket);
        this.closed++;
        const text = Buffer.concat(received).toString('utf8');
        const status = /^HTTP\/1\.1 (\d{3})/.exec(text);
        const code = /"code":"([A-Z_]+)"/.exec(text);
        const retryAfter = /\r\nretry-after: *(\S+)/i.exec(text);
        resolve({
          elapsedMs: performance.now() - started,
          ...(status ? { status: Number(status[1]) } : {}),
          ...(code ? { code: code[1] } : {}),
          ...(retryAfter ? { retryAfter: retryAfter[1] } : {}),
        });
      });
    });
  }

  /** Opens a connection that sends headers and the first byte of a 10-byte body, then stalls. */
  stall(): Promise<RawReply> {
    return this.send(
      `POST /v1/chat/completions HTTP/1.1\r\nhost: ${this.#url.host}\r\ncontent-type: application/json\r\ncontent-length: 10\r\n\r\n{`,
    );
  }

  /** Opens a connection that sends nothing at all. */
  idle(): Promise<RawReply> {
    return this.send('');
  }

  /** A whole chat call on a new connection. */
  call(): Promise<RawReply> {
    const body = chatBody();
    return this.send(
      `POST /v1/chat/completions HTTP/1.1\r\nhost: ${this.#url.host}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
    );
  }

  /** Connections still open. */
  get open(): number {
    return this.#sockets.size;
  }

  /** Closes every connection still open. */
  destroy(): void {
    for (const socket of this.#sockets) socket.destroy();
  }
}

/** Counts replies by code (`none` for a connection closed without an answer). */
function byCode(replies: readonly RawReply[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const r of replies) counts[r.code ?? 'none'] = (counts[r.code ?? 'none'] ?? 0) + 1;
  return counts;
}

async function readyz(fleet: Fleet): Promise<{ status: number; json: any }> {
  const res = await request(`${fleet.gateway.url}/readyz`);
  return { status: res.statusCode, json: await res.body.json() };
}

/** Calls the engines received and finished, all engines together. */
async function engineCalls(fleet: Fleet): Promise<{ received: number; completed: number }> {
  const pages = await Promise.all(fleet.nodes.map((n) => metrics(n.engine)));
  const sum = (name: string) => pages.reduce((total, page) => total + metricValue(page, name), 0);
  return { received: sum('sluice_sim_requests_total'), completed: sum('sluice_sim_requests_completed_total') };
}

let fleet: Fleet | undefined;
let staller: RawClient | undefined;
afterEach(async () => {
  staller?.destroy();
  staller = undefined;
  await fleet?.stop();
  fleet = undefined;
});

/**
 * One node (a sim engine making 4 tokens `itlMs` apart, a runner with `slots` slots) behind a
 * gateway taking 50 calls in flight and the given upload and per-client connection limits. Its
 * body bounds are a minute and more, so the stalled bodies stay stalled (not cut with 408) for
 * as long as a case takes on a busy machine.
 */
function uploadFleet(
  itlMs: number,
  slots: number,
  limits: { uploads: number; perClient: number; connectionsPerClient: number },
): Promise<Fleet> {
  return startFleet({
    nodes: 1,
    engineArgs: ['--ttft-ms', '0', '--itl-ms', String(itlMs), '--output-tokens', '4'],
    runnerArgs: ['--slots', String(slots)],
    gatewayArgs: [
      '--body-idle-timeout',
      '60s',
      '--body-read-timeout',
      '120s',
      '--max-in-flight',
      '50',
      '--max-uploads',
      String(limits.uploads),
      '--max-uploads-per-client',
      String(limits.perClient),
      '--max-connections-per-client',
      String(limits.connectionsPerClient),
    ],
  });
}

describe('stalled uploads', () => {
  it('refuses a staller past its per-client upload and connection limits while other clients get 200', async () => {
    // maxInFlight below the staller's count: today's code lets the stalled bodies fill it.
    fleet = await uploadFleet(0, 16, { uploads: 100, perClient: 40, connectionsPerClient: 150 });
    const gateway = fleet.gateway;
    staller = new RawClient(gateway.url, STALLER);
    const stalls = Array.from({ length: 100 }, () => staller!.stall());
    // 40 stall within the staller's share; the other 60 are answered at once and closed.
    await eventually(() => staller!.closed === 60, 10_000, 'the staller past its share refused');
    expect(staller.open).toBe(40);
    const page = await metrics(gateway);
    expect(metricValue(page, 'sluice_uploads')).toBe(40);
    expect(metricValue(page, 'sluice_calls_rejected_total', { code: 'GW_TOO_MANY_UPLOADS' })).toBe(60);

    // Meanwhile the client on 127.0.0.1 is served in full, and the gateway says it is ready.
    const calls = await Promise.all(
      Array.from({ length: 20 }, () => postJson(`${gateway.url}/v1/chat/completions`, chatBody())),
    );
    expect(calls.map((c) => c.status)).toEqual(Array(20).fill(200));
    expect(calls.every((c) => c.json.choices[0].message.content.length > 0)).toBe(true);
    expect((await readyz(fleet)).status).toBe(200);

    // The staller's connections: 40 stalled, then idle ones up to its 150; one more is refused.
    const idle = Array.from({ length: 110 }, () => staller!.idle());
    await eventually(() => staller!.open === 150, 10_000, 'the idle connections open');
    const extra = await staller.call();
    expect(extra).toMatchObject({ status: 429, code: 'GW_TOO_MANY_CONNECTIONS', retryAfter: '1' });
    expect((await postJson(`${gateway.url}/v1/chat/completions`, chatBody())).status).toBe(200);

    // Once the staller lets go, it is a client like any other again.
    staller.destroy();
    const replies = await Promise.all([...stalls, ...idle]);
    const refused = replies.filter((r) => r.status !== undefined);
    expect(byCode(refused)).toEqual({ GW_TOO_MANY_UPLOADS: 60 });
    expect(refused.every((r) => r.status === 429 && r.retryAfter === '1')).toBe(true);
    const again = new RawClient(gateway.url, STALLER);
    await eventually(async () => (await again.call()).status === 200, 10_000, 'the staller served again');

    // Nothing ran twice, nothing was lost: every call that got 200 ran once on the engine,
    // and no stalled body ever reached it.
    const served = 20 + 1 + 1;
    await eventually(async () => (await engineCalls(fleet!)).completed === served, 15_000, 'the engine counters');
    expect(await engineCalls(fleet)).toEqual({ received: served, completed: served });
  }, 60_000);

  it('refuses new uploads with 503 GW_UPLOADS_FULL and says so on /readyz while the budget is full, and the call in flight completes', async () => {
    fleet = await uploadFleet(20, 8, { uploads: 30, perClient: 1000, connectionsPerClient: 1000 });
    const gateway = fleet.gateway;
    // A stream of about 2 s, running before the staller comes.
    const streaming = request(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: chatBody({ stream: true, max_tokens: 100 }),
    });
    const streamed = streaming.then((res) => res.body.text());
    const head = await streaming;
    expect(head.statusCode).toBe(200);

    staller = new RawClient(gateway.url, STALLER);
    const stalls = Array.from({ length: 100 }, () => staller!.stall());
    await eventually(() => staller!.closed === 70, 10_000, 'the uploads past the budget refused');
    expect(staller.open).toBe(30);

    const ready = await readyz(fleet);
    expect(ready.status).toBe(503);
    expect(ready.json).toMatchObject({ ready: false, closing: false, uploads: 30 });
    expect(ready.json.reasons).toEqual(['uploads_full']);
    // /healthz is liveness only.
    expect((await request(`${gateway.url}/healthz`)).statusCode).toBe(200);
    const refusedNow = await postJson(`${gateway.url}/v1/chat/completions`, chatBody());
    expect(refusedNow.status).toBe(503);
    expect(refusedNow.json.error.code).toBe('GW_UPLOADS_FULL');
    expect(refusedNow.headers['retry-after']).toBe('1');

    expect(await streamed).toContain('data: [DONE]');

    staller.destroy();
    const replies = await Promise.all(stalls);
    expect(byCode(replies.filter((r) => r.status !== undefined))).toEqual({ GW_UPLOADS_FULL: 70 });
    expect(replies.filter((r) => r.status !== undefined).every((r) => r.status === 503 && r.retryAfter === '1')).toBe(
      true,
    );
    await eventually(async () => (await readyz(fleet!)).status === 200, 15_000, '/readyz ready again');
    const page = await metrics(gateway);
    expect(metricValue(page, 'sluice_uploads')).toBe(0);
    expect(metricValue(page, 'sluice_calls_rejected_total', { code: 'GW_UPLOADS_FULL' })).toBe(71);
    expect((await postJson(`${gateway.url}/v1/chat/completions`, chatBody())).status).toBe(200);

    await eventually(async () => (await engineCalls(fleet!)).completed === 2, 15_000, 'the engine counters');
    expect(await engineCalls(fleet)).toEqual({ received: 2, completed: 2 });
  }, 60_000);

  it('cuts a stalled body at --body-idle-timeout with 408 GW_BODY_TIMEOUT, long before --body-read-timeout', async () => {
    fleet = await startFleet({
      nodes: 1,
      gatewayArgs: ['--body-idle-timeout', '500ms', '--body-read-timeout', '30s'],
    });
    staller = new RawClient(fleet.gateway.url, STALLER);
    const replies = await Promise.all(Array.from({ length: 10 }, () => staller!.stall()));
    for (const reply of replies) {
      expect(reply).toMatchObject({ status: 408, code: 'GW_BODY_TIMEOUT' });
      // Cut by the idle bound, not the read timeout (30 s): 20 s of room for a busy machine.
      expect(reply.elapsedMs).toBeGreaterThanOrEqual(450);
      expect(reply.elapsedMs).toBeLessThan(10_000);
    }
    const page = await metrics(fleet.gateway);
    expect(metricValue(page, 'sluice_uploads')).toBe(0);
    expect(metricValue(page, 'sluice_calls_rejected_total', { code: 'GW_BODY_TIMEOUT' })).toBe(10);
    expect((await engineCalls(fleet)).received).toBe(0);
  }, 60_000);
});
