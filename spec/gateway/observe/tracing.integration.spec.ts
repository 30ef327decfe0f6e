/**
 * Traces across processes: a gateway and a runner started as `sluice` commands with the standard
 * OTEL_* variables, exporting OTLP over HTTP (JSON) to a small receiver on 127.0.0.1, and a
 * simulated engine whose call log records the `traceparent` it got. One streamed call makes one
 * trace: the runner's server span is the child of the gateway's relay span, and the engine saw
 * the runner's engine request as its parent.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startService } from '../../../placer/kernel/processes.ts';
import type { ChildService } from '../../../placer/kernel/processes.ts';
import { chatBody, eventually, operatorEnv } from '../../support/fleet.ts';

/** A span as the receiver keeps it: ids in hex, and the service that sent it. */
interface ReceivedSpan {
  service: string;
  name: string;
  kind: number;
  traceId: string;
  spanId: string;
  parentSpanId: string;
  attributes: Record<string, unknown>;
}

const received: ReceivedSpan[] = [];
let receiver: Server;
let endpoint: string;
const started: ChildService[] = [];
let dir: string;
let gw: string;

/** OTLP/JSON ids are hex; a base64 one (the protobuf JSON mapping) is turned to hex as well. */
function hex(id: unknown): string {
  if (typeof id !== 'string' || id === '') return '';
  return /^[0-9a-f]+$/i.test(id) && (id.length === 32 || id.length === 16) ? id.toLowerCase() : Buffer.from(id, 'base64').toString('hex');
}

function value(v: Record<string, unknown>): unknown {
  return v.stringValue ?? v.intValue ?? v.doubleValue ?? v.boolValue ?? v.arrayValue;
}

/** Keeps every span of an OTLP/JSON export request. */
function keep(body: any): void {
  for (const rs of body.resourceSpans ?? []) {
    const service = String(value(rs.resource?.attributes?.find((a: any) => a.key === 'service.name')?.value ?? {}));
    for (const ss of rs.scopeSpans ?? []) {
      for (const s of ss.spans ?? []) {
        received.push({
          service,
          name: s.name,
          kind: s.kind,
          traceId: hex(s.traceId),
          spanId: hex(s.spanId),
          parentSpanId: hex(s.parentSpanId),
          attributes: Object.fromEntries((s.attributes ?? []).map((a: any) => [a.key, value(a.value)])),
        });
      }
    }
  }
}

beforeAll(async () => {
  receiver = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (req.method === 'POST' && req.url === '/v1/traces' && String(req.headers['content-type']).includes('json')) {
        keep(JSON.parse(Buffer.concat(chunks).toString('utf8')));
        res.writeHead(200, { 'content-type': 'application/json' });
        return res.end('{}');
      }
      res.writeHead(415);
      res.end();
    });
  });
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
  endpoint = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`;
  dir = mkdtempSync(join(tmpdir(), 'sluice-traces-'));
  const otel = {
    OTEL_EXPORTER_OTLP_ENDPOINT: endpoint,
    OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json',
    // Spans leave within a tenth of a second instead of the default five.
    OTEL_BSP_SCHEDULE_DELAY: '100',
  };
  const quiet = ['--log-level', 'warn'];
  const engine = await startService(['sim-engine', '--port', '0', '--call-log', join(dir, 'calls.log'), ...quiet]);
  started.push(engine);
  const runner = await startService(['runner', '--port', '0', '--engine', engine.url, '--engine-kind', 'sim', '--id', 'runner-1', ...quiet], { env: { ...process.env, ...otel } });
  started.push(runner);
  const gateway = await startService(['gateway', '--port', '0', '--runner-networks', '127.0.0.0/8', '--runners', runner.url, ...quiet], { env: operatorEnv({ ...process.env, ...otel }) });
  started.push(gateway);
  gw = gateway.url;
});

afterAll(async () => {
  await Promise.all(started.map((s) => s.stop('SIGTERM', 5000)));
  await new Promise((r) => receiver?.close(r));
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('traces exported over OTLP/HTTP', () => {
  it('receives one trace spanning gateway and runner for a streamed call, with the parent links right', async () => {
    const res = await request(`${gw}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: chatBody({ stream: true, stream_options: { include_usage: true } }),
    });
    expect(res.statusCode).toBe(200);
    const text = await res.body.text();
    expect(text).toContain('data: [DONE]');
    const callId = String(res.headers['sluice-call-id']);

    let call: ReceivedSpan | undefined;
    let served: ReceivedSpan | undefined;
    await eventually(() => {
      call = received.find((s) => s.name === 'sluice.call' && s.attributes['sluice.call.id'] === callId);
      served = received.find((s) => s.name === 'sluice.runner.call' && s.attributes['sluice.call.id'] === callId);
      return call !== undefined && served !== undefined && received.some((s) => s.name === 'sluice.engine.request' && s.parentSpanId === served!.spanId);
    }, 15_000, 'the gateway\'s and the runner\'s spans at the receiver');

    expect(call!.service).toBe('sluice-gateway');
    expect(served!.service).toBe('sluice-runner');
    const traceId = call!.traceId;
    expect(traceId).toMatch(/^[0-9a-f]{32}$/);
    const trace = received.filter((s) => s.traceId === traceId);
    const relay = trace.find((s) => s.name === 'sluice.relay' && s.parentSpanId === call!.spanId);
    expect(relay).toBeDefined();
    // The runner's server span is a child of the gateway's relay span: one trace across processes.
    expect(served!.traceId).toBe(traceId);
    expect(served!.parentSpanId).toBe(relay!.spanId);
    const engineRequest = trace.find((s) => s.name === 'sluice.engine.request' && s.parentSpanId === served!.spanId)!;
    // The stream's usage chunk is read for its tokens.
    expect(engineRequest.attributes['gen_ai.usage.output_tokens']).toEqual(expect.anything());
    expect(trace.map((s) => s.name)).toEqual(expect.arrayContaining(['sluice.body', 'sluice.placement', 'sluice.runner.admission']));

    // The engine got a traceparent of the same trace, naming the engine request as its parent.
    const log = readFileSync(join(dir, 'calls.log'), 'utf8');
    const line = log.split('\n').find((l) => l.startsWith(`${callId} trace `));
    expect(line).toBe(`${callId} trace 00-${traceId}-${engineRequest.spanId}-01`);
  });
});
