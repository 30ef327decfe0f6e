/**
 * The runner's spans for one call, on the OpenTelemetry API alone (a no-op until the entry point
 * wires an SDK):
 *
 * ```
 * POST /v1/chat/completions (SERVER) child of the gateway's offer span through `traceparent`,
 *                                    named `{method} {http.route}` as HTTP server spans are
 * ├── sluice.runner.admission        a slot, the body, the acknowledgement, the stall checks
 * └── chat {model} (CLIENT)          the engine's answer to its last byte, named
 *                                    `{operation} {model}` as GenAI inference spans are
 *                                    (`sluice.engine.request` on other paths); its context goes
 *                                    to the engine as `traceparent`, so an engine that exports
 *                                    traces of its own (vLLM with OTLP) joins the trace
 * ```
 *
 * The engine span's `gen_ai.provider.name` is the engine's kind ({@link providerOf}): the
 * conventions' list names hosted providers and none of the engines a runner fronts, so the kind
 * is the custom value the conventions allow (`openai`, their own, for a plain OpenAI URL).
 *
 * When tracing is off (or the call is not sampled) {@link startRunnerTrace} returns undefined and
 * the call path does nothing more here; the gateway's `traceparent` then reaches the engine as a
 * forwarded header. Never recorded: header values, bodies, prompts. The engine's usage block
 * (model, tokens, finish reasons) is read from the answer when it has one.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, propagation, trace } from '@opentelemetry/api';
import type { Attributes, Context, Span } from '@opentelemetry/api';
import { SluiceError, cutShort, telemetryPath } from '../placer/kernel/index.ts';
import { CALL_ID_HEADER, FUNCTION_HEADER } from './protocol/index.ts';
import { VERSION } from './protocol/version.ts';

/** The instrumentation scope of the runner's spans. */
export const RUNNER_TRACER = 'sluice-runner';

const tracer = trace.getTracer(RUNNER_TRACER, VERSION);

/** `gen_ai.operation.name` of each OpenAI route the engine serves, as the GenAI conventions spell it. */
const OPERATIONS: Readonly<Record<string, string>> = {
  '/v1/chat/completions': 'chat',
  '/v1/responses': 'chat',
  '/v1/completions': 'text_completion',
  '/v1/embeddings': 'embeddings',
};

/** `http.route` of a call's path: an OpenAI route, `/invoke/{fn}`, or undefined for another path. */
function routeOf(path: string): string | undefined {
  if (OPERATIONS[path] !== undefined) return path;
  return path.startsWith('/invoke/') ? '/invoke/{fn}' : undefined;
}

/** `gen_ai.provider.name` of an engine kind: the kind, spelled as its project spells itself. */
export function providerOf(kind: string): string {
  if (kind === 'llamacpp') return 'llama.cpp';
  if (kind === 'sim') return 'sluice.sim';
  return kind;
}

/** Most bytes of a JSON answer kept to read its usage; a larger one is not read. */
const MAX_JSON_BYTES = 1 << 20;
/** Bytes kept of a stream's end, where its usage chunk and last finish reason are. */
const STREAM_TAIL_BYTES = 16 << 10;

/**
 * Starts the runner's server span for the call on `req`, its parent the gateway's offer; it ends
 * when `res` closes. Undefined when the span is not recording.
 */
