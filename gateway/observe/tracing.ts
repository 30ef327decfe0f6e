/**
 * The gateway's spans for one call, on the OpenTelemetry API alone (a no-op until an entry point
 * wires an SDK, gateway/cli/telemetry.ts):
 *
 * ```
 * POST /v1/chat/completions (SERVER)  the client's request, from its arrival to the answer's end,
 *                                     named `{method} {http.route}` as HTTP server spans are
 * ├── sluice.body                     buffering the request body
 * ├── sluice.queue                    waiting in the queue, only when the call waited
 * ├── sluice.placement                the walk; one `sluice.offer` event per runner offered
 * └── chat {model} (CLIENT)           one per offer sent to a runner, named `{operation} {model}`
 *                                     as GenAI inference spans are (`sluice.relay` on /invoke);
 *                                     the committed one lasts until the answer is relayed. Its
 *                                     context goes to the runner as `traceparent`, so the
 *                                     runner's span is its child.
 * ```
 *
 * The GenAI attributes follow OpenTelemetry's semantic conventions: `gen_ai.operation.name`
 * (`chat` for chat and Responses calls, `text_completion`, `embeddings`), `gen_ai.provider.name`
 * ({@link GATEWAY_PROVIDER}: the gateway calls a sluice fleet; the runner names the engine kind
 * behind it on its own spans), `gen_ai.request.model`, and the usage tokens the answer reported.
 *
 * When tracing is off (or the call is not sampled) {@link startCallTrace} returns undefined and
 * the call path skips every other step here: no attribute object, event or span is built. The
 * client's own `traceparent`, if any, then reaches the runner as any forwarded header does.
 *
 * Nothing recorded here may be a secret: no header values, no body, no prompt; only the method,
 * the routed path without its query (never the raw target, see gateway/http/front.ts; never the query,
 * see telemetryPath), ids, the model, sizes and codes.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, isSpanContextValid, propagation, trace } from '@opentelemetry/api';
import type { Attributes, Context, Span } from '@opentelemetry/api';
import { SluiceError, telemetryPath } from '../../placer/kernel/index.ts';
import { VERSION } from '../../runner/protocol/version.ts';
import type { CallRoute } from '../http/index.ts';

/** The instrumentation scope of the gateway's spans. */
export const GATEWAY_TRACER = 'sluice-gateway';

/**
 * The gateway's `gen_ai.provider.name`: what it calls is a sluice fleet, whichever engines run
 * behind it (the runner's spans name the engine kind); not a value of the conventions' list,
 * which names hosted providers, so a custom one as the conventions allow.
 */
export const GATEWAY_PROVIDER = 'sluice';

/** `gen_ai.operation.name` of each call route, as the GenAI conventions spell it; /invoke is not inference. */
export const GEN_AI_OPERATIONS: Readonly<Record<CallRoute, string | undefined>> = {
  chat: 'chat',
  responses: 'chat',
  completions: 'text_completion',
  embeddings: 'embeddings',
  invoke: undefined,
};

/** The usage tokens an answer reported, for the spans. */
export interface SpanUsage {
  readonly input?: number;
  readonly output?: number;
}

/** What a runner offered the call answered, as a `sluice.offer` event's `sluice.offer.answer`. */
export type OfferAnswer = 'busy' | 'error' | 'committed';

const tracer = trace.getTracer(GATEWAY_TRACER, VERSION);

/** Traces by the client's response (for refusals) and by the call (for the runner's client). */
const byResponse = new WeakMap<ServerResponse, CallTrace>();
const byCall = new WeakMap<object, CallTrace>();

/**
 * Starts the call's server span, its parent the client's `traceparent` when it sent one.
 * Undefined when the span is not recording: tracing is off, or the call was not sampled.
 */
