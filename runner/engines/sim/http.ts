/**
 * Small node:http helpers the simulator's handlers share: OpenAI-shaped JSON answers and a
 * bounded body reader. Plain node:http rather than a framework, because the simulator sits
 * under every benchmark and must cost less than what it stands in for.
 */
import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import { invalidBody, refusal } from './refusals.ts';
import type { ApiError } from './refusals.ts';

/** Writes a complete JSON response. */
export function sendJson(res: ServerResponse, status: number, body: unknown, headers: OutgoingHttpHeaders = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    ...headers,
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(text),
  });
  res.end(text);
}

/**
 * Writes an error as vLLM's ErrorResponse, `{"error":{"message","type","param","code"}}` with
 * `code` the status as a number, unless a response already began (then the connection is cut,
 * the only way left to say the answer is incomplete).
 */
export function sendError(res: ServerResponse, error: ApiError, headers: OutgoingHttpHeaders = {}): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const { status, type, message, param = null } = error;
  sendJson(res, status, { error: { message, type, param, code: status } }, headers);
}

/** How reading a body ended. */
export type BodyResult =
  | { readonly kind: 'read'; readonly body: Buffer }
  | { readonly kind: 'too-large' }
  | { readonly kind: 'closed' };

/**
 * Reads the whole request body, up to `limit` bytes. A declared length over the limit is refused
 * before a byte is read; past the limit the rest is drained and discarded, not buffered.
 */
export function readBody(req: IncomingMessage, limit: number): Promise<BodyResult> {
  const declared = Number(req.headers['content-length']);
  if (Number.isFinite(declared) && declared > limit) {
    req.resume();
    return Promise.resolve({ kind: 'too-large' });
  }
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let settled = false;
    const settle = (result: BodyResult): void => {
      if (settled) return;
      settled = true;
      resolve(result);
    };
    req.on('data', (chunk: Buffer) => {
      if (settled) return;
      size += chunk.length;
      if (size > limit) {
        chunks.length = 0;
        settle({ kind: 'too-large' });
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => settle({ kind: 'read', body: chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks) }));
    req.on('close', () => settle({ kind: 'closed' }));
    req.on('error', () => settle({ kind: 'closed' }));
  });
}

/** Parses a JSON object body, or returns the 400 to answer with. */
export function parseJsonObject(
  body: Buffer,
): { kind: 'ok'; value: Record<string, unknown> } | { kind: 'bad'; error: ApiError } {
  let value: unknown;
  try {
    value = JSON.parse(body.toString('utf8'));
  } catch (cause) {
    const detail = cause instanceof Error ? cause.message : String(cause);
    return { kind: 'bad', error: invalidBody('json_invalid', 'JSON decode error', detail) };
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return {
      kind: 'bad',
      error: invalidBody(
        'model_attributes_type',
        'Input should be a valid dictionary or object to extract fields from',
        value,
      ),
    };
  }
  return { kind: 'ok', value: value as Record<string, unknown> };
}

/** Reads a whole body, answering 413 itself; undefined when it answered or the client left. */
export async function readRawBody(
  req: IncomingMessage,
  res: ServerResponse,
  limit: number,
): Promise<Buffer | undefined> {
  const result = await readBody(req, limit);
  if (result.kind === 'too-large') {
    // Closing stops a client that is still uploading from costing us the rest of its body.
    sendError(res, refusal(413, `request body exceeds ${limit} bytes`), { connection: 'close' });
    return undefined;
  }
  return result.kind === 'read' ? result.body : undefined;
}

/** Reads and parses a JSON object body, answering 400/413 itself; undefined when it answered or the client left. */
export async function readJsonBody(
  req: IncomingMessage,
  res: ServerResponse,
  limit: number,
): Promise<Record<string, unknown> | undefined> {
  const raw = await readRawBody(req, res, limit);
  if (raw === undefined) return undefined;
  const parsed = parseJsonObject(raw);
  if (parsed.kind === 'bad') {
    sendError(res, parsed.error);
    return undefined;
  }
  return parsed.value;
}
