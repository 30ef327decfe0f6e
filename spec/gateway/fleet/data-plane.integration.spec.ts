/**
 * A closed data plane over real sockets on 127.0.0.1: runners that take calls only from a
 * gateway, under call signatures and under mutual TLS, and the gateway's front on https.
 * Engines, runners and gateways run in-process; certificates are made for the suite.
 */
import { createServer } from 'node:http';
import type { IncomingHttpHeaders, Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Agent, request } from 'undici';
import type { Dispatcher } from 'undici';
import {
  BODY_DIGEST_HEADER,
  BUSY_HEADER,
  CALL_ID_HEADER,
  DEADLINE_HEADER,
  SIGNATURE_HEADER,
  signCall,
  bodyDigest,
} from '../../../runner/protocol/index.ts';
import type { RunnerStatus } from '../../../runner/protocol/index.ts';
import { createRunner } from '../../../runner/server.ts';
import type { RunnerEnvironment } from '../../../runner/server.ts';
import type { RunnerOptions } from '../../../runner/options.ts';
import { RunnerConfigError } from '../../../runner/errors.ts';
import { createGateway } from '../../../gateway/server.ts';
import type { GatewayOptions } from '../../../gateway/options.ts';
import { GatewayConfigError } from '../../../gateway/errors.ts';
import { chatBody, eventually } from '../../support/fleet.ts';
import { startScriptedEngine } from '../../support/scripted-engine.ts';
import { warningRecorder } from '../../support/logger.ts';
import type { LogFields } from '../../../placer/kernel/index.ts';
import { makeCa } from '../../support/certs.ts';
import type { Issued, TestCa } from '../../support/certs.ts';
import { connect as connectH2 } from 'node:http2';
import { serversForEach } from '../../support/servers.ts';
import { startSimEngine } from '../../support/sim-runner.ts';

const SECRET = 'spec-call-secret-0123456789abcdef0123456789';
const OTHER_SECRET = 'spec-other-secret-fedcba9876543210fedcba98';

const { cleanups } = serversForEach();

function startEngine(): Promise<string> {
  return startSimEngine(cleanups, { ttftMs: 0, itlMs: 0, outputTokens: 2 });
}

async function startRunner(
  options: Partial<RunnerOptions>,
  environment: RunnerEnvironment = {},
): Promise<{ url: string; status: () => RunnerStatus }> {
  const runner = createRunner(
    { engine: await startEngine(), engineKind: 'sim', id: 'r-dp', slots: 4, ...options },
    environment,
  );
  const { url } = await runner.listen(0, '127.0.0.1');
  cleanups.push(() => runner.close({ drainTimeout: 0 }));
  return { url, status: () => runner.status() };
}

async function startGateway(options: Partial<GatewayOptions>): Promise<string> {
  const gateway = createGateway({ statusInterval: 50, ...options });
  const { url } = await gateway.listen(0, '127.0.0.1');
  cleanups.push(() => gateway.close());
  return url;
}

type Answer = { status: number; headers: IncomingHttpHeaders; json: any };

async function post(
  url: string,
  body: string,
  headers: Record<string, string> = {},
  dispatcher?: Dispatcher,
): Promise<Answer> {
  const res = await request(url, {
    method: 'POST',
    body,
    headers: { 'content-type': 'application/json', ...headers },
    ...(dispatcher ? { dispatcher } : {}),
  });
  const text = await res.body.text();
  return {
    status: res.statusCode,
    headers: res.headers as IncomingHttpHeaders,
    json: text === '' ? undefined : JSON.parse(text),
  };
}

/** A gateway's call as a runner received it: method, target, headers, body. */
interface Captured {
  method: string;
  path: string;
  headers: Record<string, string>;
  body: Buffer;
}

/**
 * A listener posing as a runner that keeps every call a gateway sends it and answers busy, so the
 * gateway tries again and nothing runs: what someone on the wire between them would capture.
 */
