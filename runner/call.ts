/**
 * One call through a runner: admission, reading the call, the acknowledgement, the engine
 * request, and the reply (runner/reply.ts). The order is the wire's promise to the gateway
 * (runner/protocol/):
 *
 * 1. Admission (runner/admission.ts), before the body is read: no slot (or a draining runner,
 *    or an engine that cannot take calls) is a busy answer at once.
 * 2. The whole body is read, then `102 Processing` acknowledges the call, when the caller asked
 *    for acknowledgements (a gateway does, with its response bound). Nothing has reached the
 *    engine yet, and nothing will until the acknowledgement is on the wire: a gateway that saw
 *    no response knows the engine never saw the call.
 * 3. A runner whose process was just stalled (stopped, swapped out, starved) for half the
 *    gateway's response bound or more steps back with a busy answer, at admission and again
 *    right before the engine request: the gateway may have given the call up and placed it
 *    elsewhere while it waited in this runner's socket, and a busy answer is safe either way.
 * 4. The engine request, with acknowledgements repeated until the final status line so that the
 *    gateway can tell a slow engine from a hung runner. A sync call's status line goes with the
 *    engine's first body byte; a detached call's 202 goes once the engine accepted the call.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { performance } from 'node:perf_hooks';
import type { Dispatcher } from 'undici';
import { onCutShort } from '../placer/kernel/index.ts';
import type { Logger } from '../placer/kernel/index.ts';
import { admit } from './admission.ts';
import type { BusyReason } from './admission.ts';
import { pumpBody, readBody } from './protocol/body.ts';
import type { RunnerEngine } from './engine.ts';
import { EngineBusyError, EngineFailedError, EngineTimeoutError, RunnerBodyTimeoutError, RunnerBodyTooLargeError } from './errors.ts';
import type { RunnerConfig } from './options.ts';
import {
  CALL_ID_HEADER,
  CALL_TYPE_HEADER,
  ERROR_TRAILER,
  EngineErrorCode,
  EXEC_TRAILER,
  FUNCTION_HEADER,
  RESPONSE_TIMEOUT_HEADER,
  TIMEOUT_HEADER,
  formatExecTiming,
  isConnectError,
  withoutHopByHop,
} from './protocol/index.ts';
import { detachedReply, syncReply } from './reply.ts';
import type { Reply } from './reply.ts';
import type { Slots } from './slots.ts';
import type { CallCounts } from './status.ts';
import { startRunnerTrace } from './tracing.ts';
import type { RunnerTrace } from './tracing.ts';

/** What the call path needs from its runner. */
export interface CallPathContext {
  config: RunnerConfig;
  engine: RunnerEngine;
  slots: Slots;
  log: Logger;
  counts: CallCounts;
  draining(): boolean;
  /** How long the process's event loop just went without running timers, ms (StallWatch). */
  stalled(): number;
  busy(res: ServerResponse, reason: BusyReason): void;
  /** Checks the body against the digest the call's signature covers (runner/call-guard.ts); false: answered 401. */
  verify?(req: IncomingMessage, res: ServerResponse, body: Buffer): boolean;
  /** The call's body never came whole, so nothing ran: its call id may be offered here again. */
  abandoned?(res: ServerResponse): void;
}

