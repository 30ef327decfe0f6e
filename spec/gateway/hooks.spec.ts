/**
 * The programmatic side of the LB agent, in-process over real sockets: the call overrider,
 * before/after call listeners, what goes over the wire to runner and engine, and the latency
 * sanity check.
 */
import { createServer } from 'node:http';
import type { IncomingHttpHeaders, Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import type { GatewayCall } from '../../gateway/call.ts';
import { GatewayError } from '../../gateway/errors.ts';
import type { CallResult, GatewayOptions } from '../../gateway/options.ts';
import { createGateway } from '../../gateway/server.ts';
import { createPrometheusMetrics } from '../../gateway/telemetry.ts';
import { createJsonLogger } from '../../placer/kernel/index.ts';
import { createConsistentHashPlacer } from '../../placer/consistent-hash/index.ts';
import { CALL_ID_HEADER, CALL_TYPE_HEADER, FUNCTION_HEADER, TIMEOUT_HEADER } from '../../runner/protocol.ts';
import { createRunner } from '../../runner/server.ts';
import { chatBody, metricValue, postJson } from '../support/fleet.ts';

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!().catch(() => {});
});

async function listen(server: Server): Promise<string> {
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  cleanups.push(() => new Promise((r) => server.close(r)));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

/** An OpenAI-ish engine that records the headers of every call it gets. */
async function recordingEngine(seen: IncomingHttpHeaders[]): Promise<string> {
  return listen(
    createServer((req, res) => {
      if (req.url === '/health') return res.end();
      if (req.url === '/v1/models') return res.end(JSON.stringify({ data: [{ id: 'sim-small' }] }));
      seen.push(req.headers);
      req.resume();
      req.on('end', () => {
        res.setHeader('content-type', 'application/json');
        res.end(JSON.stringify({ object: 'chat.completion', choices: [] }));
      });
    }),
  );
}

async function gatewayWith(runnerUrls: string[], options: Partial<GatewayOptions> = {}) {
  const gateway = createGateway({ runners: runnerUrls, ...options });
  const { url } = await gateway.listen();
  cleanups.push(() => gateway.close());
  return url;
}

async function realRunner(engine: string): Promise<string> {
  const runner = createRunner({ engine });
  const { url } = await runner.listen();
  cleanups.push(() => runner.close({ drainTimeout: 0 }));
  return url;
}

describe('call hooks', () => {
  it('runs the overrider and before-call listeners after buffering, and after-call listeners with the result', async () => {
    const seen: IncomingHttpHeaders[] = [];
    const runner = await realRunner(await recordingEngine(seen));
    const events: string[] = [];
    let before: GatewayCall | undefined;
    let after: { call: GatewayCall; result: CallResult } | undefined;
    const url = await gatewayWith([runner], {
      placer: createConsistentHashPlacer(),
      overrideCall: (call) => {
        events.push(`override:${call.body.length > 0}`);
        return { key: `tenant-${call.fn}`, timeout: 5000 };
      },
      listeners: [
        { beforeCall: (call) => void (events.push('before'), (before = call)) },
        { afterCall: (call, result) => void (events.push('after'), (after = { call, result })) },
      ],
    });
    const res = await postJson(`${url}/v1/chat/completions`, chatBody());
    expect(res.status).toBe(200);
    await expect.poll(() => events).toEqual(['override:true', 'before', 'after']);
    expect(before!.key).toBe('tenant-sim-small');
    expect(before!.timeout).toBe(5000);
    expect(after!.result).toMatchObject({ outcome: 'completed', status: 200, runner: new URL(runner).host });
    expect(after!.result.latencyMs).toBeGreaterThanOrEqual(0);
    expect(after!.call.startedAt).toBeGreaterThanOrEqual(after!.call.createdAt);
    // The overridden timeout travels as the budget the runner enforces, relative to its arrival.
    expect(seen[0]![TIMEOUT_HEADER]).toBe('5000');
  });

  it('answers with the status of a SluiceError a before-call listener throws, and 500 for any other error', async () => {
    const runner = await realRunner(await recordingEngine([]));
    let refuse: Error = new GatewayError('AUTH_DENIED', 403, 'invalid_request_error', 'tenant over quota');
    const url = await gatewayWith([runner], {
      listeners: [{ beforeCall: () => { throw refuse; } }],
    });
    const denied = await postJson(`${url}/v1/chat/completions`, chatBody());
    expect(denied.status).toBe(403);
    expect(denied.json.error).toEqual({ message: 'tenant over quota', type: 'invalid_request_error', code: 'AUTH_DENIED' });
    refuse = new TypeError('boom');
    const failed = await postJson(`${url}/v1/chat/completions`, chatBody());
    expect(failed.status).toBe(500);
    expect(failed.json.error.code).toBe('GW_LISTENER_FAILED');
  });

  it('keeps the client answer when an after-call listener throws', async () => {
    const runner = await realRunner(await recordingEngine([]));
    const url = await gatewayWith([runner], { listeners: [{ afterCall: () => { throw new Error('audit sink down'); } }] });
    expect((await postJson(`${url}/v1/chat/completions`, chatBody())).status).toBe(200);
    expect((await postJson(`${url}/v1/chat/completions`, chatBody())).status).toBe(200);
  });
});

describe('the wire', () => {
  it('sends the call id, type, function, budget and trace context through the runner to the engine', async () => {
    const seen: IncomingHttpHeaders[] = [];
    const runner = await realRunner(await recordingEngine(seen));
    const url = await gatewayWith([runner]);
    const traceparent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
    const res = await postJson(`${url}/v1/chat/completions`, chatBody(), {
      traceparent,
      authorization: 'Bearer t',
      'sluice-session': 'conversation-7',
      'idempotency-key': 'k-1',
    });
    expect(res.status).toBe(200);
    const headers = seen[0]!;
    expect(headers[CALL_ID_HEADER]).toBe(res.headers[CALL_ID_HEADER]);
    expect(headers[CALL_TYPE_HEADER]).toBe('sync');
    expect(headers[FUNCTION_HEADER]).toBe('sim-small');
    expect(headers[TIMEOUT_HEADER]).toBe('600000');
    expect(headers.traceparent).toContain('0af7651916cd43dd8448eb211c80319c');
    expect(headers.authorization).toBe('Bearer t');
    // Gateway-only headers steer placement and detached calls; they are not the engine's.
    expect(headers['sluice-session']).toBeUndefined();
    expect(headers['idempotency-key']).toBeUndefined();
  });
});

describe('latency sanity check', () => {
  it('logs and does not record a call whose reported execution time exceeds its total', async () => {
    // A runner that claims the call ran far longer than it could have.
    const fakeRunner = await listen(
      createServer((req, res) => {
        if (req.url === '/status') return res.end(JSON.stringify({ models: ['sim-small'] }));
        req.resume();
        req.on('end', () => {
          res.writeHead(200, { 'content-type': 'application/json', trailer: 'server-timing' });
          res.write('{"object":"chat.completion"}');
          res.addTrailers({ 'server-timing': 'exec;dur=999999' });
          res.end();
        });
      }),
    );
    const telemetry = createPrometheusMetrics();
    cleanups.push(() => telemetry.shutdown());
    const lines: string[] = [];
    const url = await gatewayWith([fakeRunner], {
      meterProvider: telemetry.meterProvider,
      logger: createJsonLogger({ level: 'warn', write: (line) => lines.push(line) }),
    });
    expect((await postJson(`${url}/v1/chat/completions`, chatBody())).status).toBe(200);
    const page = await telemetry.render();
    expect(metricValue(page, 'sluice_calls_completed_total')).toBe(1);
    expect(metricValue(page, 'sluice_call_latency_count')).toBe(0);
    expect(lines.some((l) => l.includes('runner reported more execution time than the call took'))).toBe(true);
  });
});
