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
import { formatMs, onCutShort } from '../placer/kernel/index.ts';
import type { Logger } from '../placer/kernel/index.ts';
import { admit } from './admission.ts';
import type { BusyReason } from './admission.ts';
import { pumpBody, readBody } from './protocol/body.ts';
import type { BodyRead } from './protocol/body.ts';
import type { RunnerEngine } from './engine.ts';
import {
  EngineBusyError,
  EngineFailedError,
  EngineTimeoutError,
  RunnerBodyTimeoutError,
  RunnerBodyTooLargeError,
} from './errors.ts';
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
import { detachedReply, errorJson, syncReply } from './reply.ts';
import type { Reply } from './reply.ts';
import type { Release, Slots } from './slots.ts';
import type { CallCounts } from './status.ts';
import { startRunnerTrace } from './tracing.ts';
import type { RunnerTrace } from './tracing.ts';

/** What the call path needs from its runner. */
export interface CallPathContext {
  config: RunnerConfig;
  /** How a call's body is read: {@link callBodyRead} of `config`, built once. */
  bodyRead: BodyRead;
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

/**
 * How the runner reads a call's body, bounded in time as well as size: a call that holds a slot
 * must bring its body promptly. Holds nothing of one call, so a runner builds it once.
 */
export function callBodyRead(config: RunnerConfig): BodyRead {
  const { maxBodyBytes, bodyReadTimeout, bodyIdleTimeout } = config;
  return {
    maxBytes: maxBodyBytes,
    tooLarge: () =>
      new RunnerBodyTooLargeError(`request body exceeds this runner's maxBodyBytes (${maxBodyBytes} bytes)`),
    closed: () => new Error('gateway closed the connection while sending the call'),
    timeout: {
      ms: bodyReadTimeout,
      error: () =>
        new RunnerBodyTimeoutError(
          `request body not received within this runner's bodyReadTimeout (${bodyReadTimeout} ms)`,
        ),
    },
    idle: {
      ms: bodyIdleTimeout,
      error: () =>
        new RunnerBodyTimeoutError(
          `request body stalled: no bytes for this runner's bodyIdleTimeout (${bodyIdleTimeout} ms)`,
        ),
    },
  };
}

/** Serves one call on `req`/`res`; resolves when the call is handed to the engine's stream or answered. */
export async function serveCall(ctx: CallPathContext, req: IncomingMessage, res: ServerResponse): Promise<void> {
  // Undefined unless tracing is on and the call sampled: then nothing below records anything.
  const runnerTrace = startRunnerTrace(req, res, ctx.config.id);
  const admission = admit(ctx);
  if (admission.kind === 'busy') return answerBusy(ctx, res, runnerTrace, admission.reason);
  return new AdmittedCall(ctx, req, res, runnerTrace, admission.release).serve();
}

/**
 * How a call's steps ended. `held`: the response has the call (answered, failed, or streaming),
 * and the slot stays taken until it closes. `busy`: nothing reached the engine, and the call is
 * answered busy. `unread`: its body never came whole.
 */
type Ended = { kind: 'held' } | { kind: 'busy'; reason: BusyReason } | { kind: 'unread'; error: unknown };

const HELD: Ended = Object.freeze({ kind: 'held' });

/** One admitted call, from its head to the engine's stream; the one holder of the call's slot. */
class AdmittedCall {
  readonly #ctx: CallPathContext;
  readonly #req: IncomingMessage;
  readonly #res: ServerResponse;
  readonly #trace: RunnerTrace | undefined;
  readonly #release: Release;
  /** On this runner's own monotonic clock: the budget counts from here. */
  readonly #received = performance.now();
  readonly #callId: string | undefined;
  readonly #fn: string | undefined;
  readonly #detached: boolean;
  readonly #budget: number;
  /** The gateway's response bound; undefined when the caller is not a gateway. */
  readonly #responseTimeout: number | undefined;
  /** Aborted when the gateway hangs up, or with an EngineTimeoutError when the budget runs out. */
  readonly #controller = new AbortController();
  #keepalive: NodeJS.Timeout | undefined;
  #started = 0;

  constructor(
    ctx: CallPathContext,
    req: IncomingMessage,
    res: ServerResponse,
    runnerTrace: RunnerTrace | undefined,
    release: Release,
  ) {
    this.#ctx = ctx;
    this.#req = req;
    this.#res = res;
    this.#trace = runnerTrace;
    this.#release = release;
    // The slot comes back when the response closes, or sooner in serve() when the call ends
    // before the engine has it.
    res.once('close', release);
    this.#callId = header(req, CALL_ID_HEADER);
    this.#fn = header(req, FUNCTION_HEADER);
    this.#detached = header(req, CALL_TYPE_HEADER) === 'detached';
    this.#budget = positiveMs(header(req, TIMEOUT_HEADER)) ?? ctx.config.defaultCallTimeout;
    this.#responseTimeout = positiveMs(header(req, RESPONSE_TIMEOUT_HEADER));
  }

