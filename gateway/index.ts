/**
 * The gateway's public face for code outside gateway/: what a package user (and the bench in
 * k6/) may import, the composition root (createGateway in server.ts) first. It lends the few
 * pieces of the call path that a model of the gateway must run as they are (the wait queue, the
 * runner load, the key ring and limits, the truth index of the engines' caches) with the options and errors they speak, so a simulation
 * measures the product's rules rather than a copy of them. Like every other import across
 * rooms, they come through each room's face.
 */
export { createGateway } from './server.ts';
export type { Gateway } from './server.ts';
export { gatewayDefaults } from './options.ts';
export type { GatewayOptions } from './options.ts';
export { GatewayError, QueueFullError } from './errors.ts';
export { WaitQueue } from './calls/index.ts';
export type { Waiter } from './calls/index.ts';
export { affinityKey, renderPrompt } from './http/index.ts';
export { PromptMapper } from './tokens/index.ts';
export type { PromptBlocks, PromptMapperOptions, PromptSource } from './tokens/index.ts';
export type { Priority } from './http/index.ts';
export { CacheIndex, EndedCalls, runnerLoad } from './fleet/index.ts';
export type { CacheIndexOptions, FeedOutcome } from './fleet/index.ts';
export { KeyCalls, KeyRing, createMemoryLimiter, hashToken, newKeyToken, parseKeysFile } from './access/index.ts';
export type { Limiter } from './access/index.ts';
