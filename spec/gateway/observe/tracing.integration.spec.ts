/**
 * Traces across processes: a gateway and a runner started as `sluice` commands with the standard
 * OTEL_* variables, exporting OTLP over HTTP (JSON) to a small receiver on 127.0.0.1, and a
 * simulated engine whose call log records the `traceparent` it got. One streamed call makes one
 * trace: the runner's server span is the child of the gateway's relay span, and the engine saw
 * the runner's engine request as its parent.
 */
import { readFileSync } from 'node:fs';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chatBody, eventually } from '../../support/fleet.ts';
import { startTracedFleet } from '../../support/traced-fleet.ts';
import type { TracedFleet } from '../../support/traced-fleet.ts';

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

let traced: TracedFleet;

/** OTLP/JSON ids are hex; a base64 one (the protobuf JSON mapping) is turned to hex as well. */
function hex(id: unknown): string {
  if (typeof id !== 'string' || id === '') return '';
  return /^[0-9a-f]+$/i.test(id) && (id.length === 32 || id.length === 16)
    ? id.toLowerCase()
    : Buffer.from(id, 'base64').toString('hex');
}

function value(v: Record<string, unknown>): unknown {
  return v.stringValue ?? v.intValue ?? v.doubleValue ?? v.boolValue ?? v.arrayValue;
}

/** Every span of an OTLP/JSON export request. */
function spansOf(body: any): ReceivedSpan[] {
  const spans: ReceivedSpan[] = [];
  for (const rs of body.resourceSpans ?? []) {
    const service = String(value(rs.resource?.attributes?.find((a: any) => a.key === 'service.name')?.value ?? {}));
    for (const ss of rs.scopeSpans ?? []) {
      for (const s of ss.spans ?? []) {
        spans.push({
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
  return spans;
}

/** Every span the receiver got so far. */
const received = (): ReceivedSpan[] => traced.exports.flatMap((body) => spansOf(JSON.parse(body)));

beforeAll(async () => {
  traced = await startTracedFleet();
});

afterAll(async () => {
  await traced?.stop();
});

/** The chat call's HTTP server spans, the gateway's and the runner's. */
const CALL = 'POST /v1/chat/completions';
/** Its GenAI inference spans, the gateway's offer and the runner's engine request. */
const INFERENCE = 'chat sim-small';

describe('traces exported over OTLP/HTTP', () => {
  it('receives one trace spanning gateway and runner for a streamed call, with the parent links right', async () => {
    const res = await request(`${traced.gw}/v1/chat/completions`, {
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
    await eventually(
      () => {
        const spans = received();
        // Both server spans are `POST /v1/chat/completions`; the service tells them apart.
        const calls = spans.filter((s) => s.name === CALL && s.attributes['sluice.call.id'] === callId);
        call = calls.find((s) => s.service === 'sluice-gateway');
        served = calls.find((s) => s.service === 'sluice-runner');
        return (
          call !== undefined &&
          served !== undefined &&
          spans.some((s) => s.name === INFERENCE && s.parentSpanId === served!.spanId)
        );
      },
      15_000,
      "the gateway's and the runner's spans at the receiver",
    );

    expect(call!.service).toBe('sluice-gateway');
    expect(served!.service).toBe('sluice-runner');
    const traceId = call!.traceId;
    expect(traceId).toMatch(/^[0-9a-f]{32}$/);
    const trace = received().filter((s) => s.traceId === traceId);
    const relay = trace.find((s) => s.name === INFERENCE && s.parentSpanId === call!.spanId);
    expect(relay).toBeDefined();
    // The runner's server span is a child of the gateway's relay span: one trace across processes.
    expect(served!.traceId).toBe(traceId);
    expect(served!.parentSpanId).toBe(relay!.spanId);
    const engineRequest = trace.find((s) => s.name === INFERENCE && s.parentSpanId === served!.spanId)!;
    // The simulated engine's kind names the provider of the runner's inference span.
    expect(engineRequest.attributes['gen_ai.provider.name']).toBe('sluice.sim');
    // The stream's usage chunk is read for its tokens.
    expect(engineRequest.attributes['gen_ai.usage.output_tokens']).toEqual(expect.anything());
    expect(trace.map((s) => s.name)).toEqual(
      expect.arrayContaining(['sluice.body', 'sluice.placement', 'sluice.runner.admission']),
    );

    // The engine got a traceparent of the same trace, naming the engine request as its parent.
    const log = readFileSync(traced.callLog, 'utf8');
    const line = log.split('\n').find((l) => l.startsWith(`${callId} trace `));
    expect(line).toBe(`${callId} trace 00-${traceId}-${engineRequest.spanId}-01`);
  });
});
