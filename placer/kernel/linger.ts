/**
 * Lingering close for HTTP/1.1 servers, as nginx's `lingering_close`: an answer given before its
 * request's body was read whole (413, 408, a refusal before the body, a busy runner) is written,
 * then what the client still sends of that body is read and discarded, within bounds of time,
 * silence and bytes, before the connection closes.
 *
 * Why: a socket closed with unread bytes in its receive buffer makes the kernel send a reset,
 * and so does every segment the client sends after the close. A client still writing its body
 * then fails its write with EPIPE or ECONNRESET; one that reads only once its write is done (a
 * blocking client, most SDKs, a proxy) never sees the answer waiting for it, and reports a reset
 * instead of the 413 it was sent.
 *
 * Used by the gateway's front and by the runner (both may import the kernel; neither may import
 * the other), on their Node servers through {@link lingerEarlyAnswers}. HTTP/2 needs none of
 * it: a stream is reset on its own, the connection goes on.
 */
import type { EventEmitter } from 'node:events';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Clock } from './clock.ts';
import { systemClock } from './clock.ts';

/** How long, how quietly and how much a lingering connection may still send. */
export interface LingerBounds {
  /** Longest lingering in all, ms, counted from the answer (nginx `lingering_time`). */
  time: number;
  /** Longest silence, ms, before the first byte after the answer or between two (nginx `lingering_timeout`). */
  idle: number;
  /** Most bytes read and discarded; past them the connection closes at once. */
  maxBytes: number;
}

/**
 * nginx's bounds (30 s in all, 5 s of silence), and a byte cap well above the bodies clients are
 * expected to try (16 times the gateway's default body limit): a larger upload is cut there, and
 * a fast client cannot make the server read gigabytes for nothing in the 30 s.
 */
export const lingerDefaults: Readonly<LingerBounds> = Object.freeze({
  time: 30_000,
  idle: 5_000,
  maxBytes: 256 * 1024 * 1024,
});

/** Why a lingering ended. */
export type LingerEnd =
  /** The request's body ended: the client sent all it meant to. */
  | 'ended'
  /** The client closed the connection, or it failed. */
  | 'closed'
  /** `time` passed. */
  | 'time'
  /** `idle` passed without a byte. */
  | 'idle'
  /** More than `maxBytes` arrived. */
  | 'bytes';

/** How a lingering went. */
export interface LingerOutcome {
  end: LingerEnd;
  /** Bytes read and discarded after the answer (as they came off the socket, framing included). */
  bytes: number;
  /** ms from the lingering's start (the answer) to its end, on the clock given. */
  ms: number;
  /**
   * True when the connection was closed at the end: the answer said `connection: close`, or a
   * bound passed. False when a keep-alive connection's body ended in time and the connection
   * goes on to its next request.
   */
  closed: boolean;
}

/** Options of {@link lingerAfterAnswer} and {@link lingerEarlyAnswers}. */
export interface LingerOptions extends LingerBounds {
  /** @default the system clock */
  clock?: Clock;
  /** Told how each lingering ended (for a debug log line). */
  onEnd?(outcome: LingerOutcome): void;
}

/** One lingering in progress. */
export interface Lingering {
  /** Bytes discarded so far. */
  readonly bytes: number;
  /** Settles when the lingering ends; never rejects. */
  readonly done: Promise<LingerOutcome>;
}

/**
 * Makes every HTTP/1.1 answer of `server` that ends before its request's body was read whole
 * linger (see {@link lingerAfterAnswer}). Runs before the server's own request listener, so that
 * an answer written at once, inside that listener, is caught too. HTTP/2 requests are left alone.
 */
export function lingerEarlyAnswers(server: EventEmitter, options: LingerOptions): void {
  // A node:http server, or a node:http2 one with allowHTTP1 (whose HTTP/1.1 requests are these).
  server.prependListener('request', (req: IncomingMessage, res: ServerResponse) => {
    if (req.httpVersionMajor !== 1) return;
    // 'prefinish' comes when the answer's last byte is handed over, before Node's own 'finish'
    // step, which closes or keeps the connection: the one moment to take the close over.
    res.once('prefinish', () => {
      if (!req.complete) lingerAfterAnswer(req, res, options);
    });
  });
}

