/**
 * Buffering the request body before placement. A buffered body is what lets a call go to a
 * second runner when the first is busy; the bounds keep one client from holding memory or a
 * connection without limit.
 */
import type { IncomingMessage } from 'node:http';
import { BodyTimeoutError, BodyTooLargeError } from './errors.ts';

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
 * A client that goes away rejects with the stream's error; the caller treats it as cancelled.
 */
export function readBody(incoming: IncomingMessage, limits: BodyLimits): Promise<Buffer> {
  const declared = Number(incoming.headers['content-length']);
  if (Number.isFinite(declared) && declared > limits.maxBytes) {
    return Promise.reject(tooLarge(limits.maxBytes, declared));
  }
  if (incoming.readableEnded) return Promise.resolve(Buffer.alloc(0));
  return new Promise<Buffer>((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const finish = (error?: Error): void => {
      clearTimeout(timer);
      clearTimeout(idle);
      incoming.off('data', onData);
      incoming.off('end', onEnd);
      incoming.off('error', finish);
      incoming.off('close', onClose);
      if (error) {
        // Stop reading what is left; the response to this call closes the connection.
        incoming.pause();
        reject(error);
      } else {
        resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size));
      }
    };
    const onData = (chunk: Buffer): void => {
      // refresh() re-arms the same timer: cheaper than a new one per chunk of a large body.
      idle?.refresh();
      size += chunk.length;
      if (size > limits.maxBytes) return finish(tooLarge(limits.maxBytes));
      chunks.push(chunk);
    };
    const onEnd = (): void => finish();
    const onClose = (): void => {
      if (!incoming.readableEnded) finish(new Error('client closed the connection while sending the body'));
    };
    const timer = setTimeout(
      () => finish(new BodyTimeoutError(`request body not received within bodyReadTimeout (${limits.timeout} ms)`)),
      limits.timeout,
    );
    const idle =
      limits.idleTimeout === undefined
        ? undefined
        : setTimeout(
            () => finish(new BodyTimeoutError(`request body stalled: no bytes for bodyIdleTimeout (${limits.idleTimeout} ms)`)),
            limits.idleTimeout,
          );
    incoming.on('data', onData);
    incoming.once('end', onEnd);
    incoming.once('error', finish);
    incoming.once('close', onClose);
  });
}

function tooLarge(maxBytes: number, declared?: number): BodyTooLargeError {
  const size = declared === undefined ? 'more than that' : `${declared} bytes`;
  return new BodyTooLargeError(`request body exceeds maxBodyBytes (${maxBytes} bytes); got ${size}`);
}