export function startRunnerTrace(req: IncomingMessage, res: ServerResponse, runnerId: string): RunnerTrace | undefined {
  const parent = propagation.extract(ROOT_CONTEXT, req.headers);
  const method = req.method ?? 'POST';
  const path = telemetryPath(req.url ?? '/');
  const route = routeOf(path);
  const span = tracer.startSpan(route === undefined ? method : `${method} ${route}`, { kind: SpanKind.SERVER }, parent);
  if (!span.isRecording()) return undefined;
  const attributes: Attributes = {
    'http.request.method': method,
    'url.path': path,
    'sluice.runner.id': runnerId,
  };
  if (route !== undefined) attributes['http.route'] = route;
  const callId = first(req.headers[CALL_ID_HEADER]);
  const fn = first(req.headers[FUNCTION_HEADER]);
  if (callId !== undefined) attributes['sluice.call.id'] = callId;
  if (fn !== undefined) {
    attributes['sluice.fn'] = fn;
    if (path.startsWith('/v1/')) attributes['gen_ai.request.model'] = fn;
  }
  span.setAttributes(attributes);
  const operation = OPERATIONS[path];
  const inference = operation !== undefined && fn !== undefined ? { operation, model: fn } : undefined;
  const runnerTrace = new RunnerTrace(span, trace.setSpan(parent, span), inference);
  res.once('close', () => runnerTrace.end(res));
  return runnerTrace;
}

/** One recorded call's spans on a runner; see the file comment for the tree. */
export class RunnerTrace {
  readonly span: Span;
  readonly #context: Context;
  /** The call's GenAI operation and model; undefined for a call that is not inference. */
  readonly #inference: { readonly operation: string; readonly model: string } | undefined;
  readonly #admission: Span;
  #engine: Span | undefined;
  #sse = false;
  #kept: Buffer[] = [];
  #keptBytes = 0;

  constructor(span: Span, context: Context, inference?: { readonly operation: string; readonly model: string }) {
    this.span = span;
    this.#context = context;
    this.#inference = inference;
    this.#admission = tracer.startSpan('sluice.runner.admission', undefined, context);
  }

