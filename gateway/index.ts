/**
 * The gateway's public face for code outside gateway/: what a package user (and the bench in
 * k6/) may import besides the composition root (createGateway in server.ts). It lends the few
 * pieces of the call path that a model of the gateway must run as they are (the wait queue, the
 * runner load, the key ring and limits) with the options and errors they speak, so a simulation
 * measures the product's rules rather than a copy of them. The queue and the load come from
 * their own files rather than their rooms' faces, so a simulation loads them and not the call
 * path around them.
 */
export { gatewayDefaults } from './options.ts';
export type { GatewayOptions } from './options.ts';
export { GatewayError, QueueFullError } from './errors.ts';
export { WaitQueue } from './calls/wait-queue.ts';
export type { Priority, Waiter } from './calls/wait-queue.ts';
export { affinityKey, renderPrompt } from './calls/call.ts';
export { EndedCalls, runnerLoad } from './fleet/runner-load.ts';
export { KeyCalls, KeyRing, createMemoryLimiter, hashToken, newKeyToken, parseKeysFile } from './access/index.ts';
export type { Limiter } from './access/index.ts';
