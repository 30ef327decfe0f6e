/**
 * Buffering the request body before placement. A buffered body is what lets a call go to a
 * second runner when the first is busy; the bounds keep one client from holding memory or a
 * connection without limit. The reading itself is the wire's (runner/protocol/body.ts), shared
 * with the runner; this file gives it the gateway's bounds and errors.
 */
import type { IncomingMessage } from 'node:http';
import { readBody as readBounded } from '../../runner/protocol/body.ts';
import type { BodyRead } from '../../runner/protocol/body.ts';
import type { AbortWatch } from '../../placer/kernel/index.ts';
import { BodyTimeoutError, BodyTooLargeError } from '../errors.ts';

/** Bounds on reading one body. */
export interface BodyLimits {
  /** Largest body accepted, in bytes. */
  maxBytes: number;
  /** Longest time the whole body may take to arrive, in ms, counted from the call's arrival. */
  timeout: number;
  /**
   * Longest silence between two chunks of the body, in ms, counted from the call's arrival for
   * the first: a minimum rate, so a body that trickles a byte now and then cannot hold its
   * upload slot for the whole `timeout`. Off when not given.
   */
  idleTimeout?: number;
}

/**
 * Reads the whole body. Rejects with {@link BodyTooLargeError} as soon as the declared or the
 * received length passes `maxBytes`, and with {@link BodyTimeoutError} when it takes too long
 * in all or stalls between two chunks for longer than `idleTimeout`.
 * A client that goes away (the request closes first, or `clientGone` aborts: see
 * placer/kernel/response-end.ts) rejects with a plain Error; the caller treats it as cancelled.
 */
export type BodyReader = (incoming: IncomingMessage, clientGone?: AbortWatch) => Promise<Buffer>;

/** The {@link BodyReader} of `limits`: its bounds and errors are built once, not per call. */
export function bodyReader(limits: BodyLimits): BodyReader {
  const { maxBytes, timeout, idleTimeout } = limits;
  const read: BodyRead = {
    maxBytes,
    tooLarge: (declared) => {
      const size = declared === undefined ? 'more than that' : `${declared} bytes`;
      return new BodyTooLargeError(`request body exceeds maxBodyBytes (${maxBytes} bytes); got ${size}`);
    },
    closed: () => new Error('client closed the connection while sending the body'),
    timeout: {
      ms: timeout,
      error: () => new BodyTimeoutError(`request body not received within bodyReadTimeout (${timeout} ms)`),
    },
    ...(idleTimeout === undefined
      ? {}
      : {
          idle: {
            ms: idleTimeout,
            error: () => new BodyTimeoutError(`request body stalled: no bytes for bodyIdleTimeout (${idleTimeout} ms)`),
          },
        }),
  };
  return (incoming, clientGone) => readBounded(incoming, read, clientGone);
}