async function startRecorder(): Promise<{ url: string; calls: Captured[]; server: Server }> {
  const calls: Captured[] = [];
  const server = createServer((req, res) => {
    if (req.method === 'GET') {
      // The gateway's status probe: a ready runner of the sim's model, with room.
      const status = {
        id: 'recorder',
        state: 'serving',
        ready: true,
        models: ['sim-small'],
        slots: { total: 4, inUse: 0 },
        engines: [],
      };
      return void res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(status));
    }
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const headers: Record<string, string> = {};
      for (const [name, value] of Object.entries(req.headers)) if (typeof value === 'string') headers[name] = value;
      calls.push({ method: req.method!, path: req.url!, headers, body: Buffer.concat(chunks) });
      res.writeHead(503, { [BUSY_HEADER]: 'slots', 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(() => new Promise((resolve) => server.close(resolve)));
  const { port } = server.address() as { port: number };
  return { url: `http://127.0.0.1:${port}`, calls, server };
}

/** Sends a captured call to `url`, with `change` made to it. */
function replay(
  url: string,
  call: Captured,
  change: { headers?: Record<string, string>; body?: Buffer } = {},
): Promise<Answer> {
  const headers = { ...call.headers, ...change.headers };
  for (const name of ['host', 'content-length', 'connection']) delete headers[name];
  return post(`${url}${call.path}`, (change.body ?? call.body).toString('utf8'), headers);
}

describe('a runner with a call secret', () => {
  it('serves the calls of a gateway that signs with the secret', async () => {
    const runner = await startRunner({ callSecret: SECRET });
    const gw = await startGateway({ runners: [runner.url], callSecret: SECRET });
    const sync = await post(`${gw}/v1/chat/completions`, chatBody({ max_tokens: 2 }));
    expect(sync.status).toBe(200);
    expect(sync.json.object).toBe('chat.completion');
    const streamed = await request(`${gw}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: chatBody({ stream: true }),
    });
    expect(streamed.statusCode).toBe(200);
    expect(await streamed.body.text()).toContain('data: [DONE]');
    // The same call id may be offered here twice when the first offer found the runner busy;
    // here every call was new, and none was refused.
    expect(runner.status().calls).toMatchObject({ served: 2, unauthorized: 0 });
  });

  it('refuses with 401 a call without a signature, or signed with another secret, and counts each', async () => {
    const runner = await startRunner({ callSecret: SECRET });
    const unsigned = await post(`${runner.url}/v1/chat/completions`, chatBody());
    expect(unsigned.status).toBe(401);
    expect(unsigned.json.error.code).toBe('RUNNER_UNAUTHORIZED');
    expect(unsigned.json.error.message).not.toContain(SECRET);

    expect(unsigned.headers['sluice-error']).toBe('RUNNER_UNAUTHORIZED');
    expect(unsigned.headers['sluice-runner-id']).toBe('r-dp');

    const gw = await startGateway({ runners: [runner.url], callSecret: OTHER_SECRET, placerTimeout: 500 });
    const forged = await post(`${gw}/v1/chat/completions`, chatBody());
    // The client's key is not what the runner refused: it gets the gateway's 502, saying why.
    expect(forged.status).toBe(502);
    expect(forged.json.error.code).toBe('GW_RUNNER_UNAUTHORIZED');
    expect(forged.json.error.message).toContain('refused the call as not from a gateway (RUNNER_UNAUTHORIZED)');
    expect(forged.json.error.message).toContain('nothing ran');
    expect(runner.status().calls).toMatchObject({ served: 0, unauthorized: 2 });

    // A detached call fails with the runner's code in its record.
    const detached = await post(`${gw}/v1/chat/completions`, chatBody(), { prefer: 'respond-async' });
    expect(detached.status).toBe(202);
    let record: any;
    await eventually(
      async () => {
        record = (await request(`${gw}/v1/calls/${detached.json.id}`).then((r) => r.body.json())) as any;
        return record.status !== 'queued' && record.status !== 'running';
      },
      5000,
      'the detached call to end',
    );
    expect(record.status).toBe('failed');
    expect(record.error).toEqual({
      code: 'RUNNER_UNAUTHORIZED',
      message: expect.stringContaining('refused the call as not from a gateway (RUNNER_UNAUTHORIZED); nothing ran'),
    });
  });

  it('warns of refusals at most once a minute, with how many came between', async () => {
    let shift = 0;
    const warnings: LogFields[] = [];
    const runner = await startRunner(
      { callSecret: SECRET, logger: warningRecorder(warnings) },
      { now: () => Date.now() + shift },
    );
    const refusals = () => warnings.filter((w) => w.msg === 'call refused: no valid signature');
    for (let i = 0; i < 3; i++) expect((await post(`${runner.url}/v1/chat/completions`, chatBody())).status).toBe(401);
    expect(refusals()).toEqual([expect.objectContaining({ reason: 'unsigned', refusedSinceLastWarning: 0 })]);
    shift = 60_000;
    expect((await post(`${runner.url}/v1/chat/completions`, chatBody())).status).toBe(401);
    expect(refusals()).toHaveLength(2);
    expect(refusals()[1]).toMatchObject({ reason: 'unsigned', refusedSinceLastWarning: 2 });
    expect(JSON.stringify(warnings)).not.toContain(SECRET);
    expect(runner.status().calls.unauthorized).toBe(4);
  });

  it('refuses a captured call replayed with another call id or body, again, or after its deadline', async () => {
    let shift = 0;
    const runner = await startRunner({ callSecret: SECRET, callClockSkew: 1000 }, { now: () => Date.now() + shift });
    const recorder = await startRecorder();
    const gw = await startGateway({
      runners: [recorder.url],
      callSecret: SECRET,
      placerTimeout: 300,
      callTimeout: 60_000,
    });
    // Two calls that never ran anywhere: the recorder answered busy to every offer.
    for (const content of ['first', 'second']) {
      const answer = await post(`${gw}/v1/chat/completions`, chatBody({ messages: [{ role: 'user', content }] }));
      expect(answer.status).toBe(503);
    }
    const ids = [...new Set(recorder.calls.map((c) => c.headers[CALL_ID_HEADER]))];
    expect(ids).toHaveLength(2);
    const [first, second] = ids.map((id) => recorder.calls.find((c) => c.headers[CALL_ID_HEADER] === id)!);
    expect(first!.headers[SIGNATURE_HEADER]).toMatch(/^v1=[A-Za-z0-9_-]{43}$/);
    expect(Number(first!.headers[DEADLINE_HEADER])).toBeGreaterThan(Date.now());

    const refused = async (answer: Promise<Answer>) => {
      const { status, json } = await answer;
      expect(status).toBe(401);
      expect(json.error.code).toBe('RUNNER_UNAUTHORIZED');
      return json.error.message as string;
    };
    expect(await refused(replay(runner.url, first!, { headers: { [CALL_ID_HEADER]: ids[1]! } }))).toMatch(
      /signature does not match/,
    );
    expect(
      await refused(
        replay(runner.url, first!, {
          body: Buffer.from(chatBody({ messages: [{ role: 'user', content: 'mine now' }] })),
        }),
      ),
    ).toMatch(/does not match/);
    expect(
      await refused(
        replay(runner.url, first!, {
          headers: { [DEADLINE_HEADER]: String(Number(first!.headers[DEADLINE_HEADER]) + 3_600_000) },
        }),
      ),
    ).toMatch(/does not match/);

    // The capture as it was is the gateway's own call: it runs once, and never again.
    expect((await replay(runner.url, first!)).status).toBe(200);
    expect(await refused(replay(runner.url, first!))).toMatch(/already run/);

    // Past its deadline by more than the skew, the second capture is refused; the same request
    // within its deadline is taken, so the deadline alone refused it.
    shift = Number(second!.headers[DEADLINE_HEADER]) - Date.now() + 1001;
    expect(await refused(replay(runner.url, second!))).toMatch(/deadline has passed/);
    shift = 0;
    expect((await replay(runner.url, second!)).status).toBe(200);

    expect(runner.status().calls).toMatchObject({ served: 2, unauthorized: 5 });
  });

  it('takes again a call id it answered busy, since nothing ran', async () => {
    // An engine that refuses the first call (429: nothing ran) and answers the next.
    let refusals = 1;
    const engine = await startScriptedEngine(['sim-small'], (req, res) => {
      req.resume();
      req.on('end', () => {
        if (refusals-- > 0) return void res.writeHead(429).end();
        res.writeHead(200, { 'content-type': 'application/json' }).end('{"object":"chat.completion"}');
      });
    });
    cleanups.push(() => engine.close());
    const runner = createRunner({ engine: engine.url, id: 'r-dp', callSecret: SECRET });
    cleanups.push(() => runner.close({ drainTimeout: 0 }));
    const { url } = await runner.listen(0, '127.0.0.1');
    await eventually(() => runner.status().ready, 5000, 'the engine to be ready');
    const body = chatBody();
    const deadline = Date.now() + 60_000;
    const id = '0190d2a8-0000-7000-8000-00000000beef';
    const headers = {
      [CALL_ID_HEADER]: id,
      [DEADLINE_HEADER]: String(deadline),
      [SIGNATURE_HEADER]: signCall(SECRET, {
        callId: id,
        method: 'POST',
        path: '/v1/chat/completions',
        deadline,
        bodyDigest: bodyDigest(Buffer.from(body)),
      }),
      [BODY_DIGEST_HEADER]: bodyDigest(Buffer.from(body)),
    };
    const busy = await post(`${url}/v1/chat/completions`, body, headers);
    expect(busy.status).toBe(503);
    expect(busy.headers[BUSY_HEADER]).toBe('engine-busy');
    const served = await post(`${url}/v1/chat/completions`, body, headers);
    expect(served.status).toBe(200);
    expect(engine.calls()).toBe(2);
    // Once it ran, the same request is a replay.
    expect((await post(`${url}/v1/chat/completions`, body, headers)).status).toBe(401);
    expect(engine.calls()).toBe(2);
  });
});

describe('a runner without a call secret or mutual TLS', () => {
  it('serves unsigned calls on loopback, refuses to start on another address unless allowed', async () => {
    const open = await startRunner({});
    expect((await post(`${open.url}/v1/chat/completions`, chatBody())).status).toBe(200);

    const engine = await startEngine();
    const refused = createRunner({ engine, engineKind: 'sim' });
    await expect(refused.listen(0, '0.0.0.0')).rejects.toThrow(RunnerConfigError);
    await expect(createRunner({ engine, engineKind: 'sim' }).listen(0, '0.0.0.0')).rejects.toThrow(
      /--call-secret.*--tls-cert.*--allow-unsigned-calls/,
    );
    await refused.close({ drainTimeout: 0 });
    for (const options of [{ allowUnsignedCalls: true }, { callSecret: SECRET }]) {
      const runner = createRunner({ engine, engineKind: 'sim', ...options });
      cleanups.push(() => runner.close({ drainTimeout: 0 }));
      await expect(runner.listen(0, '0.0.0.0')).resolves.toMatchObject({ host: '0.0.0.0' });
    }
  });
});

describe('mutual TLS between gateway and runners', () => {
  let ca: TestCa;
  let rogue: TestCa;
  let runnerCert: Issued;
  let gatewayCert: Issued;
  let rogueCert: Issued;
  beforeAll(() => {
    ca = makeCa('sluice-spec-ca');
    rogue = makeCa('sluice-spec-rogue');
    runnerCert = ca.issue('runner');
    gatewayCert = ca.issue('gateway');
    rogueCert = rogue.issue('gateway');
  });
  afterAll(() => {
    ca?.remove();
    rogue?.remove();
  });

  const agent = (options: { cert?: string; key?: string; ca: string }): Agent => {
    const a = new Agent({ connect: options });
    cleanups.push(() => a.close());
    return a;
  };

  it('serves the gateway, and refuses a client without a certificate or with one of another CA', async () => {
    const runner = await startRunner({ tls: { cert: runnerCert.cert, key: runnerCert.key, ca: ca.cert } });
    expect(runner.url).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
    const gw = await startGateway({
      runners: [runner.url],
      runnerTls: { cert: gatewayCert.cert, key: gatewayCert.key, ca: ca.cert },
    });
    const answer = await post(`${gw}/v1/chat/completions`, chatBody());
    expect(answer.status).toBe(200);
    expect(answer.headers['sluice-runner-id']).toBe('r-dp');
    // The gateway's status probes pass too: it knows what the runner serves.
    expect((await request(`${gw}/v1/models`).then((r) => r.body.json())) as any).toMatchObject({
      data: [{ id: 'sim-small' }],
    });

    await expect(post(`${runner.url}/v1/chat/completions`, chatBody(), {}, agent({ ca: ca.cert }))).rejects.toThrow();
    await expect(
      post(
        `${runner.url}/v1/chat/completions`,
        chatBody(),
        {},
        agent({ cert: rogueCert.cert, key: rogueCert.key, ca: ca.cert }),
      ),
    ).rejects.toThrow();
    // Plain http to the https port gets nothing a call could use.
    await expect(post(`${runner.url.replace('https:', 'http:')}/v1/chat/completions`, chatBody())).rejects.toThrow();
    await eventually(
      () => (runner.status().calls.unauthorized ?? 0) >= 2,
      5000,
      'the refused handshakes to be counted',
    );
    expect(runner.status().calls.served).toBe(1);
  });

  it('refuses a runner whose certificate another CA signed', async () => {
    const runner = await startRunner({ tls: { cert: rogueCert.cert, key: rogueCert.key, ca: ca.cert } });
    const gw = await startGateway({
      runners: [runner.url],
      runnerTls: { cert: gatewayCert.cert, key: gatewayCert.key, ca: ca.cert },
      placerTimeout: 300,
    });
    const answer = await post(`${gw}/v1/chat/completions`, chatBody());
    expect(answer.status).toBeGreaterThanOrEqual(500);
    expect(runner.status().calls.served).toBe(0);
  });
});

describe('the gateway front', () => {
  let ca: TestCa;
  let front: Issued;
  beforeAll(() => {
    ca = makeCa('sluice-spec-front');
    front = ca.issue('front');
  });
  afterAll(() => ca?.remove());

  it('serves https with --tls-cert and --tls-key', async () => {
    const runner = await startRunner({});
    const gw = await startGateway({ runners: [runner.url], tls: { cert: front.cert, key: front.key } });
    expect(gw).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
    const dispatcher = new Agent({ connect: { ca: ca.cert } });
    cleanups.push(() => dispatcher.close());
    const health = await request(`${gw}/healthz`, { dispatcher });
    expect(health.statusCode).toBe(200);
    expect(((await health.body.json()) as any).ok).toBe(true);
    const answer = await post(`${gw}/v1/chat/completions`, chatBody(), {}, dispatcher);
    expect(answer.status).toBe(200);
    expect(answer.json.object).toBe('chat.completion');
    const streamed = await request(`${gw}/v1/chat/completions`, {
      dispatcher,
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: chatBody({ stream: true }),
    });
    expect(streamed.statusCode).toBe(200);
    expect(await streamed.body.text()).toContain('data: [DONE]');
    // A client that does not trust the CA gets no answer at all.
    await expect(request(`${gw}/healthz`)).rejects.toThrow();
  });

  it('speaks HTTP/2 to a client that offers it, on the same port: calls, streams, refusals, and a close that ends its sessions', async () => {
    const runner = await startRunner({});
    const gateway = createGateway({
      statusInterval: 50,
      runners: [runner.url],
      tls: { cert: front.cert, key: front.key },
    });
    const { url: gw } = await gateway.listen(0, '127.0.0.1');
    let closed = false;
    cleanups.push(async () => (closed ? undefined : gateway.close()));
    // Node's own HTTP/2 client: it speaks nothing else, so an answer proves the protocol.
    const session = connectH2(gw, { ca: ca.cert });
    cleanups.push(async () => void session.destroy());
    const viaH2 = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const stream = session.request({
        ':method': 'POST',
        ':path': '/v1/chat/completions',
        'content-type': 'application/json',
      });
      let status = 0;
      let body = '';
      stream.on('response', (headers) => (status = Number(headers[':status'])));
      stream.on('data', (chunk: Buffer) => (body += chunk.toString()));
      stream.on('end', () => resolve({ status, body }));
      stream.on('error', reject);
      stream.end(chatBody());
    });
    expect(viaH2.status).toBe(200);
    expect(JSON.parse(viaH2.body).object).toBe('chat.completion');
    const h2 = new Agent({ allowH2: true, connect: { ca: ca.cert } });
    cleanups.push(() => h2.close());
    const health = await request(`${gw}/healthz`, { dispatcher: h2 });
    expect(health.statusCode).toBe(200);
    await health.body.dump();
    const answer = await post(`${gw}/v1/chat/completions`, chatBody(), {}, h2);
    expect(answer.status).toBe(200);
    expect(answer.json.object).toBe('chat.completion');
    expect(answer.headers['sluice-runner-id']).toBeDefined();
    const streamed = await request(`${gw}/v1/chat/completions`, {
      dispatcher: h2,
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: chatBody({ stream: true }),
    });
    expect(streamed.statusCode).toBe(200);
    expect(await streamed.body.text()).toContain('data: [DONE]');
    // A refusal that would close an HTTP/1.1 connection is answered in the shape every client gets.
    const refused = await post(`${gw}/v1/chat/completions`, '{"model": ', {}, h2);
    expect(refused.status).toBe(400);
    expect(refused.json.error.code).toBe('GW_INVALID_JSON');
    // HTTP/1.1 still works on the same port.
    const h1 = new Agent({ connect: { ca: ca.cert } });
    cleanups.push(() => h1.close());
    expect((await post(`${gw}/v1/chat/completions`, chatBody(), {}, h1)).status).toBe(200);
    // The client's session stays open; closing the gateway must not wait on it forever: the
    // close ends the session (the client sees it go), with no drain to wait out (nothing is in
    // flight), so well within the 30 s drain bound even on a busy machine.
    const started = Date.now();
    await gateway.close();
    closed = true;
    expect(Date.now() - started).toBeLessThan(15_000);
    await new Promise<void>((resolve) => (session.closed ? resolve() : session.once('close', () => resolve())));
  });

  it('refuses plain http on an address other than loopback unless allowPlainHttp', async () => {
    const runner = await startRunner({});
    const plain = createGateway({ runners: [runner.url] });
    cleanups.push(() => plain.close());
    await expect(plain.listen(0, '0.0.0.0')).rejects.toThrow(GatewayConfigError);
    await expect(createGateway({ runners: [runner.url] }).listen(0, '0.0.0.0')).rejects.toThrow(
      /--tls-cert.*--tls-terminated-upstream/,
    );
    const allowed = createGateway({ runners: [runner.url], allowPlainHttp: true });
    cleanups.push(() => allowed.close());
    await expect(allowed.listen(0, '0.0.0.0')).resolves.toMatchObject({ host: '0.0.0.0' });
  });
});
