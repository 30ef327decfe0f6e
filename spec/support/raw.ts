/**
 * Raw HTTP/1.1 over a TCP socket, for requests no well-behaved client would send: targets in
 * absolute-form or with dot segments (clients normalize those away), broken framing, oversized
 * headers. The answer is read to the end of the connection and split into its parts.
 */
import { connect } from 'node:net';

/** A response as it came off the wire. */
export interface RawAnswer {
  /** The status of the last (final) status line; 0 when the server sent nothing. */
  status: number;
  /** Header names lowercased; repeated headers joined with `, `. */
  headers: Record<string, string>;
  /** The body, de-chunked when the answer was chunked. */
  body: string;
  /** Everything the server sent, untouched. */
  raw: string;
  /** True when the server closed the connection (it always does here, in the end). */
  closed: boolean;
}

/**
 * Sends `head` (request line and headers, without the blank line) and then `body`, and collects
 * everything until the server closes the connection. Add `connection: close` to `head` for a
 * well-formed request, or the server keeps the connection open and this waits for its idle timeout.
 */
export function rawRequest(url: string, head: string, body: string | Buffer = ''): Promise<RawAnswer> {
  const { port, hostname } = new URL(url);
  return new Promise<RawAnswer>((resolve, reject) => {
    const socket = connect(Number(port), hostname);
    const chunks: Buffer[] = [];
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    // A reset after the server wrote its answer still leaves that answer to read.
    socket.on('error', (error: NodeJS.ErrnoException) =>
      error.code === 'ECONNRESET' || error.code === 'EPIPE' ? undefined : reject(error),
    );
    socket.on('close', () => resolve(parse(Buffer.concat(chunks).toString('latin1'))));
    socket.write(`${head}\r\n\r\n`);
    if (body.length > 0) socket.write(body);
  });
}

function parse(raw: string): RawAnswer {
  // Interim 1xx answers come first; the last status line is the real one.
  let rest = raw;
  for (;;) {
    const m = /^HTTP\/1\.1 1\d\d [^\r\n]*\r\n(?:[^\r\n]+\r\n)*\r\n/.exec(rest);
    if (!m) break;
    rest = rest.slice(m[0].length);
  }
  const end = rest.indexOf('\r\n\r\n');
  if (!/^HTTP\/1\.1 \d{3}/.test(rest) || end === -1) return { status: 0, headers: {}, body: '', raw, closed: true };
  const [statusLine, ...lines] = rest.slice(0, end).split('\r\n');
  const headers: Record<string, string> = {};
  for (const line of lines) {
    const colon = line.indexOf(':');
    const name = line.slice(0, colon).trim().toLowerCase();
    const value = line.slice(colon + 1).trim();
    headers[name] = headers[name] === undefined ? value : `${headers[name]}, ${value}`;
  }
  let body = rest.slice(end + 4);
  if (/chunked/i.test(headers['transfer-encoding'] ?? '')) body = dechunk(body);
  return {
    status: Number(statusLine!.split(' ')[1]),
    headers,
    body: Buffer.from(body, 'latin1').toString('utf8'),
    raw,
    closed: true,
  };
}

function dechunk(text: string): string {
  let out = '';
  let at = 0;
  for (;;) {
    const lineEnd = text.indexOf('\r\n', at);
    if (lineEnd === -1) return out;
    const size = parseInt(text.slice(at, lineEnd), 16);
    if (!Number.isFinite(size) || size === 0) return out;
    out += text.slice(lineEnd + 2, lineEnd + 2 + size);
    at = lineEnd + 2 + size + 2;
  }
}
