/**
 * The HTTP front: the request-target check and request ids, the TLS of the front, the headers
 * a client speaks, body buffering and the client connections the server keeps; and the call as
 * the gateway carries it, its routes, priority class and outcome, which every room speaks of.
 *
 * The room's public face: what other rooms take from it.
 */
export { bodyReader } from './body.ts';
export type { BodyReader } from './body.ts';
export {
  OPENAI_CALL_ROUTES,
  PRIORITIES,
  affinityKey,
  callRouteOf,
  isPriority,
  parseInferenceBody,
  renderPrompt,
  renderResponsesPrompt,
  routedPath,
  uuidv7,
} from './call.ts';
export type {
  CallOutcome,
  CallOverride,
  CallResult,
  CallRoute,
  CallType,
  GatewayCall,
  ParsedBody,
  Priority,
  PromptParts,
  UsageUnasked,
} from './call.ts';
export { ClientConnections, ClientCounts, clientKey } from './client-connections.ts';
export { ANY_ORIGIN, Cors, EXPOSED_HEADERS, corsOriginsProblem } from './cors.ts';
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
