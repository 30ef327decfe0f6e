/**
 * The call on the wire: the headers a gateway sends with a call, what a runner may answer and in
 * which order, the trailers, and the helpers both sides use to forward a call one hop on.
 *
 * Request (gateway to runner): the client's method, path and buffered body, plus the headers
 * below; the client's other headers, W3C `traceparent` included, pass through to the engine.
 *
 * Response (runner to gateway), in the order it can come:
 * - no free slot: 503 with {@link BUSY_HEADER} set, sent before the body is read. A busy answer
 *   is the runner's word that nothing ran, so it may come later too (the engine refused the call
 *   before any output); it is the only answer a gateway may retry elsewhere.
 * - the acknowledgement, for a request that carries {@link RESPONSE_TIMEOUT_HEADER}: `102
 *   Processing` once the runner has the whole call and before it asks its engine, then again every
 *   third of that bound until the final status line. A gateway that got no response at all within that time knows the engine never saw the
 *   call (the runner is hung, or gone) and may place it elsewhere; once acknowledged, the call is
 *   committed, and silence past that time is a failure after commit.
 * - committed, sync: the engine's status and headers, held back until its first body byte so that
 *   the acknowledgements cover the engine's queue and prefill; the body streamed; then the trailer
 *   {@link EXEC_TRAILER} (`server-timing: exec;dur=<ms>`), and {@link ERROR_TRAILER} when the
 *   engine failed mid-body.
 * - committed, detached ({@link CALL_TYPE_HEADER} `detached`): 202 once the engine accepted the
 *   call (answered anything but 429 or 503 within the runner's accept window, or kept it past
 *   that window), then the engine's body, then the trailers above plus
 *   {@link RESULT_STATUS_TRAILER} and {@link RESULT_TYPE_TRAILER}.
 */

/** Request header: the call id (UUIDv7). */
export const CALL_ID_HEADER = 'sluice-call-id';
/**
 * Request header: the call's execution budget in ms, counted by the runner from when the call
 * reaches it. Relative, as gRPC's `grpc-timeout` and Envoy's expected-timeout headers are: an
 * absolute time would mean nothing on a runner whose clock is off.
 */
export const TIMEOUT_HEADER = 'sluice-timeout';
/**
 * Request header: the gateway's response bound in ms. No response within it (not even the
 * acknowledgement) and the gateway gives the call up as never taken; after the
 * acknowledgement, the runner repeats it at least every third of this until the final status.
 */
export const RESPONSE_TIMEOUT_HEADER = 'sluice-response-timeout';
/** The informational status a runner acknowledges a call with (RFC 2518's 102 Processing). */
export const ACK_STATUS = 102;
/** Request header: `sync` or `detached`. */
export const CALL_TYPE_HEADER = 'sluice-call-type';
/** Request header: the function the gateway placed the call for (model or `:fn`). */
export const FUNCTION_HEADER = 'sluice-function';
/**
 * Response header on a busy answer; its value says why: `slots` (all taken), `starting` (the
 * engine is loading), `draining`, `engine-busy` (the engine refused with 429 or 503 before any
 * output), `engine-unreachable` (the engine refused the connection), `engine-failed` (the
 * runner's supervisor gave up relaunching its engine), `late` (read right after a stall of the
 * runner's process: its gateway may have placed the call elsewhere meanwhile).
 */
export const BUSY_HEADER = 'sluice-runner-busy';
/** Response header: the id of the runner that committed to the call. */
export const RUNNER_ID_HEADER = 'sluice-runner-id';

/** Trailer of a detached call's 202: the status the engine answered with. */
export const RESULT_STATUS_TRAILER = 'sluice-result-status';
/** Trailer of a detached call's 202: the content type of the engine's answer. */
export const RESULT_TYPE_TRAILER = 'sluice-result-content-type';

/** Trailer carrying execution time: engine request start to its last byte. */
export const EXEC_TRAILER = 'server-timing';
/**
 * Set when the engine failed after the runner committed; its value is an error code
 * (`RUNNER_ENGINE_FAILED`, `RUNNER_ENGINE_TIMEOUT`). A trailer when the failure came mid-body,
 * a header on the runner's own 502/504 when the engine failed before answering, and on its 401
 * (`RUNNER_UNAUTHORIZED`, protocol/signature.ts) to a call without a gateway's credential.
 */
export const ERROR_TRAILER = 'sluice-error';

/**
 * The codes a runner puts in {@link ERROR_TRAILER} (or its busy body's `error.code`) to say how
 * its engine failed a call. The gateway maps each to the error its client gets.
 */
export const EngineErrorCode = Object.freeze({
  /** The engine failed the call (crashed, broke its stream, answered nonsense). */
  failed: 'RUNNER_ENGINE_FAILED',
  /** The call ran to the end of its time budget and the runner stopped it. */
  timeout: 'RUNNER_ENGINE_TIMEOUT',
  /** The engine refused the call (429 or 503) after the runner had accepted it; nothing ran. */
  busy: 'RUNNER_ENGINE_BUSY',
});
/** One of {@link EngineErrorCode}'s values. */
export type EngineErrorCode = (typeof EngineErrorCode)[keyof typeof EngineErrorCode];

