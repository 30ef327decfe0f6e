/**
 * How a committed call's answer goes back to the gateway, for both call types, so the call
 * path in call.ts is written once:
 * - sync: the engine's status and headers, written with its first body byte (until then the
 *   runner's acknowledgements keep the gateway waiting), its body streamed, then the trailers;
 * - detached: 202 once the runner commits (see {@link Reply.commit}), then the engine's body,
 *   with the engine's status and content type as trailers (the gateway stores them as the
 *   call's result).
 */
import type { ServerResponse } from 'node:http';
import type { SluiceError } from '../placer/kernel/index.ts';
import {
  ERROR_TRAILER,
  EXEC_TRAILER,
  RESULT_STATUS_TRAILER,
  RESULT_TYPE_TRAILER,
  RUNNER_ID_HEADER,
  withoutHopByHop,
} from './protocol/index.ts';

/** The committed half of the wire, as the call path sees it. */
export interface Reply {
  /**
   * Sends the final status line now if it has not gone yet: a detached call's 202. A sync reply
   * has nothing to send before the engine's answer, so this does nothing there.
   */
  commit(): void;
  /** The engine answered: its status and headers. */
  head(status: number, headers: Record<string, string | string[] | undefined>): void;
  /** A body chunk; false means wait for 'drain' on the response. */
  write(chunk: Buffer): boolean;
  /** The body ended; `trailers` carry the execution time and, on failure, the error code. */
  end(trailers: Record<string, string>): void;
  /** The engine failed (or refused) before answering: the error takes the place of its answer. */
  fail(error: SluiceError, trailers: Record<string, string>): void;
}

/** The OpenAI-shaped body of an error the runner answers itself. */
export const errorJson = (error: SluiceError): string =>
  JSON.stringify({ error: { message: error.message, type: error.type, code: error.code } });

/**
 * Statuses that carry no body (RFC 9110 sections 15.3.5 and 15.4.5), so no chunked encoding and no
 * trailers: Node throws on trailers declared for them.
 */
const bodiless = (status: number): boolean => status === 204 || status === 304;

/**
 * A sync call's reply: the engine's own status line, sent with the first byte of its body. A
 * bodiless answer is held to its end and carries the trailers' values as headers instead.
 */
export function syncReply(res: ServerResponse, runnerId: string): Reply {
  let pending: { status: number; headers: Record<string, string | string[]> } | undefined;
  const flushHead = (): void => {
    if (!pending || res.headersSent) return;
    res.writeHead(pending.status, pending.headers);
    pending = undefined;
  };
  return {
    commit() {},
    head(status, headers) {
      const own: Record<string, string> = bodiless(status)
        ? { [RUNNER_ID_HEADER]: runnerId }
        : { [RUNNER_ID_HEADER]: runnerId, trailer: `${EXEC_TRAILER}, ${ERROR_TRAILER}` };
      pending = { status, headers: withoutHopByHop(headers, { add: own }) };
    },
    write(chunk) {
      flushHead();
      return res.write(chunk);
    },
    end(trailers) {
      if (pending && bodiless(pending.status)) {
        pending.headers = { ...pending.headers, ...trailers };
        flushHead();
        return void res.end();
      }
      flushHead();
      res.addTrailers(trailers);
      res.end();
    },
    fail(error) {
      res.writeHead(error.status, {
        'content-type': 'application/json',
        [RUNNER_ID_HEADER]: runnerId,
        [ERROR_TRAILER]: error.code,
      });
      res.end(errorJson(error));
    },
  };
}

/** A detached call's reply: 202 at commit, the engine's status and content type at the end. */
export function detachedReply(res: ServerResponse, runnerId: string): Reply {
  let status = 0;
  let contentType = 'application/octet-stream';
  const commit = (): void => {
    if (res.headersSent) return;
    res.writeHead(202, {
      [RUNNER_ID_HEADER]: runnerId,
      trailer: `${EXEC_TRAILER}, ${ERROR_TRAILER}, ${RESULT_STATUS_TRAILER}, ${RESULT_TYPE_TRAILER}`,
    });
    // The gateway answers its client once it sees this status line: send it now, not with the body.
    res.flushHeaders();
  };
  return {
    commit,
    head(engineStatus, headers) {
      commit();
      status = engineStatus;
      const type = headers['content-type'];
      if (type !== undefined) contentType = Array.isArray(type) ? type[0]! : type;
    },
    write(chunk) {
      commit();
      return res.write(chunk);
    },
    end(trailers) {
      commit();
      res.addTrailers({ ...trailers, [RESULT_STATUS_TRAILER]: String(status), [RESULT_TYPE_TRAILER]: contentType });
      res.end();
    },
    fail(error, trailers) {
      commit();
      res.write(errorJson(error));
      res.addTrailers({
        ...trailers,
        [ERROR_TRAILER]: error.code,
        [RESULT_STATUS_TRAILER]: String(error.status),
        [RESULT_TYPE_TRAILER]: 'application/json',
      });
      res.end();
    },
  };
}