  /** Runs the steps; a call that ends before the engine has it gives its slot back before its answer. */
  async serve(): Promise<void> {
    const ended = await this.#steps();
    if (ended.kind === 'held') return;
    this.#release();
    clearInterval(this.#keepalive);
    if (ended.kind === 'busy') answerBusy(this.#ctx, this.#res, this.#trace, ended.reason);
    else this.#bodyUnread(ended.error);
  }

  async #steps(): Promise<Ended> {
    if (this.#late()) return this.#stepBack('call read after a stall; answered busy');
    // The gateway hung up before the end: stop the engine's work too.
    onCutShort(this.#res, () => this.#controller.abort(new Error('gateway closed the connection')));
    const read = await this.#readBody();
    if (read.kind === 'unread') return read;
    // The signature (verified from the head before admission) covers the body's digest: the body
    // is checked against it now, before the acknowledgement and the engine.
    if (this.#ctx.verify && !this.#ctx.verify(this.#req, this.#res, read.body)) return HELD;
    // Only a caller that asked (a gateway sends its response bound) gets informational responses:
    // a plain HTTP client, or a proxy that cannot relay them (nginx), gets plain HTTP.
    if (this.#responseTimeout !== undefined) this.#res.writeProcessing();
    // See the file comment, step 3: checked again here, since a stall can come between the two.
    if (this.#res.destroyed) return HELD;
    if (this.#late() || this.#outwaitedBound())
      return this.#stepBack('call reached the engine step after a stall; answered busy');
    return this.#askEngine(read.body);
  }

  /** The process was just stalled for half the gateway's response bound or more (file comment, step 3). */
  #late(): boolean {
    return this.#responseTimeout !== undefined && this.#ctx.stalled() >= this.#responseTimeout / 2;
  }

  /** The call has been on this runner for the gateway's whole response bound. */
  #outwaitedBound(): boolean {
    return this.#responseTimeout !== undefined && performance.now() - this.#received >= this.#responseTimeout;
  }

  #stepBack(message: string): Ended {
    this.#ctx.log.warn(message, { call: this.#callId, fn: this.#fn, stalledMs: Math.round(this.#ctx.stalled()) });
    return { kind: 'busy', reason: 'late' };
  }

  /** Reads the whole body, bounded in time as well as size: a call that holds a slot must bring its body promptly. */
  async #readBody(): Promise<{ kind: 'read'; body: Buffer } | { kind: 'unread'; error: unknown }> {
    try {
      return { kind: 'read', body: await readBody(this.#req, this.#ctx.bodyRead) };
    } catch (error) {
      return { kind: 'unread', error };
    }
  }

  /** Nothing ran: the call id may be offered here again, and a body too large or too slow is answered. */
  #bodyUnread(error: unknown): void {
    const res = this.#res;
    this.#ctx.abandoned?.(res);
    if (!(error instanceof RunnerBodyTooLargeError || error instanceof RunnerBodyTimeoutError) || res.headersSent)
      return;
    this.#ctx.counts.rejected++;
    this.#ctx.log.debug('call body refused', { call: this.#callId, fn: this.#fn, code: error.code });
    res.writeHead(error.status, { 'content-type': 'application/json', connection: 'close' });
    res.end(errorJson(error));
  }

  /** Sends the call to the engine, bounded by the call's budget, and hands its answer to the reply. */
  async #askEngine(body: Buffer): Promise<Ended> {
    const { config } = this.#ctx;
    const res = this.#res;
    this.#keepAcknowledging();
    // The budget bounds the whole execution, not just the gaps between chunks; it counts from the
    // call's arrival on this runner's own monotonic clock.
    const deadline = this.#received + this.#budget;
    const timer = setTimeout(
      () =>
        this.#controller.abort(
          new EngineTimeoutError(`call ${this.#callId ?? ''} ran past its budget of ${formatMs(this.#budget)}`),
        ),
      Math.max(1, deadline - performance.now()),
    );
    res.once('close', () => {
      clearTimeout(timer);
      clearInterval(this.#keepalive);
    });
    const reply: Reply = this.#detached ? detachedReply(res, config.id) : syncReply(res, config.id);
    // A detached call the engine kept for acceptWindow without refusing it is the engine's.
    const acceptance = this.#detached ? setTimeout(() => reply.commit(), config.acceptWindow) : undefined;
    this.#started = performance.now();
    let response: Dispatcher.ResponseData;
    try {
      response = await this.#engineRequest(body, deadline);
    } catch (error) {
      clearTimeout(acceptance);
      return this.#engineFailed(error, reply);
    }
    clearTimeout(acceptance);
    this.#trace?.engineAnswered(response.statusCode, response.headers['content-type']);
    if (response.statusCode === 429 || response.statusCode === 503) return this.#engineRefused(response, reply);
    this.#stream(response, reply);
    return HELD;
  }

  /** Repeats the acknowledgement until the final status line goes, for a caller that asked for acknowledgements. */
  #keepAcknowledging(): void {
    const res = this.#res;
    const responseTimeout = this.#responseTimeout;
    if (responseTimeout === undefined) return;
    this.#keepalive = setInterval(
      () => {
        if (!res.headersSent && !res.destroyed) res.writeProcessing();
      },
      Math.max(10, Math.floor(responseTimeout / 3)),
    );
  }

  /** The engine a traced call goes to: its origin and kind. */
  #engineTarget(): { origin: string; kind: string } {
    const { engine } = this.#ctx;
    return { origin: engine.origin, kind: engine.adapter?.kind.name ?? 'openai' };
  }

