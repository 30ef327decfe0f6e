/**
 * Callback delivery against a real receiver on 127.0.0.1 port 0: the receiver checks every
 * signature with its own HMAC, answers from a script, and the sender's pauses are recorded by
 * an injected clock, so no test waits out a backoff.
 */
import { createHmac } from 'node:crypto';
import { createServer } from 'node:http';
import type { IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import {
  createCallbackPolicy,
  createCallbackSender,
  generateWebhookSecret,
  verifyWebhook,
} from '../../../gateway/callbacks/index.ts';
import type { CallbackSenderOptions } from '../../../gateway/callbacks/index.ts';
import { createJsonLogger } from '../../../placer/kernel/index.ts';
import type { Clock } from '../../../placer/kernel/index.ts';
import { serversForEach } from '../../support/servers.ts';

const KEY = Buffer.alloc(32, 'k');
const SECRET = `whsec_${KEY.toString('base64')}`;
const START = 1_790_000_000_000;
const PAYLOAD = { id: 'call_1', status: 'succeeded', output: 'the quick brown fox' };

const { cleanups } = serversForEach();

type Answer = number | { status: number; headers?: Record<string, string> } | 'hang';
interface Received {
  url: string;
  headers: IncomingHttpHeaders;
  body: string;
  /** The signature as this test computes it from the received id, timestamp and body. */
  signatureOk: boolean;
}

/** A receiver answering each request with the next scripted answer (the last one repeats). */
async function receiver(script: Answer[]): Promise<{ origin: string; port: number; received: Received[] }> {
  const received: Received[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString();
      const { 'webhook-id': id, 'webhook-timestamp': ts, 'webhook-signature': sig } = req.headers;
      const mine =
        'v1,' +
        createHmac('sha256', KEY)
          .update(`${String(id)}.${String(ts)}.${body}`)
          .digest('base64');
      received.push({ url: req.url!, headers: req.headers, body, signatureOk: sig === mine });
      const answer = script[Math.min(received.length, script.length) - 1]!;
      if (answer === 'hang') return;
      const { status, headers = {} } = typeof answer === 'number' ? { status: answer } : answer;
      res.writeHead(status, headers).end('receiver says hi');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  cleanups.push(
    () =>
      new Promise((r) => {
        server.closeAllConnections();
        server.close(r);
      }),
  );
  const { port } = server.address() as AddressInfo;
  return { origin: `http://127.0.0.1:${port}`, port, received };
}

/** A clock whose sleep records the pause and moves time on at once. */
function fakeClock(): { clock: Clock; slept: number[] } {
  let now = START;
  const slept: number[] = [];
  return {
    slept,
    clock: {
      now: () => now,
      async sleep(ms: number, signal?: AbortSignal) {
        if (signal?.aborted) throw signal.reason;
        slept.push(ms);
        now += ms;
      },
    },
  };
}

function sender(origin: string, over: Partial<CallbackSenderOptions> = {}) {
  const time = fakeClock();
  const send = createCallbackSender({
    secret: SECRET,
    policy: createCallbackPolicy({ allow: [origin], allowPrivate: true }),
    backoffBase: 4000,
    random: () => 0.5,
    clock: time.clock,
    ...over,
  });
  return { send, slept: time.slept };
}

describe('createCallbackSender', () => {
  it('retries 500, 500 then delivers on 200: one webhook-id, fresh timestamps, jittered backoff', async () => {
    const r = await receiver([500, 500, 200]);
    const randoms = [0.25, 0.75];
    const { send, slept } = sender(r.origin, { random: () => randoms.shift()! });

    const result = await send.send({ id: 'call_1', url: `${r.origin}/hooks/sluice?token=t0k`, payload: PAYLOAD });

    expect(result).toEqual({ delivered: true, attempts: 3, lastStatus: 200 });
    expect(r.received).toHaveLength(3);
    // Full jitter: random × min(cap, base × 2^(n-1)) = 0.25 × 4000, then 0.75 × 8000.
    expect(slept).toEqual([1000, 6000]);
    expect(r.received.map((x) => x.headers['webhook-id'])).toEqual(['call_1', 'call_1', 'call_1']);
    const stamps = r.received.map((x) => Number(x.headers['webhook-timestamp']));
    expect(stamps).toEqual([START / 1000, START / 1000 + 1, START / 1000 + 7]);
    for (const x of r.received) {
      expect(x.signatureOk).toBe(true);
      expect(x.url).toBe('/hooks/sluice?token=t0k');
      expect(x.headers['content-type']).toBe('application/json');
      expect(JSON.parse(x.body)).toEqual(PAYLOAD);
    }
    const last = r.received[2]!;
    expect(verifyWebhook({ headers: last.headers, body: last.body, secret: SECRET, now: START + 7000 })).toMatchObject({
      kind: 'verified',
    });
  });

  it('signs with every secret while one is rotated, so a receiver on either verifies', async () => {
    const r = await receiver([200]);
    const fresh = generateWebhookSecret();
    const { send } = sender(r.origin, { secret: [fresh, SECRET] });
    expect(await send.send({ id: 'call_r', url: `${r.origin}/hook`, payload: PAYLOAD })).toMatchObject({
      delivered: true,
    });
    const got = r.received[0]!;
    expect(String(got.headers['webhook-signature']).split(' ')).toHaveLength(2);
    for (const secret of [fresh, SECRET]) {
      expect(verifyWebhook({ headers: got.headers, body: got.body, secret, now: START })).toMatchObject({
        kind: 'verified',
      });
    }
    expect(
      verifyWebhook({ headers: got.headers, body: got.body, secret: generateWebhookSecret(), now: START }),
    ).toMatchObject({ kind: 'rejected' });
  });

  it('refuses an empty list of secrets, too many, or a malformed one among them', () => {
    const policy = createCallbackPolicy({ allow: [] });
    expect(() => createCallbackSender({ secret: [], policy })).toThrow(
      /secret must be one secret or a list of 1 to 4, got 0/,
    );
    expect(() => createCallbackSender({ secret: Array.from({ length: 5 }, generateWebhookSecret), policy })).toThrow(
      /got 5/,
    );
    expect(() => createCallbackSender({ secret: [SECRET, 'whsec_short'], policy })).toThrow(
      expect.objectContaining({ code: 'CALLBACK_INVALID_SECRET' }),
    );
  });

  it('does not retry a 400', async () => {
    const r = await receiver([400, 200]);
    const { send, slept } = sender(r.origin);
    expect(await send.send({ id: 'call_2', url: `${r.origin}/cb`, payload: PAYLOAD })).toEqual({
      delivered: false,
      attempts: 1,
      lastStatus: 400,
    });
    expect(r.received).toHaveLength(1);
    expect(slept).toEqual([]);
  });

  it('does not follow a redirect: the new location never went through the policy', async () => {
    const r = await receiver([{ status: 302, headers: { location: 'http://169.254.169.254/' } }, 200]);
    const { send } = sender(r.origin);
    expect(await send.send({ id: 'call_3', url: `${r.origin}/cb`, payload: PAYLOAD })).toEqual({
      delivered: false,
      attempts: 1,
      lastStatus: 302,
    });
    expect(r.received).toHaveLength(1);
  });

  it('waits Retry-After seconds after a 429 instead of the backoff', async () => {
    const r = await receiver([{ status: 429, headers: { 'retry-after': '1' } }, 200]);
    const { send, slept } = sender(r.origin);
    expect(await send.send({ id: 'call_4', url: `${r.origin}/cb`, payload: PAYLOAD })).toEqual({
      delivered: true,
      attempts: 2,
      lastStatus: 200,
    });
    expect(slept).toEqual([1000]);
  });

  it('bounds a 503 Retry-After by backoffCap and ignores the HTTP-date form', async () => {
    const date = new Date(START + 3_600_000).toUTCString();
    const r = await receiver([
      { status: 503, headers: { 'retry-after': '3600' } },
      { status: 503, headers: { 'retry-after': date } },
      200,
    ]);
    const { send, slept } = sender(r.origin, { backoffCap: 5000 });
    expect(await send.send({ id: 'call_5', url: `${r.origin}/cb`, payload: PAYLOAD })).toMatchObject({
      delivered: true,
      attempts: 3,
    });
    expect(slept).toEqual([5000, 2500]); // then 0.5 × min(cap 5000, 4000 × 2)
  });

  it('retries 408 and stops at the attempts cap, with no pause after the last attempt', async () => {
    const r = await receiver([408, 502]);
    const { send, slept } = sender(r.origin, { attempts: 4, backoffBase: 1000, backoffCap: 3000, random: () => 0.999 });
    expect(await send.send({ id: 'call_6', url: `${r.origin}/cb`, payload: PAYLOAD })).toEqual({
      delivered: false,
      attempts: 4,
      lastStatus: 502,
    });
    expect(r.received).toHaveLength(4);
    expect(slept).toEqual([999, 1998, 2997]);
  });

  it('retries a refused connection and reports the network error', async () => {
    const r = await receiver([200]);
    await cleanups.pop()!(); // close the receiver: its port now refuses connections
    const { send, slept } = sender(r.origin, { attempts: 2 });
    const result = await send.send({ id: 'call_7', url: `${r.origin}/cb`, payload: PAYLOAD });
    expect(result).toMatchObject({ delivered: false, attempts: 2 });
    expect(result.lastError).toContain('ECONNREFUSED');
    expect(result.lastStatus).toBeUndefined();
    expect(slept).toEqual([2000]);
  });

  it('gives up an attempt the receiver never answers after timeout ms', async () => {
    const r = await receiver(['hang']);
    const { send } = sender(r.origin, { attempts: 1, timeout: 200 });
    const result = await send.send({ id: 'call_8', url: `${r.origin}/cb`, payload: PAYLOAD });
    expect(result).toMatchObject({ delivered: false, attempts: 1 });
    expect(result.lastError).toContain('no answer within 200 ms');
  });

  it('connects to the address the policy approved, even when DNS answers differently later', async () => {
    const r = await receiver([500, 200]);
    const answers = ['127.0.0.1', '203.0.113.9'];
    const asked: string[] = [];
    const lookup = async (host: string) => {
      asked.push(host);
      return [{ address: answers.shift() ?? '203.0.113.9', family: 4 }];
    };
    const origin = `http://hooks.sluice.test:${r.port}`;
    const policy = createCallbackPolicy({ allow: [origin], allowPrivate: true, lookup });
    const { send } = sender(origin, { policy });
    expect(await send.send({ id: 'call_9', url: `${origin}/cb`, payload: PAYLOAD })).toMatchObject({
      delivered: true,
      attempts: 2,
    });
    expect(asked).toEqual(['hooks.sluice.test']);
    expect(r.received.map((x) => x.headers.host)).toEqual([
      `hooks.sluice.test:${r.port}`,
      `hooks.sluice.test:${r.port}`,
    ]);
  });

  it('sends nothing to a URL the policy refuses, and says why without logging the URL', async () => {
    const r = await receiver([200]);
    const lines: string[] = [];
    const logger = createJsonLogger({ write: (line) => lines.push(line) });
    const { send } = sender(r.origin, { policy: createCallbackPolicy({ allow: [r.origin] }), logger });
    const result = await send.send({ id: 'call_10', url: `${r.origin}/cb?token=s3cr3t`, payload: PAYLOAD });
    expect(result).toMatchObject({ delivered: false, attempts: 0 });
    expect(result.lastError).toContain('loopback');
    expect(r.received).toHaveLength(0);
    expect(lines.join('\n')).toContain('callback URL refused: special-address');
    expect(lines.join('\n')).not.toContain('s3cr3t');
  });

  it('never rejects: an unserialisable payload or a throwing policy is a failed delivery', async () => {
    const r = await receiver([200]);
    const { send } = sender(r.origin);
    expect(await send.send({ id: 'call_11', url: `${r.origin}/cb`, payload: { n: 1n } })).toMatchObject({
      delivered: false,
      attempts: 0,
    });
    const broken = sender(r.origin, { policy: { check: () => Promise.reject(new Error('boom')) } }).send;
    expect(await broken.send({ id: 'call_11', url: `${r.origin}/cb`, payload: PAYLOAD })).toEqual({
      delivered: false,
      attempts: 0,
      lastError: 'boom',
    });
    expect(r.received).toHaveLength(0);
  });

  it('stops pausing and sending when the caller aborts', async () => {
    const r = await receiver([500]);
    const controller = new AbortController();
    const clock: Clock = {
      now: () => START,
      sleep: (_ms, signal) => {
        controller.abort(new Error('gateway shutting down'));
        return Promise.reject(signal?.reason);
      },
    };
    const { send } = sender(r.origin, { clock });
    const result = await send.send({
      id: 'call_12',
      url: `${r.origin}/cb`,
      payload: PAYLOAD,
      signal: controller.signal,
    });
    expect(result).toMatchObject({ delivered: false, attempts: 1, lastError: 'aborted: gateway shutting down' });
    expect(r.received).toHaveLength(1);
  });

  it('logs each failed attempt with the call id, never the secret, the body or the query', async () => {
    const r = await receiver([500, 200]);
    const lines: Array<Record<string, unknown>> = [];
    const logger = createJsonLogger({
      level: 'debug',
      write: (line) => lines.push(JSON.parse(line) as Record<string, unknown>),
    });
    const { send } = sender(r.origin, { logger });
    await send.send({ id: 'call_13', url: `${r.origin}/cb?token=s3cr3t`, payload: PAYLOAD });
    expect(lines.map((l) => l.msg)).toEqual(['callback attempt failed', 'callback delivered']);
    expect(lines[0]).toMatchObject({
      level: 'warn',
      callId: 'call_13',
      attempt: 1,
      status: 500,
      retryInMs: 2000,
      target: `${r.origin}/cb`,
    });
    const text = JSON.stringify(lines);
    for (const secret of [SECRET, KEY.toString('base64'), 'quick brown fox', 's3cr3t'])
      expect(text).not.toContain(secret);
  });
});