/** Serves one call on `req`/`res`; resolves when the call is handed to the engine's stream or answered. */
export async function serveCall(ctx: CallPathContext, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const { config, engine, log, counts } = ctx;
  // Undefined unless tracing is on and the call sampled: then nothing below records anything.
  const runnerTrace = startRunnerTrace(req, res, config.id);
  const admission = admit(ctx);
  if (admission.kind === 'busy') return answerBusy(ctx, res, runnerTrace, admission.reason);
  const release = admission.release;

  const received = performance.now();
  const callId = header(req, CALL_ID_HEADER);
  const fn = header(req, FUNCTION_HEADER);
  const detached = header(req, CALL_TYPE_HEADER) === 'detached';
  const budget = positiveMs(header(req, TIMEOUT_HEADER)) ?? config.defaultCallTimeout;
  const responseTimeout = positiveMs(header(req, RESPONSE_TIMEOUT_HEADER));
  const late = (): boolean => responseTimeout !== undefined && ctx.stalled() >= responseTimeout / 2;
  if (late()) {
    release();
    log.warn('call read after a stall; answered busy', { call: callId, fn, stalledMs: Math.round(ctx.stalled()) });
    return answerBusy(ctx, res, runnerTrace, 'late');
  }
  const controller = new AbortController();
  res.once('close', release);
  // The gateway hung up before the end: stop the engine's work too.
  onCutShort(res, () => controller.abort(new Error('gateway closed the connection')));

  let body: Buffer;
  try {
    // Bounded in time as well as size: a call that holds a slot must bring its body promptly.
    body = await readBody(req, {
      maxBytes: config.maxBodyBytes,
      tooLarge: () => new RunnerBodyTooLargeError(`request body exceeds this runner's maxBodyBytes (${config.maxBodyBytes} bytes)`),
      closed: () => new Error('gateway closed the connection while sending the call'),
      timeout: { ms: config.bodyReadTimeout, error: () => new RunnerBodyTimeoutError(`request body not received within this runner's bodyReadTimeout (${config.bodyReadTimeout} ms)`) },
      idle: { ms: config.bodyIdleTimeout, error: () => new RunnerBodyTimeoutError(`request body stalled: no bytes for this runner's bodyIdleTimeout (${config.bodyIdleTimeout} ms)`) },
    });
  } catch (error) {
    release();
    ctx.abandoned?.(res);
    if ((error instanceof RunnerBodyTooLargeError || error instanceof RunnerBodyTimeoutError) && !res.headersSent) {
      counts.rejected++;
      log.debug('call body refused', { call: callId, fn, code: error.code });
      res.writeHead(error.status, { 'content-type': 'application/json', connection: 'close' });
      res.end(JSON.stringify({ error: { message: error.message, type: error.type, code: error.code } }));
    }
    return;
  }
  // The signature (verified from the head before admission) covers the body's digest: the body
  // is checked against it now, before the acknowledgement and the engine.
  if (ctx.verify && !ctx.verify(req, res, body)) return;

  // Only a caller that asked (a gateway sends its response bound) gets informational responses:
  // a plain HTTP client, or a proxy that cannot relay them (nginx), gets plain HTTP.
  if (responseTimeout !== undefined) res.writeProcessing();
  // See the file comment, step 3: checked again here, since a stall can come between the two.
  if (res.destroyed) return;
  if (late() || (responseTimeout !== undefined && performance.now() - received >= responseTimeout)) {
    release();
    log.warn('call reached the engine step after a stall; answered busy', { call: callId, fn, stalledMs: Math.round(ctx.stalled()) });
    return answerBusy(ctx, res, runnerTrace, 'late');
  }

  const keepalive =
    responseTimeout === undefined
      ? undefined
      : setInterval(() => {
          if (!res.headersSent && !res.destroyed) res.writeProcessing();
        }, Math.max(10, Math.floor(responseTimeout / 3)));
  const stopKeepalive = (): void => clearInterval(keepalive);
  // The budget bounds the whole execution, not just the gaps between chunks; it counts from the
  // call's arrival on this runner's own monotonic clock.
  const deadline = received + budget;
  const timer = setTimeout(
    () => controller.abort(new EngineTimeoutError(`call ${callId ?? ''} ran past its budget of ${budget} ms`)),
    Math.max(1, deadline - performance.now()),
  );
  res.once('close', () => {
    clearTimeout(timer);
    stopKeepalive();
  });
  const timedOut = () => controller.signal.reason instanceof EngineTimeoutError;
  const reply: Reply = detached ? detachedReply(res, config.id) : syncReply(res, config.id);
  // A detached call the engine kept for acceptWindow without refusing it is the engine's.
  const acceptance = detached ? setTimeout(() => reply.commit(), config.acceptWindow) : undefined;
  const committed = (): boolean => res.headersSent;
  const started = performance.now();
  const timing = () => ({ [EXEC_TRAILER]: formatExecTiming(performance.now() - started) });

  let response: Dispatcher.ResponseData;
  const method = req.method ?? 'POST';
  const path = req.url ?? '/';
  const headers = withoutHopByHop(req.headers);
  try {
    response = await engine.request({
      method: method as Dispatcher.HttpMethod,
      path,
      headers: runnerTrace ? runnerTrace.engine(engine.origin, method, path, headers) : headers,
      body,
      signal: controller.signal,
      // Our own deadline timer reports RUNNER_ENGINE_TIMEOUT; undici's must not win the race.
      timeout: Math.max(1, deadline - performance.now()) + 1000,
    });
  } catch (error) {
    clearTimeout(acceptance);
    // A call the gateway gave up is not the engine's failure: its span ends when `res` closes.
    if (controller.signal.aborted && !timedOut()) return;
    runnerTrace?.engineEnded(error as Error);
    if (isConnectError(error) && !committed()) {
      // The engine never saw the call: nothing ran, so another runner may take it.
      engine.markUnreachable(error as Error);
      release();
      stopKeepalive();
      return answerBusy(ctx, res, runnerTrace, 'engine-unreachable');
    }
    counts.failed++;
    log.warn('engine failed before answering', { call: callId, fn, error: error as Error });
    const failure = timedOut()
      ? (controller.signal.reason as EngineTimeoutError)
      : new EngineFailedError(`engine at ${engine.origin} failed before answering: ${(error as Error).message}`, { cause: error });
    runnerTrace?.fail(failure);
    return reply.fail(failure, timing());
  }
  clearTimeout(acceptance);
  runnerTrace?.engineAnswered(response.statusCode, response.headers['content-type']);
  if (response.statusCode === 429 || response.statusCode === 503) {
    runnerTrace?.engineEnded();
    // The engine refused before producing anything (queue full, still loading): nothing ran.
    await response.body.dump().catch(() => {});
    if (!committed()) {
      release();
      stopKeepalive();
      return answerBusy(ctx, res, runnerTrace, 'engine-busy');
    }
    // A detached call past its accept window already has its 202: its result is the refusal.
    counts.failed++;
    const refusal = new EngineBusyError(`engine at ${engine.origin} refused the call with ${response.statusCode}; nothing ran`);
    runnerTrace?.fail(refusal);
    return reply.fail(refusal, timing());
  }

  counts.served++;
  reply.head(response.statusCode, response.headers);
  const engineBody = response.body;
  pumpBody(engineBody, res, (chunk) => {
    runnerTrace?.chunk(chunk);
    return reply.write(chunk);
  });
  engineBody.once('end', () => {
    runnerTrace?.engineEnded();
    reply.end(timing());
  });
  engineBody.once('error', (error) => {
    if (controller.signal.aborted && !timedOut()) return;
    counts.failed++;
    const code = timedOut() ? EngineErrorCode.timeout : EngineErrorCode.failed;
    runnerTrace?.engineEnded(code);
    runnerTrace?.fail(code);
    log.warn('engine failed mid-response', { call: callId, fn, code, error });
    reply.end({ ...timing(), [ERROR_TRAILER]: code });
  });
}

/** Answers busy for `reason`, and says why on the call's span when it is traced. */
function answerBusy(ctx: CallPathContext, res: ServerResponse, runnerTrace: RunnerTrace | undefined, reason: BusyReason): void {
  runnerTrace?.span.setAttribute('sluice.runner.busy', reason);
  ctx.busy(res, reason);
}

/** A positive whole number of ms from a header, or undefined when absent or malformed. */
function positiveMs(value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const ms = Number(value);
  return Number.isSafeInteger(ms) && ms > 0 ? ms : undefined;
}

function header(req: IncomingMessage, name: string): string | undefined {
  const value = req.headers[name];
  return Array.isArray(value) ? value[0] : value;
}
