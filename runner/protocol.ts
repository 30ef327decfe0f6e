/**
 * The wire between gateway and runner, in one place. Both sides import these names from here;
 * nothing else about the wire is written down anywhere in code. One module per concern:
 * - protocol/call.ts: a call's headers, answers, trailers and engine error codes;
 * - protocol/registration.ts: registration and heartbeats, their bodies and their checks;
 * - protocol/status.ts: a runner's status page;
 * - protocol/signature.ts: a call's signature, which tells a runner the call came from a gateway;
 * - protocol/launch-rules.ts and launch-policy.ts: what an engine order may launch, checked by
 *   the gateway before it stores a deployment and by the runner before it launches one.
 */
export * from './protocol/call.ts';
export * from './protocol/registration.ts';
export * from './protocol/status.ts';
export * from './protocol/signature.ts';
export * from './protocol/launch-rules.ts';
export * from './protocol/launch-policy.ts';
