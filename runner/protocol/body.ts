/**
 * Bodies on the wire, both ways, for the runner and the gateway alike: reading a request body
 * whole under bounds, and pumping a streamed body into a Node response at the pace the peer
 * reads it. Part of the wire because both sides move bodies to each other by these rules.
 *
 * Each side keeps its own errors: the reader raises whatever its caller builds (the gateway's
 * GW_ codes, the runner's RUNNER_BODY_TOO_LARGE), and the pump leaves a stream's end and failure
 * to its caller.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Readable } from 'node:stream';
import type { AbortWatch } from '../../placer/kernel/index.ts';
import { coalesceWrites } from './call.ts';

/** A bound on time with the error that passing it raises. */
export interface TimeBound {
  /** The bound, ms. */
  ms: number;
  error(): Error;
}

/** How one body is read: its bounds, and the error each of them raises. */
export interface BodyRead {
  /** Largest body accepted, in bytes. */
  maxBytes: number;
  /**
   * The error for a body over `maxBytes`: `declared` is the declared length when that alone
   * refused it before a byte was read, undefined when the bytes received passed the bound.
   */
  tooLarge(declared: number | undefined): Error;
  /** The error when the peer closes the connection before the body's end. */
  closed(): Error;
  /** Longest time the whole body may take, counted from this call. Off when not given. */
  timeout?: TimeBound;
  /**
   * Longest silence between two chunks, counted from this call for the first: a minimum rate,
   * so a body that trickles a byte now and then cannot hold a connection for the whole
   * `timeout`. Off when not given.
   */
  idle?: TimeBound;
}

/**
 * Reads the whole body of `incoming`. Rejects with `tooLarge` as soon as the declared or the
 * received length passes `maxBytes`, with the bound's error when `timeout` or `idle` passes,
 * with `closed` when the peer hangs up first or `gone` aborts (the peer gone, however the caller
 * learnt it: an HTTP/2 request whose stream was reset before the read began has no 'close' left
 * to emit), and with the stream's own error when it fails. `read` holds nothing of one call, so
 * a caller builds it once.
 * On a rejection the rest of the body is left unread (the stream paused): the caller's answer
 * should close the connection. The body is the reader's alone: nothing else listens to it.
 */
export async function readBody(incoming: IncomingMessage, read: BodyRead, gone?: AbortWatch): Promise<Buffer> {
  const declared = Number(incoming.headers['content-length']);
  if (Number.isFinite(declared) && declared > read.maxBytes) throw read.tooLarge(declared);
  if (gone?.aborted) throw read.closed();
  const here = arrived(incoming, declared);
  if (here) return here;
  // A request is handed over when its headers are parsed; a small body in the same packet is
  // pushed only after that, before the parse returns. Looking again once it has returned finds
  // such a body whole, with no timer or listener to set and take off.
  await undefined;
  return arrived(incoming, declared) ?? waitForBody(incoming, read, gone);
}

/**
 * The whole body when nothing is left to wait for: every declared byte buffered, or the stream
 * ended. Undefined when it must be waited for (or the peer is gone: {@link waitForBody} says so).
 */
function arrived(incoming: IncomingMessage, declared: number): Buffer | undefined {
  if (incoming.readableEnded) return Buffer.alloc(0);
  if (incoming.destroyed || incoming.readableFlowing || !(incoming.readableLength >= declared)) return undefined;
  return declared === 0 ? Buffer.alloc(0) : (incoming.read(declared) as Buffer);
}

/** Reads the body as it arrives, under `read`'s bounds. */
function waitForBody(incoming: IncomingMessage, read: BodyRead, gone: AbortWatch | undefined): Promise<Buffer> {
  if (gone?.aborted || incoming.destroyed) return Promise.reject(read.closed());
  return new Promise<Buffer>((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const finish = (error?: Error): void => {
      clearTimeout(whole);
      clearTimeout(idle);
      incoming.off('data', onData);
      incoming.off('end', onEnd);
      incoming.off('error', finish);
      incoming.off('close', onClose);
      gone?.removeEventListener('abort', onGone);
      if (error) {
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
      if (size > read.maxBytes) return finish(read.tooLarge(undefined));
      chunks.push(chunk);
    };
    const onEnd = (): void => finish();
    const onClose = (): void => {
      if (!incoming.readableEnded) finish(read.closed());
    };
    const onGone = (): void => finish(read.closed());
    const bound = (limit: TimeBound | undefined) =>
      limit === undefined ? undefined : setTimeout(() => finish(limit.error()), limit.ms);
    const whole = bound(read.timeout);
    const idle = bound(read.idle);
    incoming.on('data', onData);
    incoming.once('end', onEnd);
    incoming.once('error', finish);
    incoming.once('close', onClose);
    gone?.addEventListener('abort', onGone, { once: true });
  });
}

/**
 * Writes one chunk of a pumped body to the response, or holds it back (an SSE relay keeps half
 * an event until the rest arrives); false when the response's buffer is full.
 */
export type PumpWrite = (chunk: Buffer) => boolean;

/**
 * Pumps the chunks of `source` into `res` through `write`: writes made in one turn of the event
 * loop leave in one system call (coalesceWrites), and the source pauses whenever `write` says
 * `res` is full and resumes on its 'drain', so a slow reader holds the producer back instead of
 * filling this process's memory. The source's end and failure stay with the caller, which alone
 * knows what a finished or cut stream means to its client.
 */
export function pumpBody(source: Readable, res: ServerResponse, write: PumpWrite): void {
  source.on('data', (chunk: Buffer) => {
    coalesceWrites(res);
    if (!write(chunk)) {
      source.pause();
      res.once('drain', () => source.resume());
    }
  });
}
