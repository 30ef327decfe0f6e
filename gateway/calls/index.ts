/**
 * The call path: the agent that serves a call, admission of uploads, the wait queue and its
 * deadlines, placement on the pool, the relay of the answer, inference timings and the call itself.
 *
 * The room's public face: what other rooms take from it.
 */
export { ClientCounts, clientKey, notReadyReasons } from './admission.ts';
export { LbAgent } from './agent.ts';
export { OPENAI_CALL_ROUTES, callRouteOf, uuidv7 } from './call.ts';
export type { CallOutcome, CallOverride, CallRoute, GatewayCall } from './call.ts';
export { waitQueueFor } from './placement.ts';
export { stripInjectedUsage } from './usage-strip.ts';
export { PRIORITIES, isPriority } from './wait-queue.ts';
export type { Priority, QueueSnapshot } from './wait-queue.ts';
