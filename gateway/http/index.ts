/**
 * The HTTP front: the request-target check and request ids, the TLS of the front, the headers
 * a client speaks, body buffering and the client connections the server keeps.
 *
 * The room's public face: what other rooms take from it.
 */
export { readBody } from './body.ts';
export { ClientConnections } from './client-connections.ts';
export { checkFrontListen } from './front-tls.ts';
export {
  answerClientError,
  clientRequestId,
  frontDoor,
  guardListener,
  requestErrorResponse,
} from './front.ts';
export {
  CALLBACK_URL_HEADER,
  FLOW_HEADER,
  IDEMPOTENCY_KEY_HEADER,
  INVOKE_TYPE_HEADER,
  PRIORITY_HEADER,
  REQUEST_ID_HEADER,
  SESSION_HEADER,
  forwardable,
} from './headers.ts';