/**
 * Headers a proxy must not forward hop to hop (RFC 9110 section 7.6.1), plus ones we recompute
 * (`host`, `content-length`). `expect` is here because each hop's own server answers
 * `100 Continue` (Node does it before the request handler runs), as nginx and Envoy do; passed
 * on, it would ask the next hop for an interim answer nobody waits for, and undici refuses to
 * send it at all. The `proxy-*` credentials are meant for the first proxy and no one behind it.
 */
export const HOP_BY_HOP_HEADERS: ReadonlySet<string> = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'proxy-authorization',
  'transfer-encoding',
  'te',
  'trailer',
  'upgrade',
  'expect',
  'host',
  'content-length',
]);

/**
 * Copies headers minus the hop-by-hop ones, for forwarding a request or a response one hop on:
 * the fixed set above and every header the `Connection` header names (RFC 9110 section 7.6.1),
 * which a sender uses to mark its own extensions as meant for this hop only. Values stay as they
 * are (arrays for repeated headers such as set-cookie). Names are expected in lowercase, as Node
 * and undici give them. `drop` names more headers to leave out; `add` sets headers on the copy
 * (over any of the same name).
 */
export function withoutHopByHop(
  headers: Record<string, string | string[] | undefined>,
  options: { drop?: ReadonlySet<string>; add?: Readonly<Record<string, string>> } = {},
): Record<string, string | string[]> {
  const nominated = connectionTokens(headers.connection);
  const { drop, add } = options;
  const out: Record<string, string | string[]> = {};
  for (const name in headers) {
    const value = headers[name];
    // HTTP/2's pseudo-headers (`:method`, `:path`, ...) describe this hop's request, as hop-by-hop ones do.
    if (
      value === undefined ||
      HOP_BY_HOP_HEADERS.has(name) ||
      name.charCodeAt(0) === COLON ||
      nominated?.has(name) ||
      drop?.has(name)
    )
      continue;
    out[name] = value;
  }
  // Added here rather than by the caller spreading the copy into another object: one copy per call.
  if (add) for (const name in add) out[name] = add[name]!;
  return out;
}

const COLON = 0x3a;

/** A `Connection` value that lists no header name beyond the hop-by-hop ones: `keep-alive`, `close`. */
const SIMPLE_CONNECTION = /^\s*(?:keep-alive|close)\s*$/i;

/** The header names a `Connection` value lists, lowercased; undefined when there is none to drop. */
function connectionTokens(value: string | string[] | undefined): Set<string> | undefined {
  if (value === undefined) return undefined;
  // The values nearly every request and response carry name no header to drop: no set for them.
  if (typeof value === 'string' && SIMPLE_CONNECTION.test(value)) return undefined;
  const tokens = new Set<string>();
  for (const line of Array.isArray(value) ? value : [value]) {
    for (const token of line.split(',')) {
      const name = token.trim().toLowerCase();
      if (name !== '') tokens.add(name);
    }
  }
  return tokens;
}

/** Formats the execution-time trailer value. */
export function formatExecTiming(ms: number): string {
  return `exec;dur=${ms.toFixed(3)}`;
}

/** A value exactly as {@link formatExecTiming} writes it. */
const OWN_EXEC_TIMING = /^exec;dur=(\d+(?:\.\d+)?)$/;

/**
 * Reads the execution time from a `server-timing` value, or undefined when absent or malformed.
 * Other metrics in the same header are ignored.
 */
export function parseExecTiming(value: string | string[] | undefined): number | undefined {
  if (value === undefined) return undefined;
  // What a sluice runner sends (formatExecTiming), read without splitting: every call has one.
  if (typeof value === 'string') {
    const own = OWN_EXEC_TIMING.exec(value);
    if (own) return Number(own[1]);
  }
  const text = Array.isArray(value) ? value.join(',') : value;
  for (const metric of text.split(',')) {
    const [name, ...params] = metric.trim().split(';');
    if (name?.trim() !== 'exec') continue;
    for (const param of params) {
      const [key, raw] = param.trim().split('=');
      if (key === 'dur' && raw !== undefined && raw.trim() !== '') {
        const ms = Number(raw);
        return Number.isFinite(ms) && ms >= 0 ? ms : undefined;
      }
    }
  }
  return undefined;
}

/**
 * Error codes of undici and Node that mean a connection was never made, so nothing was sent:
 * the one transport failure after which a call may go to another runner.
 */
export const CONNECT_ERROR_CODES: ReadonlySet<string> = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EADDRNOTAVAIL',
  'UND_ERR_CONNECT_TIMEOUT',
]);

/** True when `error` says the connection was never established, so the request never left. */
export function isConnectError(error: unknown): boolean {
  let e: unknown = error;
  // undici sometimes wraps the socket error; look one level down too.
  for (let depth = 0; depth < 3 && e instanceof Error; depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && CONNECT_ERROR_CODES.has(code)) return true;
    e = e.cause;
  }
  return false;
}

/**
 * Holds writes to `res` until the end of this turn of the event loop, so a status line, a
 * body that arrives in one piece and the end of the response go out in one system call instead
 * of three. A token stream loses nothing: every chunk still leaves in the turn it arrived.
 */
export function coalesceWrites(res: {
  cork(): void;
  uncork(): void;
  writableCorked: number;
  destroyed: boolean;
}): void {
  if (res.writableCorked > 0 || res.destroyed) return;
  res.cork();
  setImmediate(() => {
    if (!res.destroyed) res.uncork();
  });
}