  /**
   * Ends admission and starts the engine request's CLIENT span toward `engine` (its origin and
   * kind); returns `headers` with its trace context in place of the gateway's.
   */
  engine(
    engine: { readonly origin: string; readonly kind: string },
    method: string,
    path: string,
    headers: Record<string, string | string[]>,
  ): Record<string, string | string[]> {
    this.#admission.end();
    const url = new URL(engine.origin);
    const attributes: Attributes = {
      'http.request.method': method,
      'url.path': telemetryPath(path),
      'server.address': url.hostname,
      'server.port': Number(url.port) || (url.protocol === 'https:' ? 443 : 80),
    };
    const inference = this.#inference;
    if (inference !== undefined) {
      attributes['gen_ai.operation.name'] = inference.operation;
      attributes['gen_ai.provider.name'] = providerOf(engine.kind);
      attributes['gen_ai.request.model'] = inference.model;
    }
    const name = inference === undefined ? 'sluice.engine.request' : `${inference.operation} ${inference.model}`;
    this.#engine = tracer.startSpan(name, { kind: SpanKind.CLIENT, attributes }, this.#context);
    const out: Record<string, string | string[]> = { ...headers };
    delete out.traceparent;
    delete out.tracestate;
    propagation.inject(trace.setSpan(this.#context, this.#engine), out);
    return out;
  }

  /** The engine's status line: a JSON or SSE answer's end is kept to read its usage. */
  engineAnswered(status: number, contentType: string | string[] | undefined): void {
    this.#engine?.setAttribute('http.response.status_code', status);
    const type = String(first(contentType) ?? '');
    this.#sse = type.startsWith('text/event-stream');
    if (!this.#sse && !type.startsWith('application/json')) this.#keptBytes = Number.POSITIVE_INFINITY;
  }

  /** A chunk of the engine's answer, kept (a bounded part) for its usage block. */
  chunk(data: Buffer): void {
    if (this.#keptBytes === Number.POSITIVE_INFINITY) return;
    this.#kept.push(data);
    this.#keptBytes += data.length;
    if (this.#sse) {
      // Only the tail matters: drop whole chunks from the front while the rest is enough.
      while (this.#kept.length > 1 && this.#keptBytes - this.#kept[0]!.length >= STREAM_TAIL_BYTES)
        this.#keptBytes -= this.#kept.shift()!.length;
    } else if (this.#keptBytes > MAX_JSON_BYTES) {
      this.#kept = [];
      this.#keptBytes = Number.POSITIVE_INFINITY;
    }
  }

  /** Ends the engine request: its answer read to the end, or failed with `error` (an Error, or a sluice code). */
  engineEnded(error?: Error | string): void {
    const span = this.#engine;
    if (!span) return;
    this.#engine = undefined;
    if (error !== undefined) fail(span, error);
    else if (this.#keptBytes !== Number.POSITIVE_INFINITY && this.#kept.length > 0) {
      const usage = genAiAttributes(Buffer.concat(this.#kept).toString('utf8'), this.#sse ? 'sse' : 'json');
      span.setAttributes(usage);
      this.span.setAttributes(usage);
    }
    this.#kept = [];
    span.end();
  }

  /** Marks the call failed with `error` (an Error, or the sluice code of a trailer). */
  fail(error: Error | string): void {
    fail(this.span, error);
  }

  /** Ends every span still open; the status is the one the gateway got. */
  end(res: ServerResponse): void {
    this.#admission.end();
    // Cut short by the gateway (its client left, or it gave up): ended, not failed.
    if (cutShort(res)) this.#kept = [];
    this.engineEnded();
    if (res.headersSent) this.span.setAttribute('http.response.status_code', res.statusCode);
    this.span.end();
  }
}

/** How an answer's body is written: one JSON object, or a stream of server-sent events. */
export type AnswerFormat = 'json' | 'sse';

/**
 * The GenAI attributes an OpenAI-shaped answer gives: the model that answered, the tokens in and
 * out from its usage block, and the finish reasons. A stream's are read from its last events.
 */
export function genAiAttributes(text: string, format: AnswerFormat): Attributes {
  const answers: unknown[] = [];
  if (format === 'sse') {
    for (const line of text.split(/\r?\n/)) {
      if (!line.startsWith('data:')) continue;
      const data = line.slice(5).trim();
      if (data === '[DONE]' || !data.startsWith('{')) continue;
      try {
        answers.push(JSON.parse(data));
      } catch {
        // The kept tail may begin mid-event: that one is not read.
      }
    }
  } else {
    try {
      answers.push(JSON.parse(text));
    } catch {
      return {};
    }
  }
  const attributes: Attributes = {};
  const reasons: string[] = [];
  for (const answer of answers) {
    if (typeof answer !== 'object' || answer === null) continue;
    // A Responses stream's last event carries the whole response, usage included.
    const { response } = answer as { response?: unknown };
    const whole = typeof response === 'object' && response !== null ? response : answer;
    const { model, usage, choices } = whole as {
      model?: unknown;
      usage?: Record<string, unknown> | null;
      choices?: unknown;
    };
    if (typeof model === 'string') attributes['gen_ai.response.model'] = model;
    // prompt_tokens and completion_tokens; input_tokens and output_tokens in the Responses API.
    const input = usage?.prompt_tokens ?? usage?.input_tokens;
    const output = usage?.completion_tokens ?? usage?.output_tokens;
    if (typeof input === 'number') attributes['gen_ai.usage.input_tokens'] = input;
    if (typeof output === 'number') attributes['gen_ai.usage.output_tokens'] = output;
    if (Array.isArray(choices)) {
      for (const choice of choices) {
        const reason = (choice as { finish_reason?: unknown } | null)?.finish_reason;
        if (typeof reason === 'string') reasons.push(reason);
      }
    }
  }
  if (reasons.length > 0) attributes['gen_ai.response.finish_reasons'] = reasons;
  return attributes;
}

/** Marks `span` failed: status ERROR, with the sluice code when there is one. */
function fail(span: Span, error: Error | string): void {
  const code = typeof error === 'string' ? error : error instanceof SluiceError ? error.code : undefined;
  span.setStatus({ code: SpanStatusCode.ERROR, message: code ?? (error as Error).name });
  if (code !== undefined) span.setAttribute('sluice.error.code', code);
}

function first(value: string | string[] | undefined | number): string | undefined {
  if (value === undefined) return undefined;
  return Array.isArray(value) ? value[0] : String(value);
}