export function startCallTrace(
  incoming: IncomingMessage,
  out: ServerResponse,
  path: string,
  route: CallRoute,
): CallTrace | undefined {
  const parent = propagation.extract(ROOT_CONTEXT, incoming.headers);
  const method = incoming.method ?? 'POST';
  // The route the front matched, never the path a client filled in: a span name keeps few values.
  const httpRoute = route === 'invoke' ? '/invoke/{fn}' : telemetryPath(path);
  const span = tracer.startSpan(`${method} ${httpRoute}`, { kind: SpanKind.SERVER }, parent);
  if (!span.isRecording()) {
    // A sampler said no (the no-op API's span has no context of its own): the decision travels
    // on in the forwarded headers, so a runner's parent-based sampler does not start a trace of
    // its own for this call.
    const own = span.spanContext();
    if (isSpanContextValid(own) && own.spanId !== trace.getSpanContext(parent)?.spanId)
      propagation.inject(trace.setSpan(parent, span), incoming.headers);
    return undefined;
  }
  const operation = GEN_AI_OPERATIONS[route];
  span.setAttributes({
    'http.request.method': method,
    'http.route': httpRoute,
    // The client's query never: it may carry a key (`?api-key=...`).
    'url.path': telemetryPath(path),
    'url.scheme': (incoming.socket as { encrypted?: boolean } | undefined)?.encrypted ? 'https' : 'http',
    ...(operation === undefined
      ? {}
      : { 'gen_ai.operation.name': operation, 'gen_ai.provider.name': GATEWAY_PROVIDER }),
  });
  const callTrace = new CallTrace(span, trace.setSpan(parent, span), operation);
  byResponse.set(out, callTrace);
  return callTrace;
}

/** The trace of the call answered on `out`, when it is recorded. */
export function traceOfResponse(out: ServerResponse): CallTrace | undefined {
  return byResponse.get(out);
}

/** The trace of `call` (once {@link CallTrace.bind} named it), when it is recorded. */
export function traceOfCall(call: object): CallTrace | undefined {
  return byCall.get(call);
}

/** Marks `span` failed with `error`: status ERROR, and the sluice code when it has one. */
export function failSpan(span: Span, error: Error): void {
  span.setStatus({ code: SpanStatusCode.ERROR, message: error instanceof SluiceError ? error.code : error.name });
  if (error instanceof SluiceError) span.setAttribute('sluice.error.code', error.code);
}

/** One recorded call's spans; see the file comment for the tree. */
export class CallTrace {
  readonly span: Span;
  readonly #context: Context;
  /** The call's `gen_ai.operation.name`; undefined on /invoke. */
  readonly #operation: string | undefined;
  /** The body's model, once {@link bind} read it, on inference routes. */
  #model: string | undefined;
  #queue: Span | undefined;
  #placement: Span | undefined;
  #relay: Span | undefined;
  #ended = false;

  constructor(span: Span, context: Context, operation?: string) {
    this.span = span;
    this.#context = context;
    this.#operation = operation;
  }

  /** Names the call once it is parsed, and lets the runner's client find this trace. */
  bind(call: { readonly id: string; readonly fn: string; readonly route: string }): void {
    byCall.set(call, this);
    const attributes: Attributes = { 'sluice.call.id': call.id, 'sluice.fn': call.fn };
    if (call.route !== 'invoke') {
      attributes['gen_ai.request.model'] = call.fn;
      this.#model = call.fn;
    }
    this.span.setAttributes(attributes);
  }

