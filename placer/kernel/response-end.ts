/**
 * Whether a server's answer reached its peer whole: the one test of "the client is gone" for
 * every server in sluice (the gateway's front, the runner, the simulated engine), over HTTP/1.1
 * and HTTP/2 alike.
 *
 * A response emits 'close' after a normal end too, so the event alone says nothing. On HTTP/1.1
 * `writableFinished` tells the two apart. HTTP/2's compatibility response cannot use it: a
 * stream reset by the peer (RST_STREAM, or its session torn down) has its writable side ended
 * by Node on the way out, so `writableFinished` reads true on a response that sent nothing. A
 * stream is whole only when its writable side ended before it closed (`aborted` is false) and
 * it closed with NO_ERROR.
 */
import type { ServerResponse } from 'node:http';
import { Http2ServerResponse, constants } from 'node:http2';

/** A server response of either protocol, as Node's HTTP/1.1 and HTTP/2 servers hand them out. */
export type AnyServerResponse = ServerResponse | Http2ServerResponse;

/**
 * True when `res` closed before its last byte reached the peer: the peer reset the stream or
 * dropped the connection, or this side destroyed it. False while `res` is still open and after
 * a whole answer.
 */
export function cutShort(res: AnyServerResponse): boolean {
  if (res instanceof Http2ServerResponse) {
    const { stream } = res;
    return stream.closed && (stream.aborted || stream.rstCode !== constants.NGHTTP2_NO_ERROR);
  }
  return res.closed && !res.writableFinished;
}

/** True once `res` can take no more bytes, whole or cut short. */
function closed(res: AnyServerResponse): boolean {
  return res instanceof Http2ServerResponse ? res.stream.closed || res.stream.destroyed : res.closed;
}

/**
 * Runs `gone` once when `res` closes cut short ({@link cutShort}), at once when it already
 * has; never when it ends whole.
 */
export function onCutShort(res: AnyServerResponse, gone: () => void): void {
  if (closed(res)) {
    if (cutShort(res)) gone();
    return;
  }
  res.once('close', () => {
    if (cutShort(res)) gone();
  });
}
