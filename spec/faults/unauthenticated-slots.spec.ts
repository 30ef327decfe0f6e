/**
 * Fault: anyone who reached a signed runner's port could hold all its slots. Four connections,
 * each with a well-formed but fake signature and a body never finished, took the four slots:
 * the runner checked only the header's shape before admission, then read the body with no time
 * bound, so gateway traffic went elsewhere and `calls.unauthorized` stayed 0.
 *
 * Now the signature covers only what the head carries (the body's digest among it) and is
 * verified before a slot is taken; the body of an admitted call is bounded in time, total and
 * idle. Runner, engine and gateway run in-process on 127.0.0.1; the attackers are raw sockets.
 */
import { randomBytes } from 'node:crypto';
import { connect } from 'node:net';
import type { Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { createGateway } from '../../gateway/server.ts';
import type { RunnerOptions } from '../../runner/options.ts';
import type { RunnerServer } from '../../runner/server.ts';
import {
  BODY_DIGEST_HEADER,
  BUSY_HEADER,
  CALL_ID_HEADER,
  DEADLINE_HEADER,
  SIGNATURE_HEADER,
  bodyDigest,
  signCall,
} from '../../runner/protocol/index.ts';
import { chatBody, eventually, postJson } from '../support/fleet.ts';
import { startSimRunner } from '../support/sim-runner.ts';

const SECRET = 'spec-call-secret-0123456789abcdef0123456789';
const PATH = '/v1/chat/completions';

const cleanups: Array<() => Promise<unknown> | void> = [];
afterEach(async () => {
  while (cleanups.length > 0) await Promise.resolve(cleanups.pop()!()).catch(() => {});
});

async function startRunner(options: Partial<RunnerOptions> = {}): Promise<{ runner: RunnerServer; url: string }> {
  const signed = { id: 'r-slots', slots: 4, callSecret: SECRET, ...options };
  const { runner, runnerUrl: url } = await startSimRunner(cleanups, signed, { ttftMs: 0, itlMs: 0, outputTokens: 2 });
  await eventually(() => runner.status().ready, 10_000, 'the engine to be ready');
  return { runner, url };
}

/** What a raw connection got: the final status line's code, the headers and what followed. */
interface RawAnswer {
  status: number;
  headers: Record<string, string>;
  text: string;
}

/**
 * Sends a call's head and `partial` of its body (declared `declared` bytes long) on a raw
 * socket, and leaves the rest unsent. `answer` resolves once a final answer's head is in (or
 * the connection closes); `send` writes more of the body.
 */
function openCall(
  url: string,
  headers: Record<string, string>,
  partial: string,
  declared: number,
): { socket: Socket; answer: Promise<RawAnswer> } {
  const { hostname, port } = new URL(url);
  const socket = connect(Number(port), hostname);
  cleanups.push(() => void socket.destroy());
  const chunks: Buffer[] = [];
  const answer = new Promise<RawAnswer>((resolve) => {
    const settle = (): boolean => {
      let text = Buffer.concat(chunks).toString('latin1');
      // Interim answers (102 Processing) come first.
      while (/^HTTP\/1\.1 1\d\d /.test(text) && text.includes('\r\n\r\n'))
        text = text.slice(text.indexOf('\r\n\r\n') + 4);
      const end = text.indexOf('\r\n\r\n');
      if (end === -1) return false;
      const [line, ...rest] = text.slice(0, end).split('\r\n');
      const parsed: Record<string, string> = {};
      for (const h of rest) parsed[h.slice(0, h.indexOf(':')).toLowerCase()] = h.slice(h.indexOf(':') + 1).trim();
      const content = text.slice(end + 4);
      // An answer with a length is taken whole; a streamed one once its head is in.
      if (
        !closed &&
        parsed['content-length'] !== undefined &&
        Buffer.byteLength(content, 'latin1') < Number(parsed['content-length'])
      )
        return false;
      resolve({ status: Number(line!.split(' ')[1]), headers: parsed, text: content });
      return true;
    };
    let done = false;
    let closed = false;
    socket.on('data', (chunk: Buffer) => {
      chunks.push(chunk);
      if (!done && settle()) done = true;
    });
    socket.on('error', () => undefined);
    socket.on('close', () => {
      closed = true;
      if (!done && !settle()) resolve({ status: 0, headers: {}, text: '' });
    });
  });
  const head = [
    `POST ${PATH} HTTP/1.1`,
    `host: ${hostname}:${port}`,
    'content-type: application/json',
    `content-length: ${declared}`,
  ];
  for (const [name, value] of Object.entries(headers)) head.push(`${name}: ${value}`);
  socket.write(`${head.join('\r\n')}\r\n\r\n${partial}`);
  return { socket, answer };
}

/** Resolves with `promise`, or rejects naming `what` once `ms` pass: a cut that never comes fails fast. */
function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>(
    (_, reject) => (timer = setTimeout(() => reject(new Error(`no ${what} within ${ms} ms`)), ms)),
  );
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

/** A gateway's headers for `body` under `secret`, with a fresh call id. */
function signed(body: string, secret = SECRET): Record<string, string> {
  const callId = `0190d2a8-0000-7000-8000-${randomBytes(6).toString('hex')}`;
  const deadline = Date.now() + 60_000;
  const digest = bodyDigest(Buffer.from(body));
  return {
    [CALL_ID_HEADER]: callId,
    [DEADLINE_HEADER]: String(deadline),
    [SIGNATURE_HEADER]: signCall(secret, { callId, method: 'POST', path: PATH, deadline, bodyDigest: digest }),
    [BODY_DIGEST_HEADER]: digest,
  };
}

/** Headers shaped like a gateway's, the MAC random: what anyone can make without the secret. */
function forged(body: string): Record<string, string> {
  return {
    [CALL_ID_HEADER]: `0190d2a8-0000-7000-8000-${randomBytes(6).toString('hex')}`,
    [DEADLINE_HEADER]: String(Date.now() + 60_000),
    [SIGNATURE_HEADER]: `v1=${randomBytes(32).toString('base64url')}`,
    [BODY_DIGEST_HEADER]: bodyDigest(Buffer.from(body)),
  };
}

describe('a signed runner reached by connections without the call secret', () => {
  it('refuses fake signatures with unfinished bodies before they take a slot, counts each, and still serves its gateway', async () => {
    const { runner, url } = await startRunner();
    const body = chatBody();
    const attackers = Array.from({ length: 4 }, () => openCall(url, forged(body), body.slice(0, 10), body.length));
    const status = () => runner.status();
    // Either outcome settles: four refusals, or four slots held.
    await eventually(
      () => (status().calls.unauthorized ?? 0) + status().slots.inUse >= 4,
      10_000,
      'the four connections to be handled',
    );
    expect(status().slots.inUse).toBe(0);
    expect(status().calls.unauthorized).toBe(4);
    for (const { answer } of attackers) {
      const got = await answer;
      expect(got.status).toBe(401);
      expect(got.headers['sluice-error']).toBe('RUNNER_UNAUTHORIZED');
    }

    const gw = createGateway({ runners: [url], callSecret: SECRET, statusInterval: 50, placerTimeout: 2000 });
    cleanups.push(() => gw.close());
    const { url: gwUrl } = await gw.listen(0, '127.0.0.1');
    const placed = await postJson(`${gwUrl}${PATH}`, chatBody({ max_tokens: 2 }));
    expect(placed.status).toBe(200);
    expect(placed.headers['sluice-runner-id']).toBe('r-slots');
    expect(status().calls).toMatchObject({ served: 1, unauthorized: 4 });
  });

  it('answers a full runner busy at once, before the body, to a call whose signature verifies', async () => {
    const { runner, url } = await startRunner({ slots: 1 });
    const body = chatBody();
    // A gateway's call that holds the one slot while its body is on its way.
    const holder = openCall(url, signed(body), body.slice(0, 10), body.length);
    await eventually(() => runner.status().slots.inUse === 1, 10_000, 'the first call to take the slot');
    const second = openCall(url, signed(body), '', body.length);
    const busy = await within(second.answer, 10_000, 'busy answer');
    expect(busy.status).toBe(503);
    expect(busy.headers[BUSY_HEADER]).toBe('slots');
    holder.socket.write(body.slice(10));
    expect((await holder.answer).status).toBe(200);
    expect(runner.status().calls).toMatchObject({ served: 1, rejected: 1, unauthorized: 0 });
  });
});

describe("a runner's body read", () => {
  it('cuts a stalled body at bodyIdleTimeout with 408 RUNNER_BODY_TIMEOUT, frees the slot, and takes the call again', async () => {
    const { runner, url } = await startRunner({ bodyIdleTimeout: 300, bodyReadTimeout: 30_000 });
    const body = chatBody();
    const headers = signed(body);
    const started = performance.now();
    const stalled = openCall(url, headers, body.slice(0, 10), body.length);
    const cut = await within(stalled.answer, 10_000, 'answer to the stalled body');
    expect(cut.status).toBe(408);
    expect(cut.headers['sluice-error'] ?? cut.text).toContain('RUNNER_BODY_TIMEOUT');
    expect(cut.text).toContain('bodyIdleTimeout (300 ms)');
    expect(performance.now() - started).toBeGreaterThanOrEqual(290);
    await eventually(() => runner.status().slots.inUse === 0, 5000, 'the slot to be free');
    expect(runner.status().calls).toMatchObject({ rejected: 1, served: 0 });
    // Nothing ran, so the gateway may send the same call again, whole.
    const again = openCall(url, headers, body, body.length);
    expect((await again.answer).status).toBe(200);
  });

  it('cuts a trickling body at bodyReadTimeout with 408 RUNNER_BODY_TIMEOUT', async () => {
    const { runner, url } = await startRunner({ bodyIdleTimeout: 30_000, bodyReadTimeout: 500 });
    const body = chatBody();
    const started = performance.now();
    const trickle = openCall(url, signed(body), body.slice(0, 1), body.length);
    let sent = 1;
    // A byte every 50 ms: never idle for long, never done before the bound.
    const drip = setInterval(() => {
      if (sent < body.length - 1) trickle.socket.write(body.slice(sent, ++sent));
    }, 50);
    cleanups.push(() => clearInterval(drip));
    const cut = await within(trickle.answer, 10_000, 'answer to the trickling body');
    expect(cut.status).toBe(408);
    expect(cut.text).toContain('bodyReadTimeout (500 ms)');
    expect(performance.now() - started).toBeGreaterThanOrEqual(490);
    await eventually(() => runner.status().slots.inUse === 0, 5000, 'the slot to be free');
    expect(runner.status().calls.rejected).toBe(1);
  });
});
