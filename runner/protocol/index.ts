/**
 * The wire between gateway and runner, in one place. Both sides import these names from here;
 * nothing else about the wire is written down anywhere in code. The wire imports only the kernel
 * (placer/kernel/) and itself, and owns every type it carries. One module per concern:
 * - protocol/call.ts: a call's headers, answers, trailers and engine error codes;
 * - protocol/registration.ts: registration and heartbeats, their bodies and their checks;
 * - protocol/status.ts: a runner's status page;
 * - protocol/signature.ts: a call's signature, which tells a runner the call came from a gateway;
 * - protocol/launch-rules.ts and launch-policy.ts: what an engine order may launch, checked by
 *   the gateway before it stores a deployment and by the runner before it launches one;
 * - protocol/body.ts: reading a body whole under bounds and pumping a streamed one, both ways;
 * - protocol/version.ts: the product's version, which both sides report;
 * - protocol/block-hash.ts: how an engine names its KV-cache blocks (vLLM's scheme), on both sides;
 * - protocol/sim-prompt.ts: the simulated engine's tokenizer and chat template, on both sides;
 * - protocol/cache-feed.ts: the cache feed, how a runner carries its engine's cache to gateways.
 */
export * from './call.ts';
export * from './registration.ts';
export * from './status.ts';
export * from './signature.ts';
export * from './launch-rules.ts';
export * from './launch-policy.ts';
export * from './body.ts';
export * from './version.ts';
export * from './block-hash.ts';
export * from './sim-prompt.ts';
export * from './cache-feed.ts';
