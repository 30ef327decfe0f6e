/**
 * The gateway's public face for code outside gateway/: what a package user (and the bench in
 * k6/) may import. It builds and serves a gateway, and lends the few pieces of the call path
 * that a model of the gateway must run as they are (the wait queue, the runner load, the key
 * ring and limits), so a simulation measures the product's rules rather than a copy of them.
 * Everything else stays behind the rooms' own faces.
 */
export { createGateway } from './server.ts';
export type { Gateway } from './server.ts';
export { gatewayDefaults } from './options.ts';
export type { GatewayOptions } from './options.ts';
export { GatewayError, QueueFullError } from './errors.ts';
export { WaitQueue, affinityKey, renderPrompt } from './calls/index.ts';
export type { Priority, Waiter } from './calls/index.ts';
export { EndedCalls, runnerLoad } from './fleet/index.ts';
export { KeyCalls, KeyRing, createMemoryLimiter, hashToken, newKeyToken, parseKeysFile } from './access/index.ts';
export type { Limiter } from './access/index.ts';
