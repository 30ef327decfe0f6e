/**
 * gateway/observe/tracing.ts and runner/tracing.ts through an in-process gateway and real runners: the
 * span tree of a call, with an in-memory span exporter registered as the global tracer provider
 * (as an entry point's SDK would). One engine refuses every call (its runner answers busy), the
 * other answers with a usage block.
 */
import type { IncomingHttpHeaders } from 'node:http';
import { SpanKind, SpanStatusCode, propagation, trace } from '@opentelemetry/api';
import { core, tracing } from '@opentelemetry/sdk-node';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createGateway } from '../../../gateway/server.ts';
import type { GatewayOptions } from '../../../gateway/options.ts';
import { createRunner } from '../../../runner/server.ts';
import { chatBody, eventually, postJson } from '../../support/fleet.ts';
import { recordingEngine, serversForEach } from '../../support/servers.ts';
import type { EngineAnswer } from '../../support/servers.ts';

type Finished = tracing.ReadableSpan;

/** A chat call's HTTP server spans, the gateway's and the runner's, are named `{method} {http.route}`. */
const CALL = 'POST /v1/chat/completions';
/** Its GenAI inference spans, the gateway's offers and the runner's engine request, `{operation} {model}`. */
const INFERENCE = 'chat sim-small';
const onGateway = (span: Finished): boolean => span.instrumentationScope.name === 'sluice-gateway';
const onRunner = (span: Finished): boolean => span.instrumentationScope.name === 'sluice-runner';
/** The gateway's call span. */
const isCall = (span: Finished): boolean => span.name === CALL && onGateway(span);

const exporter = new tracing.InMemorySpanExporter();
const provider = new tracing.BasicTracerProvider({ spanProcessors: [new tracing.SimpleSpanProcessor(exporter)] });
beforeAll(() => {
  trace.setGlobalTracerProvider(provider);
  propagation.setGlobalPropagator(new core.W3CTraceContextPropagator());
});
afterAll(async () => {
  await provider.shutdown();
  trace.disable();
  propagation.disable();
});
beforeEach(() => exporter.reset());

const { cleanups, listen } = serversForEach();

const COMPLETION = {
  status: 200,
  body: {
    object: 'chat.completion',
    model: 'sim-small',
    choices: [{ index: 0, message: { role: 'assistant', content: 'hello' }, finish_reason: 'stop' }],
    usage: { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 },
  },
};
const LOADING = { status: 503, body: { error: { message: 'loading' } } };

/** An engine that answers every call `answer` (a completion with a usage block unless told), recording their headers. */
async function engine(seen: IncomingHttpHeaders[], answer: EngineAnswer = COMPLETION): Promise<string> {
  return listen(recordingEngine(seen, answer));
}

async function runner(engineUrl: string, id: string): Promise<string> {
  const r = createRunner({ engine: engineUrl, id });
  const { url } = await r.listen();
  cleanups.push(() => r.close({ drainTimeout: 0 }));
  return url;
}

async function gateway(runners: string[], options: Partial<GatewayOptions> = {}): Promise<string> {
  const gw = createGateway({ runners, ...options });
  const { url } = await gw.listen();
  cleanups.push(() => gw.close());
  return url;
}

/** The finished spans of one trace, by name; a span's parent by id. */
function treeOf(traceId: string): {
  spans: Finished[];
  named: (name: string) => Finished[];
  parentOf: (span: Finished) => Finished | undefined;
} {
  const spans = exporter.getFinishedSpans().filter((s) => s.spanContext().traceId === traceId);
  return {
    spans,
    named: (name) => spans.filter((s) => s.name === name),
    parentOf: (span) => spans.find((s) => s.spanContext().spanId === span.parentSpanContext?.spanId),
  };
}

