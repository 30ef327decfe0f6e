/**
 * The runner's spans for one call, on the OpenTelemetry API alone (a no-op until the entry point
 * wires an SDK):
 *
 * ```
 * sluice.runner.call (SERVER)        child of the gateway's sluice.relay through `traceparent`
 * ├── sluice.runner.admission        a slot, the body, the acknowledgement, the stall checks
 * └── sluice.engine.request (CLIENT) the engine's answer to its last byte; its context goes to
 *                                    the engine as `traceparent`, so an engine that exports
 *                                    traces of its own (vLLM with OTLP) joins the trace
 * ```
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
  const span = tracer.startSpan('sluice.runner.call', { kind: SpanKind.SERVER }, parent);
  if (!span.isRecording()) return undefined;
  const path = telemetryPath(req.url ?? '/');
  const attributes: Attributes = {
    'http.request.method': req.method ?? 'POST',
    'url.path': path,
    'sluice.runner.id': runnerId,
  };
  const callId = first(req.headers[CALL_ID_HEADER]);
  const fn = first(req.headers[FUNCTION_HEADER]);
  if (callId !== undefined) attributes['sluice.call.id'] = callId;
  if (fn !== undefined) {
    attributes['sluice.fn'] = fn;
    if (path.startsWith('/v1/')) attributes['gen_ai.request.model'] = fn;
  }
  span.setAttributes(attributes);
  const runnerTrace = new RunnerTrace(span, trace.setSpan(parent, span));
  res.once('close', () => runnerTrace.end(res));
  return runnerTrace;
}

/** One recorded call's spans on a runner; see the file comment for the tree. */
export class RunnerTrace {
  readonly span: Span;
  readonly #context: Context;
  readonly #admission: Span;
  #engine: Span | undefined;
  #sse = false;
  #kept: Buffer[] = [];
  #keptBytes = 0;

  constructor(span: Span, context: Context) {
    this.span = span;
    this.#context = context;
    this.#admission = tracer.startSpan('sluice.runner.admission', undefined, context);
  }

  /**
   * Ends admission and starts the engine request's CLIENT span toward `origin`; returns `headers`
   * with its trace context in place of the gateway's.
   */
  engine(
    origin: string,
    method: string,
    path: string,
    headers: Record<string, string | string[]>,
  ): Record<string, string | string[]> {
    this.#admission.end();
    const url = new URL(origin);
    this.#engine = tracer.startSpan(
      'sluice.engine.request',
      {
        kind: SpanKind.CLIENT,
        attributes: {
          'http.request.method': method,
          'url.path': telemetryPath(path),
          'server.address': url.hostname,
          'server.port': Number(url.port) || (url.protocol === 'https:' ? 443 : 80),
        },
      },
      this.#context,
    );
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
    const { model, usage, choices } = answer as {
      model?: unknown;
      usage?: { prompt_tokens?: unknown; completion_tokens?: unknown } | null;
      choices?: unknown;
    };
    if (typeof model === 'string') attributes['gen_ai.response.model'] = model;
    if (usage && typeof usage.prompt_tokens === 'number') attributes['gen_ai.usage.input_tokens'] = usage.prompt_tokens;
    if (usage && typeof usage.completion_tokens === 'number')
      attributes['gen_ai.usage.output_tokens'] = usage.completion_tokens;
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
