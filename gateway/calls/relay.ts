/**
 * Relaying a committed runner's response to the client as it arrives.
 *
 * The client's status line waits for the first body byte: until then a runner failure can
 * still be answered with a clean 502. After it, a failure ends an SSE stream with an error
 * event (what OpenAI clients expect) and cuts any other response short, so the client never
 * mistakes a partial body for a whole one.
 *
 * An SSE stream is relayed whole events at a time: bytes after the last blank line are held
 * until the rest of their event arrives (engines send whole events per chunk, so this is
 * nearly always nothing). A stream cut mid-event then ends with the error event alone, never
 * with half an event glued to it, which a client would fail to parse. The same whole events are
 * what the usage the gateway asked for on its own account is taken out of (`stripUsage`,
 * gateway/access/usage-strip.ts), so that costs no buffering of its own.
 */
import type { ServerResponse } from 'node:http';
import { pumpBody } from '../../runner/protocol/body.ts';
import { ERROR_TRAILER, EXEC_TRAILER, parseExecTiming, withoutHopByHop } from '../../runner/protocol/index.ts';
import { SluiceError } from '../../placer/kernel/index.ts';
import type { AbortWatch } from '../../placer/kernel/index.ts';
import type { CallOutcome } from '../http/index.ts';
import { CallTimeoutError, RunnerFailedError, errorBody, runnerReported } from '../errors.ts';
import { committedFailure } from '../fleet/index.ts';
import type { RunnerResponse } from '../fleet/index.ts';
import { stripInjectedUsage } from '../access/index.ts';

/** How the relay ended. */
export interface RelayResult {
  outcome: CallOutcome;
  /** Status the client got; 0 when it was gone before any. */
  status: number;
  /** Execution time from the runner's trailer, when it sent one. */
  execMs: number | undefined;
  error?: Error;
}

/** What an answer's content type says of how it is read. */
export interface AnswerType {
  /** `text/event-stream`: relayed whole events at a time, its events counted and timed. */
  readonly sse: boolean;
  /** `application/json`: its end is searched for a usage block. */
  readonly json: boolean;
}

/** The {@link AnswerType} of a runner's answer, read once per call from its content type. */
export function answerType(headers: RunnerResponse['headers']): AnswerType {
  const type = String(headers['content-type'] ?? '');
  return { sse: type.startsWith('text/event-stream'), json: type.startsWith('application/json') };
}

/** How a relay treats the answer. */
export interface RelayOptions {
  /** The answer's type ({@link answerType}). */
  type: AnswerType;
  /** The engine was asked for a usage chunk the client did not ask for: take it out of an SSE stream. */
  stripUsage?: boolean;
}

/**
 * Streams `response` to `out`, adding `headers`. Resolves once the client's response is
 * finished or abandoned; never rejects.
 */
export function relay(
  response: RunnerResponse,
  out: ServerResponse,
  headers: Record<string, string>,
  runner: { id: string },
  signal: AbortWatch,
  options: RelayOptions,
): Promise<RelayResult> {
  return new Promise<RelayResult>((resolve) => {
    const body = response.body;
    const { sse } = options.type;
    const strip = sse && options.stripUsage === true;
    let headersSent = false;
    const head = (): void => {
      if (headersSent) return;
      headersSent = true;
      out.writeHead(response.statusCode, withoutHopByHop(response.headers, { add: headers }));
    };
    const fail = (error: Error, execMs: number | undefined): void => {
      const outcome: CallOutcome = error instanceof CallTimeoutError ? 'timeouts' : 'errors';
      if (!headersSent) {
        const status = error instanceof SluiceError ? error.status : 502;
        out.writeHead(status, { 'content-type': 'application/json', ...headers });
        out.end(error instanceof SluiceError ? errorBody(error) : errorBody(new RunnerFailedError(error.message)));
        return resolve({ outcome, status, execMs, error });
      }
      if (sse && error instanceof SluiceError) out.end(`data: ${errorBody(error)}\n\n`);
      else out.destroy(error);
      resolve({ outcome, status: response.statusCode, execMs, error });
    };

    const reported = response.headers[ERROR_TRAILER];
    if (reported !== undefined) {
      // The runner took the call and its engine failed before answering: still committed.
      void body.text().then(
        (text) => fail(runnerReported(String(reported), runner.id, errorMessage(text)).error, undefined),
        (error: Error) => fail(committedFailure(runner, error), undefined),
      );
      return;
    }

    // An SSE event begun but not finished: see the file comment.
    let partial: Buffer | undefined;
    pumpBody(body, out, (data) => {
      let chunk = data;
      if (sse) {
        const whole = partial ? Buffer.concat([partial, data]) : data;
        const end = lastEventEnd(whole);
        partial = end < whole.length ? whole.subarray(end) : undefined;
        if (end === 0) return true;
        chunk = end < whole.length ? whole.subarray(0, end) : whole;
        if (strip) chunk = stripInjectedUsage(chunk);
        if (chunk.length === 0) return true;
      }
      head();
      return out.write(chunk);
    });
    body.once('end', () => {
      const execMs = parseExecTiming(response.trailers[EXEC_TRAILER] ?? response.headers[EXEC_TRAILER]);
      const failed = response.trailers[ERROR_TRAILER];
      if (failed !== undefined)
        return fail(runnerReported(String(failed), runner.id, 'the response was cut short').error, execMs);
      head();
      // A stream that ended without a final blank line still gets every byte the engine sent.
      if (partial) out.end(strip ? stripInjectedUsage(partial) : partial);
      else out.end();
      resolve({ outcome: 'completed', status: response.statusCode, execMs });
    });
    body.once('error', (error: Error) => {
      if (signal.aborted) {
        return resolve({
          outcome: 'cancelled',
          status: headersSent ? response.statusCode : 0,
          execMs: undefined,
          error,
        });
      }
      fail(committedFailure(runner, error), undefined);
    });
  });
}

/**
 * The offset just past the last blank line in `buf` (where an SSE event ends), or 0 when there
 * is none. SSE lines end with LF, CRLF or CR; an event ends with an empty line.
 */
export function lastEventEnd(buf: Buffer): number {
  for (let i = buf.length - 1; i > 0; i--) {
    const c = buf[i];
    if (c !== 0x0a && c !== 0x0d) continue;
    // A line ending at i (a CR before this LF belongs to it); the event ends here when the
    // line it ends is empty, that is when another line ending comes right before it.
    const j = c === 0x0a && buf[i - 1] === 0x0d ? i - 2 : i - 1;
    if (j >= 0 && (buf[j] === 0x0a || buf[j] === 0x0d)) return i + 1;
  }
  return 0;
}

/** The message inside an OpenAI-shaped error body, or the body itself when it is not one. */
function errorMessage(text: string): string {
  try {
    const message = (JSON.parse(text) as { error?: { message?: unknown } }).error?.message;
    if (typeof message === 'string') return message;
  } catch {
    // Not JSON: fall through to the raw text.
  }
  return text.slice(0, 200);
}