describe('call tracing', () => {
  it('records the call, body, placement with one event per offer, one relay span per offer, and the runner and engine spans under them', async () => {
    const refused: IncomingHttpHeaders[] = [];
    const answered: IncomingHttpHeaders[] = [];
    const busy = await runner(await engine(refused, LOADING), 'busy-runner');
    const good = await runner(await engine(answered), 'good-runner');
    const gw = await gateway([busy, good]);
    // The gateway names a runner it was given by its address with the id the runner gives itself.
    const busyId = 'busy-runner';
    const goodId = 'good-runner';

    // Round-robin starts each call at the next runner: of two calls, one is offered the busy
    // runner first.
    for (let i = 0; i < 2; i++) expect((await postJson(`${gw}/v1/chat/completions`, chatBody())).status).toBe(200);
    const calls = exporter.getFinishedSpans().filter(isCall);
    expect(calls).toHaveLength(2);
    const call = calls.find((c) => treeOf(c.spanContext().traceId).named(INFERENCE).filter(onGateway).length === 2)!;
    expect(call).toBeDefined();
    const { spans, named, parentOf } = treeOf(call.spanContext().traceId);

    expect(call.kind).toBe(SpanKind.SERVER);
    expect(call.parentSpanContext).toBeUndefined();
    expect(call.attributes).toMatchObject({
      'http.request.method': 'POST',
      'http.route': '/v1/chat/completions',
      'url.path': '/v1/chat/completions',
      'http.response.status_code': 200,
      'gen_ai.operation.name': 'chat',
      'gen_ai.provider.name': 'sluice',
      'gen_ai.request.model': 'sim-small',
      'gen_ai.usage.input_tokens': 7,
      'gen_ai.usage.output_tokens': 3,
      'sluice.runner.id': goodId,
      'sluice.placer': 'round-robin',
    });
    expect(call.attributes['sluice.call.id']).toMatch(/^[0-9a-f-]{36}$/);

    const [body] = named('sluice.body');
    expect(parentOf(body!)).toBe(call);
    expect(body!.attributes['http.request.body.size']).toBe(chatBody().length);
    // Every runner answered at once: the call never waited in the queue.
    expect(named('sluice.queue')).toEqual([]);

    const [placement] = named('sluice.placement');
    expect(parentOf(placement!)).toBe(call);
    expect(placement!.events.map((e) => [e.name, e.attributes])).toEqual([
      ['sluice.offer', { 'sluice.runner.id': busyId, 'sluice.offer.answer': 'busy' }],
      ['sluice.offer', { 'sluice.runner.id': goodId, 'sluice.offer.answer': 'committed' }],
    ]);
    expect(placement!.attributes['sluice.placement.attempts']).toBe(2);

    const relays = named(INFERENCE).filter(onGateway);
    for (const relay of relays) {
      expect(relay.kind).toBe(SpanKind.CLIENT);
      expect(parentOf(relay)).toBe(call);
      expect(relay.attributes).toMatchObject({
        'server.address': '127.0.0.1',
        'gen_ai.operation.name': 'chat',
        'gen_ai.provider.name': 'sluice',
        'gen_ai.request.model': 'sim-small',
      });
    }
    const turnedDown = relays.find((r) => r.attributes['sluice.runner.id'] === busyId)!;
    const relay = relays.find((r) => r.attributes['sluice.runner.id'] === goodId)!;
    expect(turnedDown.attributes).toMatchObject({ 'sluice.offer.answer': 'busy', 'http.response.status_code': 503 });
    expect(relay.attributes).toMatchObject({
      'http.response.status_code': 200,
      'gen_ai.usage.input_tokens': 7,
      'gen_ai.usage.output_tokens': 3,
    });
    // The committed offer lasts until the answer was relayed, past the placement's end (within
    // the millisecond by which the SDK's per-span anchoring to Date.now may differ).
    expect(toMs(relay.endTime)).toBeGreaterThanOrEqual(toMs(placement!.endTime) - 1);

    // The runners' server spans are children of the offers that reached them.
    const served = named(CALL).filter(onRunner);
    expect(served).toHaveLength(2);
    for (const span of served) expect(span.kind).toBe(SpanKind.SERVER);
    const busySide = served.find((s) => s.attributes['sluice.runner.id'] === 'busy-runner')!;
    const runnerSpan = served.find((s) => s.attributes['sluice.runner.id'] === 'good-runner')!;
    expect(parentOf(busySide)).toBe(turnedDown);
    expect(busySide.attributes).toMatchObject({
      'sluice.runner.busy': 'engine-busy',
      'http.response.status_code': 503,
    });
    expect(parentOf(runnerSpan)).toBe(relay);
    expect(runnerSpan.attributes).toMatchObject({
      'sluice.call.id': call.attributes['sluice.call.id'],
      'http.route': '/v1/chat/completions',
      'http.response.status_code': 200,
      'gen_ai.request.model': 'sim-small',
      'gen_ai.usage.input_tokens': 7,
      'gen_ai.usage.output_tokens': 3,
      'gen_ai.response.finish_reasons': ['stop'],
    });

    const admission = named('sluice.runner.admission').find((s) => parentOf(s) === runnerSpan);
    expect(admission).toBeDefined();
    const engineSpan = named(INFERENCE)
      .filter(onRunner)
      .find((s) => parentOf(s) === runnerSpan)!;
    expect(engineSpan.kind).toBe(SpanKind.CLIENT);
    // A runner given a plain OpenAI-compatible URL: the kind `openai` names the provider.
    expect(engineSpan.attributes).toMatchObject({
      'http.request.method': 'POST',
      'http.response.status_code': 200,
      'gen_ai.operation.name': 'chat',
      'gen_ai.provider.name': 'openai',
      'gen_ai.request.model': 'sim-small',
      'gen_ai.usage.output_tokens': 3,
    });

    // The engine got the engine request's context: its own spans would join this trace.
    const traceId = call.spanContext().traceId;
    const engineSaw = answered.find((h) => String(h.traceparent).includes(traceId));
    expect(engineSaw?.traceparent).toBe(`00-${traceId}-${engineSpan.spanContext().spanId}-01`);

    // Nothing that could be a secret: no header values, no prompt.
    for (const span of spans) {
      for (const value of Object.values(span.attributes)) expect(String(value)).not.toContain('hello there');
      expect(Object.keys(span.attributes).some((k) => k.startsWith('http.request.header'))).toBe(false);
    }
  });

  it("continues the client's trace when it sent a traceparent", async () => {
    const good = await runner(await engine([]), 'good-runner');
    const gw = await gateway([good]);
    const traceId = '0af7651916cd43dd8448eb211c80319c';
    const parent = 'b7ad6b7169203331';
    const answer = await postJson(`${gw}/v1/chat/completions`, chatBody(), {
      traceparent: `00-${traceId}-${parent}-01`,
    });
    expect(answer.status).toBe(200);
    const { named } = treeOf(traceId);
    expect(named(CALL).filter(onGateway)[0]?.parentSpanContext?.spanId).toBe(parent);
    expect(named(CALL).filter(onRunner)).toHaveLength(1);
  });

  it('records nothing of a call its sampler dropped, and tells the runner so in traceparent', async () => {
    const seen: IncomingHttpHeaders[] = [];
    const good = await runner(await engine(seen), 'good-runner');
    const gw = await gateway([good]);
    // A client's unsampled context: the SDK's default sampler follows its parent.
    const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
    const answer = await postJson(`${gw}/v1/chat/completions`, chatBody(), {
      traceparent: `00-${traceId}-00f067aa0ba902b7-00`,
    });
    expect(answer.status).toBe(200);
    expect(exporter.getFinishedSpans()).toEqual([]);
    // The gateway's own (unrecorded) span is the parent the runner and engine hear of, still unsampled.
    expect(seen[0]?.traceparent).toMatch(new RegExp(`^00-${traceId}-[0-9a-f]{16}-00$`));
    expect(seen[0]?.traceparent).not.toContain('00f067aa0ba902b7');
  });

  it("keeps a detached call's span and its relay open until the run ends, the runner's span under the relay", async () => {
    const gw = await gateway([await runner(await engine([]), 'good-runner')]);
    const answer = await postJson(`${gw}/v1/chat/completions`, chatBody(), { prefer: 'respond-async' });
    expect(answer.status).toBe(202);
    const callId = String(answer.headers['sluice-call-id']);
    await eventually(() =>
      exporter.getFinishedSpans().some((s) => isCall(s) && s.attributes['sluice.call.id'] === callId),
    );
    const call = exporter.getFinishedSpans().find((s) => isCall(s))!;
    const { named, parentOf } = treeOf(call.spanContext().traceId);
    const [relay] = named(INFERENCE).filter(onGateway);
    expect(parentOf(relay!)).toBe(call);
    expect(relay!.attributes['http.response.status_code']).toBe(200);
    expect(relay!.status.code).not.toBe(SpanStatusCode.ERROR);
    const [served] = named(CALL).filter(onRunner);
    expect(parentOf(served!)).toBe(relay);
    expect(served!.attributes['gen_ai.usage.output_tokens']).toBe(3);
  });

  it('records the queue wait and marks the call and placement failed with the sluice code when no runner takes it', async () => {
    const busy = await runner(await engine([], LOADING), 'busy-runner');
    const gw = await gateway([busy], { placerTimeout: 300 });
    const answer = await postJson(`${gw}/v1/chat/completions`, chatBody());
    expect(answer.status).toBe(503);
    const call = exporter.getFinishedSpans().find((s) => isCall(s))!;
    const { named, parentOf } = treeOf(call.spanContext().traceId);
    const code = answer.json.error.code as string;
    expect(call.status.code).toBe(SpanStatusCode.ERROR);
    expect(call.attributes).toMatchObject({ 'sluice.error.code': code, 'http.response.status_code': 503 });
    const [placement] = named('sluice.placement');
    expect(placement!.status.code).toBe(SpanStatusCode.ERROR);
    expect(placement!.attributes['sluice.error.code']).toBe(code);
    expect(placement!.events.length).toBeGreaterThanOrEqual(1);
    // Busy at every pass; an offer the deadline cut short is an error.
    const answers = placement!.events.map((e) => e.attributes?.['sluice.offer.answer']);
    expect(answers).toContain('busy');
    expect(answers.filter((a) => a !== 'busy' && a !== 'error')).toEqual([]);
    expect(placement!.events.every((e) => e.attributes?.['sluice.runner.id'] === 'busy-runner')).toBe(true);
    const [queue] = named('sluice.queue');
    expect(parentOf(queue!)).toBe(call);
    expect(queue!.attributes['sluice.priority']).toBeDefined();
  });

  it('marks a refused call failed with its code', async () => {
    const gw = await gateway([await runner(await engine([]), 'good-runner')]);
    const answer = await postJson(`${gw}/v1/chat/completions`, chatBody({ model: 'no-such-model' }));
    expect(answer.status).toBe(404);
    const call = exporter.getFinishedSpans().find((s) => isCall(s))!;
    expect(call.status.code).toBe(SpanStatusCode.ERROR);
    expect(call.attributes).toMatchObject({
      'sluice.error.code': answer.json.error.code as string,
      'http.response.status_code': 404,
    });
    expect(exporter.getFinishedSpans().filter((s) => s.name === 'sluice.placement')).toEqual([]);
  });
});

function toMs([s, ns]: [number, number]): number {
  return s * 1000 + ns / 1e6;
}