/**
 * Lingers after `res`, an answer to `req` given before `req`'s body was read whole; call it
 * before the answer's end reaches Node's 'finish' step (from 'prefinish' at the latest).
 *
 * From this call on, the rest of the body is read and discarded until it ends, the client
 * closes, `idle` passes without a byte, `time` passes, or more than `maxBytes` arrive. A
 * `connection: close` answer has its write side shut once written, as usual (the client sees the
 * answer and the end of it), but the socket is closed only when the lingering ends. A keep-alive
 * answer keeps its connection when the body ends within the bounds, and loses it at a bound.
 */
export function lingerAfterAnswer(req: IncomingMessage, res: ServerResponse, options: LingerOptions): Lingering {
  const { time, idle, maxBytes, clock = systemClock, onEnd } = options;
  const socket = req.socket;
  /** Node's 'finish' step ran: it closed the connection (closeAsked) or kept it. */
  let answered = false;
  let closeAsked = false;
  let bytes = 0;
  let over: LingerEnd | undefined;
  // Node's server closes the connection of a finished `connection: close` answer with
  // socket.destroySoon(): the write side shut, then the socket destroyed, unread bytes and all.
  // Here it shuts the write side only; the lingering closes the socket at its end.
  socket.destroySoon = function lingeringDestroySoon(): void {
    closeAsked = true;
    if (socket.writable) socket.end();
  };
  const restore = (): void => {
    delete (socket as Partial<Pick<typeof socket, 'destroySoon'>>).destroySoon;
  };
  let settle!: (outcome: LingerOutcome) => void;
  const done = new Promise<LingerOutcome>((resolve) => (settle = resolve));
  const stop = new AbortController();
  const started = clock.now();
  let last = started;

  /** Closes as the end asks, once the lingering is over and Node's 'finish' step has run. */
  const close = (end: LingerEnd): void => {
    restore();
    const bound = end === 'time' || end === 'idle' || end === 'bytes';
    // At a bound the rest is dropped: a reset now costs the client nothing, it had the answer
    // all this time. After the body's end nothing is left unread, so Node's own close will do.
    if (bound) socket.destroy();
    else if (closeAsked && end === 'ended') socket.destroySoon();
  };
  const finish = (end: LingerEnd): void => {
    if (over) return;
    over = end;
    stop.abort();
    req.off('data', onData);
    req.off('end', onBodyEnd);
    socket.off('close', onClose);
    // Before Node's 'finish' step a body that ended needs nothing more (Node closes or keeps the
    // connection as usual); a bound closes now.
    if (answered || (end !== 'ended' && end !== 'closed')) close(end);
    else restore();
    const closed = end === 'time' || end === 'idle' || end === 'bytes' || end === 'closed' || closeAsked;
    const outcome: LingerOutcome = { end, bytes, ms: clock.now() - started, closed };
    onEnd?.(outcome);
    settle(outcome);
  };
  const onData = (chunk: Buffer): void => {
    bytes += chunk.length;
    last = clock.now();
    if (bytes > maxBytes) finish('bytes');
  };
  const onBodyEnd = (): void => finish('ended');
  const onClose = (): void => finish('closed');

  // Read from now on: Node's 'finish' step then finds the body being read and does not dump it
  // (a dumped body is parsed and dropped without 'data' events, so its bytes could not be counted).
  req.on('data', onData);
  req.once('end', onBodyEnd);
  socket.once('close', onClose);
  req.resume();
  // After Node's own 'finish' step (its listener came first): it has called destroySoon or not.
  res.once('finish', () => {
    answered = true;
    if (over === undefined && !closeAsked) restore();
  });
  // An answer cut short (the client left) never finishes: nothing to linger over.
  res.once('close', () => {
    if (!res.writableFinished) finish('closed');
  });
  void watch();

  async function watch(): Promise<void> {
    let polled = false;
    while (over === undefined) {
      const now = clock.now();
      const due = Math.min(last + idle, started + time);
      if (now >= due) {
        // A process that was stalled wakes to its timers before it reads what arrived meanwhile:
        // let one poll of the loop deliver those bytes before the silence is judged.
        if (!polled && now < started + time) {
          polled = true;
          await new Promise<void>((resolve) => setImmediate(resolve));
          continue;
        }
        return finish(now >= started + time ? 'time' : 'idle');
      }
      polled = false;
      await clock.sleep(due - now, stop.signal).catch(() => undefined);
    }
  }

  return {
    get bytes() {
      return bytes;
    },
    done,
  };
}