  /** Times the body's buffering in a `sluice.body` span; resolves or rejects as `reading` does. */
  async body(reading: Promise<Buffer>): Promise<Buffer> {
    const span = tracer.startSpan('sluice.body', undefined, this.#context);
    try {
      const body = await reading;
      span.setAttribute('http.request.body.size', body.length);
      return body;
    } catch (error) {
      failSpan(span, error as Error);
      throw error;
    } finally {
      span.end();
    }
  }

  /** Opens the `sluice.placement` span; {@link placed} or {@link unplaced} ends it. */
  placing(): void {
    this.#placement = tracer.startSpan('sluice.placement', undefined, this.#context);
  }

  /** Records a runner's answer to the call's offer as a `sluice.offer` event on the placement span. */
  offered(runner: string, answer: OfferAnswer, error?: Error): void {
    const attributes: Attributes = { 'sluice.runner.id': runner, 'sluice.offer.answer': answer };
    if (error instanceof SluiceError) attributes['sluice.error.code'] = error.code;
    this.#placement?.addEvent('sluice.offer', attributes);
  }

  /** The call joined the queue: opens `sluice.queue` at its first wait. */
  queued(priority: string): void {
    this.#queue ??= tracer.startSpan('sluice.queue', { attributes: { 'sluice.priority': priority } }, this.#context);
  }

  /** Ends the placement (and the queue wait, if any): `runner` committed, or none did (`error`). */
  placementEnded(outcome: { runner: string; attempts: number } | { error: Error; attempts: number }): void {
    this.#queue?.end();
    const span = this.#placement;
    if (!span) return;
    span.setAttribute('sluice.placement.attempts', outcome.attempts);
    if ('runner' in outcome) {
      this.offered(outcome.runner, 'committed');
      this.span.setAttribute('sluice.runner.id', outcome.runner);
    } else failSpan(span, outcome.error);
    span.end();
  }

  /** Sets the placer's name on the call span. */
  placer(name: string): void {
    this.span.setAttribute('sluice.placer', name);
  }

  /**
   * Starts the CLIENT span of one offer to a runner at `url`, and returns it with the headers that
   * carry its context to the runner. On an inference route it is a GenAI inference span,
   * `{operation} {model}`; the runner is named by its id, its URL by `server.address` and `server.port`.
   */
  offer(runner: string, url: URL, method: string): { span: Span; headers: Record<string, string> } {
    const operation = this.#operation;
    const model = this.#model;
    const attributes: Attributes = {
      'http.request.method': method,
      'server.address': url.hostname,
      'server.port': Number(url.port) || (url.protocol === 'https:' ? 443 : 80),
      'sluice.runner.id': runner,
    };
    let name = 'sluice.relay';
    if (operation !== undefined && model !== undefined) {
      name = `${operation} ${model}`;
      attributes['gen_ai.operation.name'] = operation;
      attributes['gen_ai.provider.name'] = GATEWAY_PROVIDER;
      attributes['gen_ai.request.model'] = model;
    }
    const span = tracer.startSpan(name, { kind: SpanKind.CLIENT, attributes }, this.#context);
    const headers: Record<string, string> = {};
    propagation.inject(trace.setSpan(this.#context, span), headers);
    return { span, headers };
  }

  /** The committed offer's span: it lasts until the answer is relayed ({@link relayEnded}). */
  committed(span: Span): void {
    this.#relay = span;
  }

  /**
   * Ends the committed offer's span with the status the client got, the error if any, and the
   * usage tokens the answer reported (on the call's span too).
   */
  relayEnded(status: number, error?: Error, usage?: SpanUsage): void {
    const span = this.#relay;
    if (!span) return;
    this.#relay = undefined;
    if (status > 0) span.setAttribute('http.response.status_code', status);
    if (usage !== undefined) {
      const tokens: Attributes = {};
      if (usage.input !== undefined) tokens['gen_ai.usage.input_tokens'] = usage.input;
      if (usage.output !== undefined) tokens['gen_ai.usage.output_tokens'] = usage.output;
      span.setAttributes(tokens);
      this.span.setAttributes(tokens);
    }
    if (error) failSpan(span, error);
    span.end();
  }

  /** Marks the call failed with `error` (refused, unplaced, or failed in the relay). */
  fail(error: Error): void {
    failSpan(this.span, error);
  }

  /** Ends the call span (once; later calls do nothing) with the status the client got. */
  end(out: ServerResponse): void {
    if (this.#ended) return;
    this.#ended = true;
    this.relayEnded(0);
    if (out.headersSent) this.span.setAttribute('http.response.status_code', out.statusCode);
    this.span.end();
  }
}