  #engineRequest(body: Buffer, deadline: number): Promise<Dispatcher.ResponseData> {
    const { engine } = this.#ctx;
    const method = this.#req.method ?? 'POST';
    const path = this.#req.url ?? '/';
    const headers = withoutHopByHop(this.#req.headers);
    return engine.request({
      method: method as Dispatcher.HttpMethod,
      path,
      headers: this.#trace ? this.#trace.engine(this.#engineTarget(), method, path, headers) : headers,
      body,
      signal: this.#controller.signal,
      // Our own deadline timer reports RUNNER_ENGINE_TIMEOUT; undici's must not win the race.
      timeout: Math.max(1, deadline - performance.now()) + 1000,
    });
  }

  #engineFailed(error: unknown, reply: Reply): Ended {
    const { engine, counts, log } = this.#ctx;
    // A call the gateway gave up is not the engine's failure: its span ends when `res` closes.
    if (this.#gaveUp()) return HELD;
    this.#trace?.engineEnded(error as Error);
    if (isConnectError(error) && !this.#res.headersSent) {
      // The engine never saw the call: nothing ran, so another runner may take it.
      engine.markUnreachable(error as Error);
      return { kind: 'busy', reason: 'engine-unreachable' };
    }
    counts.failed++;
    log.warn('engine failed before answering', { call: this.#callId, fn: this.#fn, error: error as Error });
    const failure = this.#timedOut()
      ? (this.#controller.signal.reason as EngineTimeoutError)
      : new EngineFailedError(`engine at ${engine.origin} failed before answering: ${(error as Error).message}`, {
          cause: error,
        });
    this.#trace?.fail(failure);
    reply.fail(failure, this.#timing());
    return HELD;
  }

  /** The engine refused before producing anything (queue full, still loading): nothing ran. */
  async #engineRefused(response: Dispatcher.ResponseData, reply: Reply): Promise<Ended> {
    this.#trace?.engineEnded();
    await response.body.dump().catch(() => {});
    if (!this.#res.headersSent) return { kind: 'busy', reason: 'engine-busy' };
    // A detached call past its accept window already has its 202: its result is the refusal.
    this.#ctx.counts.failed++;
    const refusal = new EngineBusyError(
      `engine at ${this.#ctx.engine.origin} refused the call with ${response.statusCode}; nothing ran`,
    );
    this.#trace?.fail(refusal);
    reply.fail(refusal, this.#timing());
    return HELD;
  }

  /** Streams the engine's answer through the reply. */
  #stream(response: Dispatcher.ResponseData, reply: Reply): void {
    const { counts, log } = this.#ctx;
    counts.served++;
    reply.head(response.statusCode, response.headers);
    const engineBody = response.body;
    pumpBody(engineBody, this.#res, (chunk) => {
      this.#trace?.chunk(chunk);
      return reply.write(chunk);
    });
    engineBody.once('end', () => {
      this.#trace?.engineEnded();
      reply.end(this.#timing());
    });
    engineBody.once('error', (error) => {
      if (this.#gaveUp()) return;
      counts.failed++;
      const code = this.#timedOut() ? EngineErrorCode.timeout : EngineErrorCode.failed;
      this.#trace?.engineEnded(code);
      this.#trace?.fail(code);
      log.warn('engine failed mid-response', { call: this.#callId, fn: this.#fn, code, error });
      reply.end({ ...this.#timing(), [ERROR_TRAILER]: code });
    });
  }

  /** The call's work was stopped for a reason other than its budget: the gateway hung up. */
  #gaveUp(): boolean {
    return this.#controller.signal.aborted && !this.#timedOut();
  }

  #timedOut(): boolean {
    return this.#controller.signal.reason instanceof EngineTimeoutError;
  }

  /** The engine's execution time, as the trailer the gateway reads. */
  #timing(): Record<string, string> {
    return { [EXEC_TRAILER]: formatExecTiming(performance.now() - this.#started) };
  }
}

/** Answers busy for `reason`, and says why on the call's span when it is traced. */
function answerBusy(
  ctx: CallPathContext,
  res: ServerResponse,
  runnerTrace: RunnerTrace | undefined,
  reason: BusyReason,
): void {
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
