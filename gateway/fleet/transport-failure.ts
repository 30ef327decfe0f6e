/**
 * What a failed request to a runner says, read from undici's error once: for the transport's
 * offers and committed calls (http-runner.ts) and for the pool's status probes (pool.ts).
 */
import { isConnectError } from '../../runner/protocol/index.ts';

/**
 * A request's failure, by what it says about the runner:
 * - `unsendable`: undici refused the request before sending a byte (a bad header value, a
 *   method it does not support): no runner would take it either;
 * - `closed-here`: this gateway closed the runner's connections (it left the pool, or the
 *   gateway shuts down): nothing was sent;
 * - `unconnected`: no connection was made, so nothing was sent;
 * - `no-answer`: the runner took the connection and sent no status line within the bound;
 * - `body-silent`: the runner sent nothing within the bound while its body was being read;
 * - `aborted`: the request's signal ended it;
 * - `other`: anything else (a connection reset mid-answer, a malformed answer).
 */
export type TransportFailure =
  | 'unsendable'
  | 'closed-here'
  | 'unconnected'
  | 'no-answer'
  | 'body-silent'
  | 'aborted'
  | 'other';

/** undici's codes, each with the failure it names. */
const FAILURE_OF_CODE: ReadonlyMap<string, TransportFailure> = new Map([
  ['UND_ERR_INVALID_ARG', 'unsendable'],
  ['UND_ERR_NOT_SUPPORTED', 'unsendable'],
  ['UND_ERR_CLOSED', 'closed-here'],
  ['UND_ERR_DESTROYED', 'closed-here'],
  ['UND_ERR_HEADERS_TIMEOUT', 'no-answer'],
  ['UND_ERR_BODY_TIMEOUT', 'body-silent'],
  ['UND_ERR_ABORTED', 'aborted'],
]);

/**
 * What `error` says. Its own code (or an AbortError's name) decides first; only an error with
 * neither is looked into for a connection that was never made, which undici may wrap.
 */
export function transportFailure(error: unknown): TransportFailure {
  const code = (error as { code?: unknown } | null | undefined)?.code;
  const named = typeof code === 'string' ? FAILURE_OF_CODE.get(code) : undefined;
  if (named) return named;
  if ((error as Error | null | undefined)?.name === 'AbortError') return 'aborted';
  return isConnectError(error) ? 'unconnected' : 'other';
}

/** The runner took the connection and then said nothing: it is hung (SIGSTOP, a wedged event loop), not gone. */
export function isSilence(failure: TransportFailure): boolean {
  return failure === 'no-answer' || failure === 'body-silent';
}
