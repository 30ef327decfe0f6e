/**
 * Detached calls: how a client asks for one, the record the gateway keeps in the call store,
 * the background side that finishes it, and its routes. The call store and the callbacks that
 * report a call's end are rooms of their own (gateway/store/, gateway/callbacks/), below this one.
 *
 * The room's public face: what other rooms take from it.
 */
export { registerCallRoutes } from './call-routes.ts';
export { DetachedSignal, detachedResult } from './detached-flow.ts';
export type { DetachedReply } from './detached-flow.ts';
export { DetachedRuns } from './detached-run.ts';
export { DetachedCalls } from './detached.ts';
export { parsePreference } from './prefer.ts';
export type { CallPreference } from './prefer.ts';
